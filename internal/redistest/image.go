package redistest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// ImageEnv names the environment variable that selects the Redis image for
// containers, for example "redis:7". It must be the official image or one
// that starts like it: "redis-server" on PATH, the entrypoint taking the
// server's arguments.
const ImageEnv = "REDLOCK_REDIS_IMAGE"

// officialImage is what a machine with a registry pulls.
const officialImage = "redis:7"

// pullTimeout bounds the pull of the official image. Without a registry the
// pull fails at once (DNS); this bounds a registry that does not answer.
const pullTimeout = 60 * time.Second

// builtRepo is the repository of images built offline from the local binary.
// Each build gets its own tag, so concurrent test binaries never share one.
const builtRepo = "redlock-redistest/redis"

// An image is a Redis image that containers run and how to run it.
type image struct {
	ref        string   // repository:tag
	entrypoint []string // nil: the image's own
	serverCmd  []string // argv that precedes the server's flags
	env        []string
	source     string // how it was found, for logs
	built      bool   // built by this process: remove when done
}

// The image is resolved once per test binary. A built image is reference
// counted: each cluster holds it, and the last to finish removes it, so that
// nothing outlives the test that made it.
var images struct {
	mu       sync.Mutex
	resolved *image // the registry or local image, once found
	failed   []string
	built    *image
	users    int
}

// acquireImage returns the image to run, in the order of issue 3:
//  1. $REDLOCK_REDIS_IMAGE;
//  2. the official image, if already local;
//  3. a pull of the official image;
//  4. an image built offline from the local redis-server and its libraries;
//  5. otherwise an error that says what to install.
//
// The caller must call releaseImage when done.
func acquireImage(pool *dockertest.Pool, logf func(string, ...any)) (*image, error) {
	images.mu.Lock()
	defer images.mu.Unlock()

	if images.resolved == nil && images.failed == nil {
		images.resolved, images.failed = resolveImage(pool, logf)
	}
	if images.resolved != nil {
		return images.resolved, nil
	}
	if images.built == nil {
		img, err := buildImage(pool)
		if err != nil {
			return nil, fmt.Errorf("no Redis image: %s; building one from the local binary: %w "+
				"(install Debian's redis-server, or set %s to a Redis 7 image)",
				strings.Join(images.failed, "; "), err, ImageEnv)
		}
		logf("redistest: %s", img.source)
		images.built = img
	}
	images.users++
	return images.built, nil
}

// releaseImage drops a reference taken by acquireImage and removes a built
// image when no cluster uses it any more.
func releaseImage(pool *dockertest.Pool, img *image) error {
	images.mu.Lock()
	defer images.mu.Unlock()
	if !img.built || images.built != img {
		return nil
	}
	images.users--
	if images.users > 0 {
		return nil
	}
	images.built = nil
	return pool.Client.RemoveImageExtended(img.ref, dc.RemoveImageOptions{Force: true})
}

// resolveImage tries steps 1 to 3. It returns the image, or why each step
// failed.
func resolveImage(pool *dockertest.Pool, logf func(string, ...any)) (*image, []string) {
	official := func(ref, source string) *image {
		return &image{ref: ref, serverCmd: []string{"redis-server"}, source: source}
	}
	if ref := os.Getenv(ImageEnv); ref != "" {
		if _, err := pool.Client.InspectImage(ref); err == nil {
			return official(ref, "image from $"+ImageEnv), nil
		}
		if err := pull(pool, ref); err != nil {
			return nil, []string{fmt.Sprintf("$%s=%s: %v", ImageEnv, ref, err)}
		}
		return official(ref, "image from $"+ImageEnv+", pulled"), nil
	}
	if _, err := pool.Client.InspectImage(officialImage); err == nil {
		return official(officialImage, "local image "+officialImage), nil
	}
	if err := pull(pool, officialImage); err != nil {
		logf("redistest: pulling %s failed, building an image offline: %v", officialImage, err)
		return nil, []string{fmt.Sprintf("%s is not local", officialImage), fmt.Sprintf("pulling it: %v", err)}
	}
	return official(officialImage, "pulled "+officialImage), nil
}

func pull(pool *dockertest.Pool, ref string) error {
	repo, tag := splitRef(ref)
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	return pool.Client.PullImage(dc.PullImageOptions{
		Repository:        repo,
		Tag:               tag,
		Context:           ctx,
		InactivityTimeout: 20 * time.Second,
		OutputStream:      io.Discard,
	}, dc.AuthConfiguration{})
}

// splitRef splits "repo:tag"; a colon inside a registry host:port is not a tag.
func splitRef(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}

// buildImage imports a root filesystem holding the local redis-server, the
// libraries it links (as ldd lists them, symlinks followed) and the dynamic
// loader. Importing a tarball works with every engine API version, where
// building from a Dockerfile depends on the builder the engine offers.
// errNoServerBinary is buildImage's error without a redis-server to build
// from: StartCluster skips on it, as on a missing engine.
var errNoServerBinary = errors.New("redis-server is not installed")

func buildImage(pool *dockertest.Pool) (*image, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoServerBinary
	}
	// Keep the name: Debian's redis-server is a symlink to redis-check-rdb,
	// and the binary picks its mode from argv[0].
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	libs, err := sharedLibraries(bin)
	if err != nil {
		return nil, err
	}
	rootfs, libDirs, err := rootfsTar(bin, libs)
	if err != nil {
		return nil, err
	}

	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	tag := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(suffix[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = pool.Client.ImportImage(dc.ImportImageOptions{
		Repository:   builtRepo,
		Tag:          tag,
		Source:       "-",
		InputStream:  bytes.NewReader(rootfs),
		OutputStream: io.Discard,
		Context:      ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("importing the image: %w", err)
	}
	return &image{
		ref:        builtRepo + ":" + tag,
		entrypoint: []string{bin},
		env:        []string{"LD_LIBRARY_PATH=" + strings.Join(libDirs, ":")},
		source:     fmt.Sprintf("built image %s:%s offline from %s and %d libraries", builtRepo, tag, bin, len(libs)),
		built:      true,
	}, nil
}

// sharedLibraries lists the absolute paths ldd reports for bin, the dynamic
// loader included.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		if p, _, _ := strings.Cut(line, " "); strings.HasPrefix(p, "/") {
			libs = append(libs, p)
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s listed no libraries", bin)
	}
	return libs, nil
}

// rootfsTar returns a tarball of bin and libs at their own paths, with
// symlinks followed, plus /data and /tmp. It also returns the libraries'
// directories, for LD_LIBRARY_PATH: the image has no ld.so.cache.
func rootfsTar(bin string, libs []string) ([]byte, []string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	libDirs := map[string]bool{}
	addDirs := func(p string) error {
		var parents []string
		for d := path.Dir(p); d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(parents[i], "/") + "/", Mode: 0o755}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range append([]string{bin}, libs...) {
		data, err := os.ReadFile(p) // follows symlinks, like cp -L
		if err != nil {
			return nil, nil, err
		}
		if err := addDirs(p); err != nil {
			return nil, nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Size: int64(len(data))}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, nil, err
		}
		if p != bin {
			libDirs[path.Dir(p)] = true
		}
	}
	for _, d := range []string{"data/", "tmp/"} {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o1777}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	var ld []string
	for d := range libDirs {
		ld = append(ld, d)
	}
	sort.Strings(ld)
	return buf.Bytes(), ld, nil
}

// Command release prepares a release of every published module of this
// repository at one version, and checks that a module outside the
// repository can take each of them with go get.
//
//	go -C tools/release run . -version v0.1.0          # what make release runs
//	go -C tools/release run . -version v0.1.0 -check   # no go.mod is written
//
// The published modules are the root and every folder with a go.mod of its
// own outside bench/ and tools/ (goredis, otel, rueidis, valkeygo). Steps:
//
//  1. Unless -check, set every requirement of a published module, in every
//     module of the repository, to -version. The replace directives that
//     point at ../ stay: they serve development, and a consumer ignores them.
//  2. Build a module proxy in a directory (-proxy, a temporary one by
//     default) that serves each published module at -version, zipped from
//     the working tree as git would tag it (tracked and untracked files, not
//     ignored ones): what proxy.golang.org will serve once the tags are
//     pushed.
//  3. Check a fresh module, outside the repository, that declares the Go
//     floor (-floor, go 1.25.0): with GOPROXY set to that directory before
//     the real proxy, and the floor's toolchain (-toolchain), go get takes
//     every published module at -version, the module builds, and its go
//     line has not moved above the floor; and go install of cmd/redlock at
//     -version gives a binary whose --version names it.
//  4. Run gorelease on every published module against the previous version
//     (the newest tag below -version, or -base); with none, gorelease still
//     checks the module as a first release (-base=none).
//  5. Print the tags to push.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
)

// goreleaseVersion pins gorelease, from golang.org/x/exp.
const goreleaseVersion = "v0.0.0-20261113113407-e3970619a1a4"

func main() {
	var opts options
	flag.StringVar(&opts.version, "version", "", "the `version` to release, vX.Y.Z (required)")
	flag.StringVar(&opts.root, "root", "", "the repository's `dir` (default: git's top level)")
	flag.StringVar(&opts.base, "base", "", "the previous `version` for the API check (default: the newest tag below -version; \"none\" for none)")
	flag.StringVar(&opts.proxy, "proxy", "", "build the module proxy in this `dir` (default: a temporary one, removed after)")
	flag.StringVar(&opts.floor, "floor", "1.25.0", "the Go `version` the consumer module declares, and must keep")
	flag.StringVar(&opts.toolchain, "toolchain", "go1.25.14", "the `toolchain` the consumer check runs with (GOTOOLCHAIN)")
	flag.BoolVar(&opts.check, "check", false, "check only: write no go.mod, run no API check")
	flag.BoolVar(&opts.skipAPI, "skip-api", false, "skip gorelease")
	flag.Parse()
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

type options struct {
	version, root, base, proxy, floor, toolchain string
	check, skipAPI                               bool
}

func run(o options) error {
	if !semver.IsValid(o.version) || semver.Canonical(o.version) != o.version || semver.Build(o.version) != "" {
		return fmt.Errorf("-version %q: want a canonical semantic version such as v0.1.0", o.version)
	}
	if semver.Major(o.version) != "v0" && semver.Major(o.version) != "v1" {
		return fmt.Errorf("-version %s: a major version above v1 needs a /vN module path first", o.version)
	}
	if o.root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("finding the repository (give -root): %v", err)
		}
		o.root = strings.TrimSpace(string(out))
	}
	mods, err := findModules(o.root)
	if err != nil {
		return err
	}
	pub := published(mods)
	fmt.Printf("published modules at %s:\n", o.version)
	for _, m := range pub {
		fmt.Printf("  %s (%s)\n", m.path, m.rel)
	}

	if !o.check {
		changed, err := setRequirements(mods, pub, o.version)
		if err != nil {
			return err
		}
		for _, c := range changed {
			fmt.Printf("updated %s\n", c)
		}
	} else if err := requirementsAt(mods, pub, o.version); err != nil {
		return err
	}

	proxy := o.proxy
	if proxy == "" {
		if proxy, err = os.MkdirTemp("", "redlock-proxy-"); err != nil {
			return err
		}
		defer os.RemoveAll(proxy)
	}
	if err := buildProxy(proxy, pub, o.version); err != nil {
		return err
	}
	if !o.check {
		// go.sum of each adapter gets the root's hashes at the version,
		// which development under replace never needed; then the zips
		// again, with those go.sum files.
		changed, err := addSums(proxy, pub, o.version)
		if err != nil {
			return err
		}
		for _, c := range changed {
			fmt.Printf("updated %s\n", c)
		}
		if err := buildProxy(proxy, pub, o.version); err != nil {
			return err
		}
	}
	fmt.Printf("module proxy with %d modules at %s in %s\n", len(pub), o.version, proxy)

	if err := checkConsumer(proxy, "", pub, o.version, o.floor, o.toolchain, []string{pub[0].path + "/cmd/redlock"}, os.Stdout); err != nil {
		return fmt.Errorf("a module outside the repository cannot take the release: %w", err)
	}

	if !o.check && !o.skipAPI {
		base := o.base
		if base == "" {
			if base, err = previousTag(o.root, o.version); err != nil {
				return err
			}
		}
		if err := apiCheck(proxy, pub, o.version, base); err != nil {
			return err
		}
	}

	fmt.Println("\nThe tags to push, once the go.mod changes are committed:")
	var tags []string
	for _, m := range pub {
		tags = append(tags, m.tag(o.version))
	}
	fmt.Printf("  git commit -am 'Release %s' && git tag -a -m %s %s\n", o.version, o.version, strings.Join(tags[:1], ""))
	for _, t := range tags[1:] {
		fmt.Printf("  git tag -a -m %s %s\n", o.version, t)
	}
	fmt.Printf("  git push origin %s\n", strings.Join(tags, " "))
	return nil
}

// previousTag is the newest tag of the root module below version, or
// "none".
func previousTag(root, version string) (string, error) {
	out, err := exec.Command("git", "-C", root, "tag", "--list", "v*").Output()
	if err != nil {
		return "", fmt.Errorf("git tag: %v", err)
	}
	best := "none"
	for _, t := range strings.Fields(string(out)) {
		if semver.IsValid(t) && semver.Compare(t, version) < 0 && (best == "none" || semver.Compare(t, best) > 0) {
			best = t
		}
	}
	return best, nil
}

// apiCheck runs gorelease in every published module. gorelease loads the
// module's requirements without its replace directives, so it reads the
// root at version from the local proxy, as a consumer would.
func apiCheck(proxy string, pub []modInfo, version, base string) error {
	if base == "none" {
		fmt.Printf("\nAPI check: no earlier version is tagged, so there is nothing to compare with; gorelease checks each module as a first release (-base=none)\n")
	} else {
		fmt.Printf("\nAPI check against %s\n", base)
	}
	// A module cache of its own, as for the consumers: a zip of an earlier
	// check under the same version must not stand in for this one.
	cache, err := os.MkdirTemp("", "redlock-modcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	env := append(proxyEnv(proxy, "", pub), "GOMODCACHE="+cache, "GOFLAGS=-mod=mod -modcacherw")
	var failed []string
	for _, m := range pub {
		fmt.Printf("== gorelease %s\n", m.path)
		// gorelease refuses a repository with uncommitted changes, which
		// the go.mod updates are until the release commit; it checks the
		// module as the proxy serves it instead, unpacked outside the
		// repository.
		dir, cleanup, err := unpack(proxy, m, version)
		if err != nil {
			return err
		}
		cmd := exec.Command("go", "run", "golang.org/x/exp/cmd/gorelease@"+goreleaseVersion, "-base="+base, "-version="+version)
		cmd.Dir, cmd.Env = dir, env
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			failed = append(failed, m.path)
		}
		cleanup()
	}
	if len(failed) > 0 {
		return fmt.Errorf("gorelease found problems in %s", strings.Join(failed, ", "))
	}
	return nil
}

// proxyEnv is the environment of a go command that reads the published
// modules from the local proxy first and everything else from the usual
// one. The local modules are in no checksum database yet;
// upstream "off" serves the local modules alone.
func proxyEnv(proxy, upstream string, pub []modInfo) []string {
	goproxy := "file://" + filepath.ToSlash(proxy)
	if upstream != "off" {
		// The machine's module cache is a proxy too: what it holds needs
		// no network.
		if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			goproxy += ",file://" + filepath.ToSlash(filepath.Join(strings.TrimSpace(string(out)), "cache", "download"))
		}
		goproxy += "," + upstreamProxy()
	}
	return append(os.Environ(),
		"GOPROXY="+goproxy,
		"GONOSUMDB="+pub[0].path,
		"GOFLAGS=-mod=mod",
		"GOWORK=off",
	)
}

// upstreamProxy is this machine's GOPROXY, or the default one.
func upstreamProxy() string {
	out, _ := exec.Command("go", "env", "GOPROXY").Output()
	if up := strings.TrimSpace(string(out)); up != "" && up != "off" {
		return up
	}
	return "https://proxy.golang.org,direct"
}

func (m modInfo) tag(version string) string {
	if m.rel == "." {
		return version
	}
	return m.rel + "/" + version
}

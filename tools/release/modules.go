package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// A modInfo is one go.mod of the repository.
type modInfo struct {
	path string // module path
	dir  string // absolute directory
	rel  string // directory relative to the repository, "." for the root
}

// unpublished are the top folders whose modules are never imported: the
// benchmarks against peers, and the tools that draw and release.
var unpublished = []string{"bench", "tools"}

// findModules returns every module under root, the root first.
func findModules(root string) ([]modInfo, error) {
	var mods []modInfo
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		path := modfile.ModulePath(data)
		if path == "" {
			return fmt.Errorf("%s: no module line", p)
		}
		dir := filepath.Dir(p)
		rel, _ := filepath.Rel(root, dir)
		mods = append(mods, modInfo{path: path, dir: dir, rel: filepath.ToSlash(rel)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool {
		if (mods[i].rel == ".") != (mods[j].rel == ".") {
			return mods[i].rel == "."
		}
		return mods[i].rel < mods[j].rel
	})
	if len(mods) == 0 || mods[0].rel != "." {
		return nil, fmt.Errorf("%s: no go.mod at the top", root)
	}
	for _, m := range mods[1:] {
		if want := mods[0].path + "/" + m.rel; m.path != want {
			return nil, fmt.Errorf("%s/go.mod: module %s, want %s: a tag %s/vX.Y.Z would not name it", m.rel, m.path, want, m.rel)
		}
	}
	return mods, nil
}

// published returns the modules a release tags: the root and every module
// outside the unpublished folders.
func published(mods []modInfo) []modInfo {
	var out []modInfo
	for _, m := range mods {
		top, _, _ := strings.Cut(m.rel, "/")
		if !contains(unpublished, top) {
			out = append(out, m)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// setRequirements sets every requirement of a published module, in every
// module, to version, and returns the go.mod files it changed.
func setRequirements(mods, pub []modInfo, version string) ([]string, error) {
	var changed []string
	for _, m := range mods {
		gomod := filepath.Join(m.dir, "go.mod")
		data, err := os.ReadFile(gomod)
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(gomod, data, nil)
		if err != nil {
			return nil, err
		}
		dirty := false
		for _, r := range f.Require {
			if isPublished(pub, r.Mod.Path) && r.Mod.Version != version {
				if err := f.AddRequire(r.Mod.Path, version); err != nil {
					return nil, err
				}
				dirty = true
			}
		}
		if !dirty {
			continue
		}
		out, err := f.Format()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(gomod, out, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, filepath.Join(m.rel, "go.mod"))
	}
	return changed, nil
}

// requirementsAt fails unless every requirement of a published module is
// at version: what -check needs before it can serve the modules.
func requirementsAt(mods, pub []modInfo, version string) error {
	var wrong []string
	for _, m := range mods {
		gomod := filepath.Join(m.dir, "go.mod")
		data, err := os.ReadFile(gomod)
		if err != nil {
			return err
		}
		f, err := modfile.ParseLax(gomod, data, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if isPublished(pub, r.Mod.Path) && r.Mod.Version != version {
				wrong = append(wrong, fmt.Sprintf("%s/go.mod requires %s %s", m.rel, r.Mod.Path, r.Mod.Version))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("not every requirement is at %s (run without -check to set them):\n  %s", version, strings.Join(wrong, "\n  "))
	}
	return nil
}

func isPublished(pub []modInfo, path string) bool {
	for _, m := range pub {
		if m.path == path {
			return true
		}
	}
	return false
}

// buildProxy writes a GOPROXY directory (the layout of `go help goproxy`:
// path/@v/list, version.info, version.mod, version.zip) that serves every
// published module at version.
func buildProxy(dir string, pub []modInfo, version string) error {
	stamp := time.Now().UTC().Truncate(time.Second)
	for _, m := range pub {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
		if err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, stamp})
		if _, err := os.Stat(filepath.Join(m.dir, "LICENSE")); err != nil {
			return fmt.Errorf("%s has no LICENSE of its own: its module zip holds only its folder, and pkg.go.dev shows nothing of a module without one", m.rel)
		}
		var zbuf bytes.Buffer
		if err := zipModule(&zbuf, m, version); err != nil {
			return fmt.Errorf("zipping %s: %w", m.path, err)
		}
		for name, data := range map[string][]byte{
			version + ".info": info,
			version + ".mod":  gomod,
			version + ".zip":  zbuf.Bytes(),
			"list":            []byte(version + "\n"),
		} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// zipModule zips m's directory as a module zip: in a git work tree, the
// files git would commit (tracked or untracked, not ignored), as they are
// now; elsewhere, the whole directory. Either way golang.org/x/mod/zip
// leaves out nested modules, vendor folders and what a module zip may not
// hold.
func zipModule(w io.Writer, m modInfo, version string) error {
	mv := module.Version{Path: m.path, Version: version}
	out, err := exec.Command("git", "-C", m.dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard", ".").Output()
	if err != nil {
		return modzip.CreateFromDir(w, mv, m.dir)
	}
	var files []modzip.File
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" {
			continue
		}
		full := filepath.Join(m.dir, name)
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return err
		}
		files = append(files, diskFile{rel: filepath.ToSlash(name), full: full, info: fi})
	}
	return modzip.Create(w, mv, files)
}

type diskFile struct {
	rel, full string
	info      fs.FileInfo
}

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }

// checkConsumer checks, for each published module, a module in a fresh
// temporary directory that declares go floor and, with toolchain, takes that
// one module with go get at version and builds a program importing it, as a
// user who adds one adapter would. It fails if go get or the build fails, if
// go get raised the consumer's go line, or if a published module resolved
// at another version.
//
// The consumers share a module cache of their own, so that modules an
// earlier check left in the machine's cache under the same version cannot
// stand in for the ones in proxy. Other modules come from the machine's
// cache, then from upstream (see proxyEnv).
//
// Each of installs (a command's import path) is then built with go install
// at version, as the README tells users to, and must report version when
// run with --version.
func checkConsumer(proxy, upstream string, pub []modInfo, version, floor, toolchain string, installs []string, log io.Writer) (err error) {
	cache, err := os.MkdirTemp("", "redlock-modcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	env := append(proxyEnv(proxy, upstream, pub), "GOTOOLCHAIN="+toolchain, "GOMODCACHE="+cache, "GOFLAGS=-mod=mod -modcacherw")
	defer func() {
		for _, pkg := range installs {
			if err == nil {
				err = installOne(env, pkg, version, log)
			}
		}
	}()
	fmt.Fprintf(log, "\nconsumer check: a fresh module per published module, declaring go %s, GOTOOLCHAIN=%s, GOPROXY=%s\n", floor, toolchain, envValue(env, "GOPROXY"))
	for _, m := range pub {
		if err := consumeOne(env, m, pub, version, floor, log); err != nil {
			return err
		}
	}
	fmt.Fprintf(log, "  ok: each published module resolved at %s alone; each consumer still declares go %s and builds with %s\n", version, floor, toolchain)
	return nil
}

// installOne runs go install pkg@version outside any module, then the
// binary with --version, which must name version.
func installOne(env []string, pkg, version string, log io.Writer) error {
	dir, err := os.MkdirTemp("", "redlock-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(log, "  $ go install %s@%s\n", pkg, version)
	cmd := exec.Command("go", "install", "-trimpath", pkg+"@"+version)
	cmd.Dir, cmd.Env = dir, append(env, "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install %s@%s: %v\n%s", pkg, version, err, indent(out))
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	fmt.Fprintf(log, "  $ %s --version\n", filepath.Base(pkg))
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), filepath.Base(pkg)+" "+version+",") {
		return fmt.Errorf("%s --version = %q, %v; want it to name %s", filepath.Base(pkg), out, err, version)
	}
	fmt.Fprintf(log, "    %s", out)
	return nil
}

func consumeOne(env []string, m modInfo, pub []modInfo, version, floor string, log io.Writer) error {
	dir, err := os.MkdirTemp("", "redlock-consumer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := map[string]string{
		"go.mod":  fmt.Sprintf("module example.com/consumer\n\ngo %s\n", floor),
		"main.go": fmt.Sprintf("// Package main imports %s, as a user would.\npackage main\n\nimport _ %q\n\nfunc main() {}\n", m.path, m.path),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	goCmd := func(args ...string) error {
		fmt.Fprintf(log, "  $ go %s\n", strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, indent(out))
		}
		return nil
	}
	if err := goCmd("get", m.path+"@"+version); err != nil {
		return err
	}
	if err := goCmd("build", "-trimpath", "./..."); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	f, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil {
		return err
	}
	if f.Go == nil || f.Go.Version != floor {
		return fmt.Errorf("go get %s@%s raised the consumer's go line above %s: a dependency declares a newer Go\n%s", m.path, version, floor, indent(data))
	}
	for _, r := range f.Require {
		if isPublished(pub, r.Mod.Path) && r.Mod.Version != version {
			return fmt.Errorf("go get %s@%s resolved %s at %s, want %s", m.path, version, r.Mod.Path, r.Mod.Version, version)
		}
	}
	return nil
}

func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val // the last one wins, as for exec
		}
	}
	return v
}

func indent(b []byte) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\n    ")
}

// zipPath is where buildProxy put m's zip.
func zipPath(proxy string, m modInfo, version string) (string, error) {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return "", err
	}
	return filepath.Join(proxy, filepath.FromSlash(esc), "@v", version+".zip"), nil
}

// unpack extracts m's zip from the proxy into a temporary directory and
// returns the module's directory in it.
func unpack(proxy string, m modInfo, version string) (string, func(), error) {
	zp, err := zipPath(proxy, m, version)
	if err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "redlock-unpacked-")
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(tmp, "m")
	if err := modzip.Unzip(dir, module.Version{Path: m.path, Version: version}, zp); err != nil {
		os.RemoveAll(tmp)
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(tmp) }, nil
}

// addSums writes into the go.sum of every published module the hashes of
// the published modules it requires at version, as the proxy serves them,
// and returns the go.sum files it changed.
func addSums(proxy string, pub []modInfo, version string) ([]string, error) {
	var changed []string
	for _, m := range pub {
		data, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		f, err := modfile.ParseLax("go.mod", data, nil)
		if err != nil {
			return nil, err
		}
		var add []string
		for _, r := range f.Require {
			if !isPublished(pub, r.Mod.Path) || r.Mod.Version != version {
				continue
			}
			var dep modInfo
			for _, p := range pub {
				if p.path == r.Mod.Path {
					dep = p
				}
			}
			zp, err := zipPath(proxy, dep, version)
			if err != nil {
				return nil, err
			}
			zh, err := dirhash.HashZip(zp, dirhash.Hash1)
			if err != nil {
				return nil, err
			}
			modFile := strings.TrimSuffix(zp, ".zip") + ".mod"
			mh, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return os.Open(modFile) })
			if err != nil {
				return nil, err
			}
			add = append(add, fmt.Sprintf("%s %s %s", dep.path, version, zh), fmt.Sprintf("%s %s/go.mod %s", dep.path, version, mh))
		}
		if len(add) == 0 {
			continue
		}
		sumFile := filepath.Join(m.dir, "go.sum")
		old, err := os.ReadFile(sumFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
			if l != "" {
				lines[l] = true
			}
		}
		// Hashes of an earlier run at this version, from other contents,
		// give way to the new ones.
		for l := range lines {
			for _, a := range add {
				fa := strings.Fields(a)
				if fl := strings.Fields(l); len(fl) == 3 && fl[0] == fa[0] && fl[1] == fa[1] && fl[2] != fa[2] {
					delete(lines, l)
				}
			}
		}
		dirty := false
		for _, a := range add {
			if !lines[a] {
				lines[a], dirty = true, true
			}
		}
		if !dirty {
			continue
		}
		var out []string
		for l := range lines {
			out = append(out, l)
		}
		sortSums(out)
		if err := os.WriteFile(sumFile, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, filepath.Join(m.rel, "go.sum"))
	}
	return changed, nil
}

// sortSums orders go.sum lines as the go command writes them: by module
// path, then by semantic version, a version's hash before its go.mod's.
func sortSums(lines []string) {
	key := func(l string) (path, version string, mod bool) {
		f := strings.Fields(l)
		if len(f) < 2 {
			return l, "", false
		}
		version, mod = strings.CutSuffix(f[1], "/go.mod")
		return f[0], version, mod
	}
	sort.SliceStable(lines, func(i, j int) bool {
		pi, vi, mi := key(lines[i])
		pj, vj, mj := key(lines[j])
		if pi != pj {
			return pi < pj
		}
		if c := semver.Compare(vi, vj); c != 0 {
			return c < 0
		}
		return !mi && mj
	})
}

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (slash paths relative to dir) into dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fixture is a repository in miniature: a root module, an adapter that
// requires it at adapterReq with a replace for development, and a bench
// module that is not published.
func fixture(t *testing.T, adapterGo, adapterReq string) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"go.mod":             "module example.com/lib\n\ngo 1.25.0\n",
		"LICENSE":            "fixture\n",
		"adapter/LICENSE":    "fixture\n",
		"lib.go":             "// Package lib is the root.\npackage lib\n\n// Answer is the root's API.\nfunc Answer() int { return 42 }\n",
		"adapter/go.mod":     "module example.com/lib/adapter\n\ngo " + adapterGo + "\n\nreplace example.com/lib => ../\n\nrequire example.com/lib " + adapterReq + "\n",
		"adapter/adapter.go": "// Package adapter uses the root.\npackage adapter\n\nimport \"example.com/lib\"\n\n// Answer is the root's answer.\nfunc Answer() int { return lib.Answer() }\n",
		"bench/go.mod":       "module example.com/lib/bench\n\ngo 1.26.0\n",
		"bench/b.go":         "package bench\n",
	})
	return dir
}

// consumer runs what make release checks on the fixture at root: the local
// proxy, then the fresh module, with this machine's Go and a go 1.25.0
// floor.
func consumer(t *testing.T, root, version string) error {
	t.Helper()
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	pub := published(mods)
	if len(pub) != 2 || pub[1].rel != "adapter" {
		t.Fatalf("published = %+v, want the root and adapter, not bench", pub)
	}
	proxy := t.TempDir()
	if err := buildProxy(proxy, pub, version); err != nil {
		t.Fatal(err)
	}
	return checkConsumer(proxy, "off", pub, version, "1.25.0", "local", nil, io.Discard)
}

func TestConsumerTakesFixtureAtVersion(t *testing.T) {
	root := fixture(t, "1.25.0", "v0.1.0")
	if err := consumer(t, root, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
}

// The state issue 19 found: an adapter that requires the root at the zero
// pseudo-version with replace ../ cannot be taken by anyone else.
func TestConsumerRejectsPseudoVersionRequirement(t *testing.T) {
	root := fixture(t, "1.25.0", "v0.0.0-00010101000000-000000000000")
	err := consumer(t, root, "v0.1.0")
	if err == nil {
		t.Fatal("consumer check passed with an adapter that requires the root at v0.0.0-00010101000000-000000000000")
	}
	t.Logf("as expected: %v", err)
}

// An adapter that declares a newer Go than the floor raises its user's go
// line: the other finding of issue 19.
func TestConsumerRejectsGoAboveFloor(t *testing.T) {
	root := fixture(t, "1.26.0", "v0.1.0")
	err := consumer(t, root, "v0.1.0")
	if err == nil || !strings.Contains(err.Error(), "raised the consumer's go line") {
		t.Fatalf("consumer check = %v, want it to report the raised go line", err)
	}
}

func TestProxyRefusesModuleWithoutLicense(t *testing.T) {
	root := fixture(t, "1.25.0", "v0.1.0")
	if err := os.Remove(filepath.Join(root, "adapter", "LICENSE")); err != nil {
		t.Fatal(err)
	}
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := buildProxy(t.TempDir(), published(mods), "v0.1.0"); err == nil || !strings.Contains(err.Error(), "LICENSE") {
		t.Fatalf("buildProxy = %v, want a missing LICENSE reported", err)
	}
}

func TestSetRequirementsAndCheck(t *testing.T) {
	root := fixture(t, "1.25.0", "v0.1.0")
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	pub := published(mods)
	if err := requirementsAt(mods, pub, "v0.2.0"); err == nil {
		t.Fatal("requirementsAt(v0.2.0) passed with the adapter at v0.1.0")
	}
	changed, err := setRequirements(mods, pub, "v0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0] != filepath.Join("adapter", "go.mod") {
		t.Fatalf("changed %v, want adapter/go.mod only", changed)
	}
	if err := requirementsAt(mods, pub, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(root, "adapter", "go.mod"))
	if !strings.Contains(string(data), "replace example.com/lib => ../") {
		t.Fatalf("the replace for development is gone:\n%s", data)
	}
	if err := consumer(t, root, "v0.2.0"); err != nil {
		t.Fatal(err)
	}

	// The adapter's go.sum gets the root's two hashes at v0.2.0, which
	// gorelease wants and development under replace never wrote.
	proxy := t.TempDir()
	if err := buildProxy(proxy, pub, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	changed, err = addSums(proxy, pub, "v0.2.0")
	if err != nil || len(changed) != 1 {
		t.Fatalf("addSums = %v, %v; want adapter/go.sum", changed, err)
	}
	sum, _ := os.ReadFile(filepath.Join(root, "adapter", "go.sum"))
	if !strings.Contains(string(sum), "example.com/lib v0.2.0 h1:") || !strings.Contains(string(sum), "example.com/lib v0.2.0/go.mod h1:") {
		t.Fatalf("adapter/go.sum lacks the root's hashes:\n%s", sum)
	}
	if again, _ := addSums(proxy, pub, "v0.2.0"); len(again) != 0 {
		t.Errorf("a second addSums changed %v", again)
	}
}

func TestSortSums(t *testing.T) {
	lines := []string{"b v1.0.0 h1:x", "a v1.10.0/go.mod h1:y", "a v1.9.0 h1:z", "a v1.10.0 h1:w", "a v1.9.0/go.mod h1:v"}
	sortSums(lines)
	want := []string{"a v1.9.0 h1:z", "a v1.9.0/go.mod h1:v", "a v1.10.0 h1:w", "a v1.10.0/go.mod h1:y", "b v1.0.0 h1:x"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("sortSums = %q, want %q", lines, want)
	}
}

// TestRepositoryRelease runs the consumer check on this repository as it
// is, at the version its adapters require of the root: a fresh module that
// declares go 1.25.0 takes the root and every adapter with go get through a
// local proxy, and builds with the Go 1.25 toolchain.
func TestRepositoryRelease(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := findModules(root)
	if err != nil {
		t.Fatal(err)
	}
	pub := published(mods)
	for _, want := range []string{"goredis", "otel", "rueidis", "valkeygo"} {
		found := false
		for _, m := range pub {
			found = found || m.rel == want
		}
		if !found {
			t.Errorf("%s is not among the published modules %v", want, pub)
		}
	}
	version := requiredRoot(t, pub)
	if err := requirementsAt(mods, pub, version); err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	if err := buildProxy(proxy, pub, version); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	toolchain := "go1.25.14"
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal(err)
	}
	if err := checkConsumer(proxy, "", pub, version, "1.25.0", toolchain, []string{pub[0].path + "/cmd/redlock"}, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log(log.String())
}

// requiredRoot is the version the goredis adapter requires of the root.
func requiredRoot(t *testing.T, pub []modInfo) string {
	t.Helper()
	for _, m := range pub {
		if m.rel != "goredis" {
			continue
		}
		out, err := exec.Command("go", "-C", m.dir, "mod", "edit", "-json").Output()
		if err != nil {
			t.Fatal(err)
		}
		s := string(out)
		i := strings.Index(s, `"Path": "`+pub[0].path+`",`)
		if i < 0 {
			t.Fatalf("goredis/go.mod does not require %s", pub[0].path)
		}
		rest := s[i:]
		j := strings.Index(rest, `"Version": "`)
		rest = rest[j+len(`"Version": "`):]
		return rest[:strings.Index(rest, `"`)]
	}
	t.Fatal("no goredis module")
	return ""
}

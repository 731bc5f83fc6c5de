package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"go install at a version", &debug.BuildInfo{GoVersion: "go1.25.14", Main: debug.Module{Path: "github.com/quorumlock/redlock", Version: "v0.1.0"},
			Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}}},
			true, "redlock v0.1.0, go1.25.14 linux/arm64"},
		{"checkout with vcs stamping", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "6c2ed07aaaabbbbccccdddd"}, {Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}},
			true, "redlock (devel) (commit 6c2ed07aaaab, modified), go1.26.8 linux/amd64"},
		// What go1.24 and later record for a build in a git checkout.
		{"checkout since go1.24", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261126155941-6ee6b4f0d4ae+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "6ee6b4f0d4ae0000"}, {Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}},
			true, "redlock v0.0.0-20261126155941-6ee6b4f0d4ae+dirty (commit 6ee6b4f0d4ae, modified), go1.26.8 linux/amd64"},
		{"built with -buildvcs=false", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			true, "redlock (devel), go1.26.8 "},
		{"no build info", nil, false, "redlock: no build information"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := versionLine(c.bi, c.ok); !strings.HasPrefix(got, c.want) {
				t.Errorf("versionLine = %q, want %q", got, c.want)
			}
		})
	}
}

// redlock --version, and its spellings, print one line and exit 0.
func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errb bytes.Buffer
		code := dispatch([]string{arg}, func(string) string { return "" }, &out, &errb)
		if code != 0 || !strings.HasPrefix(out.String(), "redlock ") || strings.Count(out.String(), "\n") != 1 || errb.Len() != 0 {
			t.Errorf("redlock %s = exit %d, stdout %q, stderr %q", arg, code, out.String(), errb.String())
		}
	}
}

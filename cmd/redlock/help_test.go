package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Every command's help spells its flags as docs/cli.md does: --flag.
func TestHelpSpellsFlagsWithTwoDashes(t *testing.T) {
	oneDash := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, cmd := range []string{"demo", "run", "doctor", "status"} {
		r := cli(nil, cmd, "-h")
		if r.code != 0 {
			t.Errorf("redlock %s -h = exit %d", cmd, r.code)
		}
		if oneDash.MatchString(r.stderr) || !strings.Contains(r.stderr, "\n  --") {
			t.Errorf("redlock %s -h lists flags with one dash:\n%s", cmd, r.stderr)
		}
		doc, err := os.ReadFile("../../docs/cli.md")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(r.stderr, -1) {
			if !strings.Contains(string(doc), "`--"+m[1]+"`") {
				t.Errorf("redlock %s's flag --%s is not in docs/cli.md as `--%s`", cmd, m[1], m[1])
			}
		}
	}
}

// demo --svg into a directory that does not exist fails before the run,
// not after its 15 seconds.
func TestDemoUnwritablePictureFailsFirst(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--svg", "/no/such/dir/x.svg"},
		{"demo", "--html", filepath.Join(t.TempDir(), "missing", "x.html")},
		{"demo", "--svg", t.TempDir()}, // a directory
	} {
		r := cli(nil, args...)
		if r.code != exitUsage || r.elapsed > 2*time.Second || !strings.Contains(r.stderr, args[2]) {
			t.Errorf("redlock %v = exit %d after %v, stderr %q; want %d at once, naming the file", args, r.code, r.elapsed, r.stderr, exitUsage)
		}
	}
}

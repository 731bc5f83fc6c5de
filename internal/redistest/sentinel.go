package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartSentinel starts a Redis Sentinel on a free loopback port and waits
// until it answers PING. conf holds the lines of its configuration besides
// the port, bind and protected-mode ones ("sentinel monitor mymaster
// 127.0.0.1 6379 1", say). If another process takes the port first, it
// tries another. The Sentinel stops when t ends. Without a redis-server,
// it skips or fails t as Require does.
func StartSentinel(t testing.TB, conf ...string) *Server {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	try := 0 // each try's Sentinel gets a config file of its own, which it rewrites
	return startFree(t, "sentinel", nil, func(port int) *Server {
		try++
		path := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", try))
		lines := append([]string{fmt.Sprintf("port %d", port), "bind 127.0.0.1", "protected-mode no"}, conf...)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return spawn(t, exec.Command(Binary(), path, "--sentinel"), port)
	})
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// nodesFlag joins the servers' addresses for --nodes.
func nodesFlag(servers []*redistest.Server) string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return strings.Join(addrs, ",")
}

func TestRunNeverOverlaps(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dir := t.TempDir()
	log, mark := filepath.Join(dir, "intervals"), filepath.Join(dir, "inside")
	const procs, rounds = 3, 4
	args := []string{"run", "--nodes", nodesFlag(servers), "--key", "overlap", "--ttl", "2s", "--wait", "60s"}

	results := make(chan runResult, procs*rounds)
	for range procs {
		go func() {
			for range rounds {
				results <- runRedlock(t, 90*time.Second, nil, args, "interval", log, mark, "100ms")
			}
		}()
	}
	for range procs * rounds {
		r := <-results
		if r.err != nil || r.code != 0 {
			t.Errorf("redlock run = exit %d, %v\n%s", r.code, r.err, r.stderr)
		}
	}

	intervals := readIntervals(t, log)
	if len(intervals) != procs*rounds {
		t.Fatalf("%d intervals logged, want %d", len(intervals), procs*rounds)
	}
	sort.Slice(intervals, func(i, j int) bool { return intervals[i][0] < intervals[j][0] })
	for i := 1; i < len(intervals); i++ {
		if prev, cur := intervals[i-1], intervals[i]; cur[0] < prev[1] {
			t.Errorf("children overlapped by %v: [%d, %d] and [%d, %d]",
				time.Duration(prev[1]-cur[0]), prev[0], prev[1], cur[0], cur[1])
		}
	}
}

func readIntervals(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var iv [2]int64
		if _, err := fmt.Sscan(sc.Text(), &iv[0], &iv[1]); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		out = append(out, iv)
	}
	return out
}

func TestRunPassesExitCodeThrough(t *testing.T) {
	servers := redistest.StartN(t, 3)
	args := []string{"run", "--nodes", nodesFlag(servers), "--key", "exit", "--ttl", "2s"}
	for _, code := range []int{0, 3, 42} {
		r := runRedlock(t, 30*time.Second, nil, args, "exit", strconv.Itoa(code))
		if r.err != nil || r.code != code {
			t.Errorf("child exit %d: redlock run = exit %d, %v\n%s", code, r.code, r.err, r.stderr)
		}
	}
	r := runRedlock(t, 30*time.Second, nil, []string{"run", "--nodes", nodesFlag(servers), "--key", "exit", "--", "/nonexistent/cmd"})
	if r.code != exitNotFound {
		t.Errorf("missing CMD: redlock run = exit %d, want %d\n%s", r.code, exitNotFound, r.stderr)
	}
}

func TestRunLockLossStopsChild(t *testing.T) {
	for _, mode := range []string{"sleep", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			pidFile := filepath.Join(t.TempDir(), "pid")
			const ttl, grace = time.Second, 2 * time.Second
			cmd, stderr := redlockCmd(t, nil,
				[]string{"run", "--nodes", nodesFlag(servers), "--key", "loss", "--ttl", ttl.String(), "--grace", grace.String()},
				mode, pidFile)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			if !pollFor(10*time.Second, func() bool {
				b, err := os.ReadFile(pidFile)
				pid, _ = strconv.Atoi(string(b))
				return err == nil && pid > 0
			}) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("child never started\n%s", stderr)
			}

			lostAt := time.Now()
			servers[0].Stop()
			servers[1].Stop()
			r := wait(cmd, stderr, 20*time.Second)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.code != exitLockLost {
				t.Errorf("redlock run = exit %d, want %d\n%s", r.code, exitLockLost, r.stderr)
			}
			// Validity ends within a ttl of the loss; then SIGTERM, and
			// SIGKILL after the grace period.
			if bound := ttl + grace + 2*time.Second; time.Since(lostAt) > bound {
				t.Errorf("redlock exited %v after the quorum was lost, want under %v", time.Since(lostAt), bound)
			}
			want := map[string]string{"sleep": "with SIGTERM", "stubborn": "with SIGKILL"}[mode]
			if !strings.Contains(r.stderr, "lock lost") || !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not report the loss and %q:\n%s", want, r.stderr)
			}
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("child %d still alive after redlock exited: kill(0) = %v", pid, err)
			}
		})
	}
}

func TestRunWhileHeldElsewhere(t *testing.T) {
	servers := redistest.StartN(t, 3)
	pools := make([]redlock.Pool, len(servers))
	for i, s := range servers {
		p := redigo.NewPool(s.Addr)
		defer p.Close()
		pools[i] = p
	}
	client, err := redlock.New(pools, redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	held, err := client.Lock(ctx, "busy", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	args := []string{"run", "--nodes", nodesFlag(servers), "--key", "busy", "--ttl", "2s"}

	r := runRedlock(t, 30*time.Second, nil, args, "exit", "0")
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "not acquired") {
		t.Errorf("fail-fast on a held lock = exit %d, want %d\n%s", r.code, exitNotAcquired, r.stderr)
	}

	r = runRedlock(t, 30*time.Second, nil, append(args, "--wait", "700ms"), "exit", "0")
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "after waiting") || r.elapsed < 700*time.Millisecond {
		t.Errorf("--wait 700ms on a held lock = exit %d after %v, want %d after 700ms\n%s", r.code, r.elapsed, exitNotAcquired, r.stderr)
	}

	cmd, stderr := redlockCmd(t, nil, append(args, "--wait", "20s"), "exit", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let it start waiting
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r = wait(cmd, stderr, 30*time.Second)
	if r.err != nil || r.code != 5 {
		t.Errorf("--wait 20s, released after 0.5s = exit %d, %v; want the child's 5\n%s", r.code, r.err, r.stderr)
	}
}

func TestRunBadUsage(t *testing.T) {
	const cmd = "--"
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	none := env(nil)
	cases := []struct {
		name   string
		args   []string
		getenv func(string) string
		want   string
	}{
		{"no nodes", []string{"--key", "k", cmd, "true"}, none, "no nodes"},
		{"bad node", []string{"--nodes", "localhost", "--key", "k", cmd, "true"}, none, "want host:port"},
		{"bad env node", []string{"--key", "k", cmd, "true"}, env(map[string]string{envNodes: "a:1,b"}), `node "b"`},
		{"node twice", []string{"--nodes", "a:1,b:1,a:1", "--key", "k", cmd, "true"}, none, "listed twice"},
		{"port out of range", []string{"--nodes", "127.0.0.1:6379,127.0.0.1:99999", "--key", "k", cmd, "true"}, none, `node "127.0.0.1:99999": port 99999`},
		{"port zero", []string{"--nodes", "127.0.0.1:0", "--key", "k", cmd, "true"}, none, `node "127.0.0.1:0": port 0`},
		{"no key", []string{"--nodes", "a:1", cmd, "true"}, none, "--key is required"},
		{"no command", []string{"--nodes", "a:1", "--key", "k"}, none, "no command"},
		{"bad ttl", []string{"--nodes", "a:1", "--key", "k", "--ttl", "0s", cmd, "true"}, none, "--ttl"},
		{"negative wait", []string{"--nodes", "a:1", "--key", "k", "--wait", "-1s", cmd, "true"}, none, "--wait"},
		{"ttl under three default node timeouts", []string{"--nodes", "a:1", "--key", "k", "--ttl", "500ms", cmd, "true"}, none, "--ttl 500ms is too short"},
		{"node timeout over ttl/3", []string{"--nodes", "a:1", "--key", "k", "--ttl", "300ms", "--node-timeout", "150ms", cmd, "true"}, none, "--node-timeout 150ms must be under a third of --ttl"},
		{"unknown flag", []string{"--password", "x", cmd, "true"}, none, "bad flags"},
		{"cert without key", []string{"--nodes", "a:1", "--key", "k", "--tls-cert", "c.pem", cmd, "true"}, none, "go together"},
		{"missing CA", []string{"--nodes", "a:1", "--key", "k", "--tls-ca", "/nonexistent.pem", cmd, "true"}, none, "--tls-ca"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr strings.Builder
			code := dispatch(append([]string{"run"}, c.args...), c.getenv, io.Discard, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), exitUsage, c.want)
			}
		})
	}
	var stderr strings.Builder
	if code := dispatch([]string{"frobnicate"}, none, io.Discard, &stderr); code != exitUsage {
		t.Errorf("unknown command: exit %d, want %d", code, exitUsage)
	}
}

// A ttl that the library refuses (within the clock-drift allowance) is bad
// usage, not a lock held elsewhere.
func TestRunTTLWithinDriftIsUsage(t *testing.T) {
	servers := redistest.StartN(t, 1)
	var stderr strings.Builder
	code := dispatch([]string{"run", "--nodes", servers[0].Addr, "--key", "k", "--ttl", "1ms", "--node-timeout", "100us", "--", "true"},
		func(string) string { return "" }, io.Discard, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "drift") {
		t.Errorf("exit %d, stderr %q; want %d naming the drift allowance", code, stderr.String(), exitUsage)
	}
}

func TestRunUnreachableNodes(t *testing.T) {
	servers := redistest.StartN(t, 1)
	// Two of three nodes have nothing listening: no majority is reachable.
	nodes := fmt.Sprintf("%s,127.0.0.1:%d,127.0.0.1:%d", servers[0].Addr, redistest.FreePort(t), redistest.FreePort(t))
	var stderr strings.Builder
	code := dispatch([]string{"run", "--nodes", nodes, "--key", "k", "--", "true"}, func(string) string { return "" }, io.Discard, &stderr)
	if code != exitUnavailable || !strings.Contains(stderr.String(), "only 1 of 3 nodes reachable") ||
		!strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("exit %d, stderr:\n%s\nwant %d naming each unreachable node", code, stderr.String(), exitUnavailable)
	}
}

func TestRunPasswordFromEnvironment(t *testing.T) {
	redistest.Require(t)
	servers := make([]*redistest.Server, 3)
	for i := range servers {
		servers[i] = redistest.StartWith(t, []redis.DialOption{redis.DialUsername("locker"), redis.DialPassword("s3cret")},
			"--user", "default", "off", "--user", "locker", "on", ">s3cret", "~*", "+@all")
	}
	args := []string{"run", "--nodes", nodesFlag(servers), "--key", "acl", "--ttl", "2s", "--user", "locker"}

	r := runRedlock(t, 30*time.Second, nil, args, "exit", "0")
	if r.code != exitUnavailable {
		t.Errorf("without %s: exit %d, want %d\n%s", envPassword, r.code, exitUnavailable, r.stderr)
	}
	// The child checks that it cannot see the password.
	r = runRedlock(t, 30*time.Second, []string{envPassword + "=s3cret"}, args, "env", envPassword)
	if r.err != nil || r.code != 0 {
		t.Errorf("with %s: exit %d, %v (9: the child saw the password)\n%s", envPassword, r.code, r.err, r.stderr)
	}
}

// pollFor checks cond every 10ms for at most limit.
func pollFor(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// A CMD that cannot be run is found before the nodes are asked: a typo in
// the command line does not wait out --wait, nor take the lock from
// others, to end in 127. Nothing listens on the nodes here, so an exit
// other than 126 or 127 means the nodes were tried first.
func TestRunCommandCheckedBeforeLock(t *testing.T) {
	nodes := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", redistest.FreePort(t), redistest.FreePort(t), redistest.FreePort(t))
	for _, c := range []struct {
		cmd  string
		want int
	}{
		{"/nonexistent/cmd", exitNotFound},
		{"redlock-no-such-command", exitNotFound},
		{t.TempDir(), exitCannotExec},
	} {
		var stderr strings.Builder
		code := dispatch([]string{"run", "--nodes", nodes, "--key", "k", "--wait", "10m", "--", c.cmd}, func(string) string { return "" }, io.Discard, &stderr)
		if code != c.want || strings.Contains(stderr.String(), "reachable") {
			t.Errorf("CMD %s: exit %d, stderr:\n%s\nwant %d before any node is tried", c.cmd, code, stderr.String(), c.want)
		}
	}
}

// A release that no majority confirmed is reported: the key stays on the
// nodes that missed it until its ttl, and whoever waits for it should
// know why. CMD shuts two of the three nodes down just before it exits
// 0; redlock still exits 0, CMD having run with the lock held throughout.
func TestRunReportsUnconfirmedRelease(t *testing.T) {
	redistest.Require(t) // skips without a redis-server, unless required
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed (make deps installs redis-tools): %v", err)
	}
	servers := redistest.StartN(t, 3)
	script := fmt.Sprintf("redis-cli -p %d shutdown nosave; redis-cli -p %d shutdown nosave; exit 0", servers[1].Port, servers[2].Port)
	var stderr strings.Builder
	code := dispatch([]string{"run", "--nodes", nodesFlag(servers), "--key", "rel", "--", "sh", "-c", script}, func(string) string { return "" }, io.Discard, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "not released on a majority") || !strings.Contains(stderr.String(), "within --ttl 30s") {
		t.Errorf("exit %d, stderr:\n%s\nwant 0 and the unconfirmed release reported", code, stderr.String())
	}
}

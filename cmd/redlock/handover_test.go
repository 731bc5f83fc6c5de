package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/redistest"
)

// readEnvFile reads the NAME=value lines the dumpenv child wrote.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

// redlock run hands CMD the lock: its key, its prefix, its token (the very
// value on the nodes while CMD runs) and, with --fencing, its fencing token,
// which is the counter on the nodes under the prefixed key.
func TestRunExportsLockToChild(t *testing.T) {
	servers := redistest.StartN(t, 3)
	dir := t.TempDir()
	for round, want := range []string{"1", "2"} {
		out := filepath.Join(dir, "env"+strconv.Itoa(round))
		r := runRedlock(t, 60*time.Second, []string{"REDLOCK_TOKEN=stale-from-outer-run", "REDLOCK_FENCE=999"},
			[]string{"run", "--nodes", nodesFlag(servers), "--key", "job", "--key-prefix", "app:", "--fencing", "--ttl", "5s"},
			"dumpenv", out, servers[0].Addr)
		if r.err != nil || r.code != 0 {
			t.Fatalf("redlock run = exit %d, %v\n%s", r.code, r.err, r.stderr)
		}
		env := readEnvFile(t, out)
		if env["REDLOCK_KEY"] != "job" || env["REDLOCK_KEY_PREFIX"] != "app:" {
			t.Errorf("REDLOCK_KEY=%q REDLOCK_KEY_PREFIX=%q, want job and app:", env["REDLOCK_KEY"], env["REDLOCK_KEY_PREFIX"])
		}
		if len(env["REDLOCK_TOKEN"]) < 22 || env["REDLOCK_TOKEN"] != env["held"] {
			t.Errorf("REDLOCK_TOKEN=%q, but app:job held %q on %s while CMD ran", env["REDLOCK_TOKEN"], env["held"], servers[0].Addr)
		}
		if env["REDLOCK_FENCE"] != want {
			t.Errorf("round %d: REDLOCK_FENCE=%q, want %s", round, env["REDLOCK_FENCE"], want)
		}
		if _, ok := env["REDLOCK_PERMITS"]; ok {
			t.Errorf("REDLOCK_PERMITS set for a lock: %v", env)
		}
	}
	// The counter is raised on a majority: a node that was slow to answer
	// may still hold the first run's value (it failed once so in CI).
	var raised []string
	for _, srv := range servers {
		c, err := redis.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		fence, _ := redis.String(c.Do("GET", "redlock:fence:{app:job}"))
		if fence == "2" {
			raised = append(raised, srv.Addr)
		}
		if n, _ := redis.Int(c.Do("EXISTS", "job")); n != 0 {
			t.Errorf("the unprefixed key job exists on %s: --key-prefix was not applied", srv.Addr)
		}
		c.Close()
	}
	if len(raised) < 2 {
		t.Errorf("fencing counter of app:job is 2 on %v, want a majority of the 3 nodes", raised)
	}
}

// --permits N runs at most N children at once, and more than one.
func TestRunPermits(t *testing.T) {
	servers := redistest.StartN(t, 5) // K=2 on 5 nodes: quorum 4, one node may fail
	dir := t.TempDir()
	slots, log := filepath.Join(dir, "slots"), filepath.Join(dir, "log")
	if err := os.Mkdir(slots, 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--nodes", nodesFlag(servers), "--key", "batch", "--permits", "2", "--ttl", "3s", "--wait", "60s"}
	const procs = 5
	results := make(chan runResult, procs)
	for range procs {
		go func() { results <- runRedlock(t, 90*time.Second, nil, args, "slot", slots, log, "700ms") }()
	}
	for range procs {
		if r := <-results; r.err != nil || r.code != 0 {
			t.Errorf("redlock run --permits 2 = exit %d, %v\n%s", r.code, r.err, r.stderr)
		}
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	lines := strings.Fields(string(data))
	for _, l := range lines {
		n, _ := strconv.Atoi(l)
		most = max(most, n)
	}
	if len(lines) != procs || most > 2 {
		t.Fatalf("%d children ran, at most %d at once; want %d, at most 2: %q", len(lines), most, procs, data)
	}
	if most < 2 {
		t.Errorf("never two children at once over %d runs of 700ms: --permits 2 acted as a lock", procs)
	}

	out := filepath.Join(dir, "env")
	r := runRedlock(t, 30*time.Second, nil, []string{"run", "--nodes", nodesFlag(servers), "--key", "batch", "--permits", "2"}, "dumpenv", out, servers[0].Addr)
	if r.err != nil || r.code != 0 {
		t.Fatalf("redlock run = exit %d, %v\n%s", r.code, r.err, r.stderr)
	}
	env := readEnvFile(t, out)
	if env["REDLOCK_PERMITS"] != "2" || env["REDLOCK_KEY"] != "batch" || len(env["REDLOCK_TOKEN"]) < 22 {
		t.Errorf("child's environment %v, want REDLOCK_PERMITS=2, REDLOCK_KEY=batch and a token", env)
	}
}

func TestRunPermitsBadUsage(t *testing.T) {
	servers := redistest.StartN(t, 3)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--permits", "2", "--fencing"}, "exclude each other"},
		{[]string{"--permits", "-1"}, "must not be negative"},
		{[]string{"--permits", "2"}, "--permits 2 on 3 nodes"}, // quorum 3 of 3: no node may fail
	} {
		args := append([]string{"run", "--nodes", nodesFlag(servers), "--key", "k"}, c.args...)
		r := runRedlock(t, 30*time.Second, nil, args, "exit", "0")
		if r.err != nil || r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("redlock run %v = exit %d, %v, stderr %q; want %d and %q", c.args, r.code, r.err, r.stderr, exitUsage, c.want)
		}
	}
}

// Replicas listed as nodes are a configuration error: exit 78, as doctor,
// and at once, not when --wait runs out.
func TestRunReplicasExitConfig(t *testing.T) {
	master := redistest.Start(t)
	r1 := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	r2 := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	other := redistest.Start(t)
	nodes := nodesFlag([]*redistest.Server{r1, r2, other})
	r := runRedlock(t, 60*time.Second, nil, []string{"run", "--nodes", nodes, "--key", "k", "--wait", "30s"}, "exit", "0")
	if r.err != nil || r.code != exitConfig {
		t.Fatalf("redlock run with two replicas of three = exit %d, %v, want %d\n%s", r.code, r.err, exitConfig, r.stderr)
	}
	if r.elapsed > 10*time.Second {
		t.Errorf("took %v: it waited on replicas instead of failing at once", r.elapsed)
	}
	has(t, r.stderr, "READONLY", r1.Addr, r2.Addr, "redlock doctor")
}

package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// lockClient is a library client of servers, closed when t ends. Its node
// timeout is generous: a fresh dial under -race on a loaded machine can
// outlast half a second, and a node that times out leaves Held short.
func lockClient(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]redlock.Pool, len(servers))
	for i, s := range servers {
		p := redigo.NewPool(s.Addr)
		t.Cleanup(func() { p.Close() })
		pools[i] = p
	}
	c, err := redlock.New(pools, append([]redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// do runs one command on the server at addr.
func do(t *testing.T, addr string, cmd string, args ...any) any {
	t.Helper()
	c, err := redis.Dial("tcp", addr, redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v on %s: %v", cmd, args, addr, err)
	}
	return v
}

// waitHeld waits until n nodes are known to hold l: Lock returns once a
// majority agreed, and the other nodes answer later.
func waitHeld(t *testing.T, l *redlock.Lock, n int) {
	t.Helper()
	if !pollFor(5*time.Second, func() bool { return l.Held() >= n }) {
		t.Fatalf("lock held on %d nodes, want %d", l.Held(), n)
	}
}

// ttlOf reads the "ttl D" field of a status row.
func ttlOf(t *testing.T, row string) time.Duration {
	t.Helper()
	f := strings.Fields(row)
	for i := range len(f) - 1 {
		if f[i] == "ttl" {
			d, err := time.ParseDuration(f[i+1])
			if err != nil {
				t.Fatalf("bad ttl in %q: %v", row, err)
			}
			return d
		}
	}
	t.Fatalf("no ttl in %q", row)
	return 0
}

// row returns status's line for node, failing t unless there is one and it
// starts with node and state.
func (r cliResult) row(t *testing.T, node, state string) string {
	t.Helper()
	for l := range strings.SplitSeq(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == node {
			if f[1] != state {
				t.Fatalf("%s is %q, want %q\n%s", node, f[1], state, r.stdout)
			}
			return l
		}
	}
	t.Fatalf("no line for %s\n%s", node, r.stdout)
	return ""
}

// verdictLine returns status's verdict.
func (r cliResult) verdictLine(t *testing.T) string {
	t.Helper()
	i := strings.Index(r.stdout, "\nverdict: ")
	if i < 0 {
		t.Fatalf("no verdict\n%s%s", r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout[i:])
}

func TestStatusHeldOnAll(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	for range 2 { // raise the fencing counter past 1
		client := lockClient(t, servers, redlock.WithFencing())
		l, err := client.Lock(ctx, "job", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		client.Close() // lets the last release land, or the next SET finds the key
	}
	l, err := lockClient(t, servers, redlock.WithFencing()).Lock(ctx, "job", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	waitHeld(t, l, 3)

	r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "job")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	prefix := tokenPrefix(l.Value())
	for _, s := range servers {
		row := r.row(t, s.Addr, "holds")
		has(t, row, "token "+prefix, fmt.Sprintf("fence %d", l.Token()))
		if ttl := ttlOf(t, row); ttl <= 25*time.Second || ttl > 30*time.Second {
			t.Errorf("ttl %v, want just under 30s: %q", ttl, row)
		}
	}
	has(t, r.verdictLine(t), "held by a majority: token "+prefix+" on 3 of 3 nodes (quorum 2)")
	has(t, r.stdout, `"redlock:fence:{job}"`)
	// The token is the credential that releases the lock: never print it.
	if strings.Contains(r.stdout, l.Value()) || strings.Contains(r.stdout, l.Value()[:len(prefix)+1]) {
		t.Errorf("status printed more of the token %q than %q\n%s", l.Value(), prefix, r.stdout)
	}
}

func TestStatusHeldOnMajority(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	ctx := context.Background()

	t.Run("key gone from one node", func(t *testing.T) {
		l, err := lockClient(t, servers).Lock(ctx, "gone", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		waitHeld(t, l, 3)
		do(t, servers[2].Addr, "DEL", "gone")

		r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "gone")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0\n%s", r.code, r.stdout)
		}
		r.row(t, servers[0].Addr, "holds")
		r.row(t, servers[1].Addr, "holds")
		has(t, r.row(t, servers[2].Addr, "free"), "fence none")
		has(t, r.verdictLine(t), "held by a majority: token "+tokenPrefix(l.Value())+" on 2 of 3 nodes")
	})

	t.Run("one node down", func(t *testing.T) {
		down := redistest.StartN(t, 3)
		down[2].Stop()
		l, err := lockClient(t, down).Lock(ctx, "down", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)

		r := cli(nil, "status", "--nodes", nodesFlag(down), "--key", "down")
		if r.code != 0 {
			t.Fatalf("exit %d, want 0: a majority holds it whatever the silent node says\n%s", r.code, r.stdout)
		}
		has(t, r.row(t, down[2].Addr, "unknown"), "connection refused")
		has(t, r.verdictLine(t), "held by a majority", "on 2 of 3 nodes", "1 node(s) did not answer")
	})
}

func TestStatusFree(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	ctx := context.Background()
	client := lockClient(t, servers, redlock.WithFencing())
	l, err := client.Lock(ctx, "free", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	client.Close() // waits for the releases still on their way to the slower nodes

	r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "free")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s", r.code, r.stdout)
	}
	fenced := 0
	for _, s := range servers {
		if strings.HasSuffix(r.row(t, s.Addr, "free"), fmt.Sprintf("fence %d", l.Token())) {
			fenced++
		}
	}
	if fenced < 2 { // the counter outlives the lock, on a majority at least
		t.Errorf("%d nodes show fence %d, want a majority\n%s", fenced, l.Token(), r.stdout)
	}
	has(t, r.verdictLine(t), "free: no node holds the key (3 nodes, quorum 2)")

	// With one node silent, two free ones still rule out a majority.
	frozen := redistest.StartFrozen(t)
	nodes := nodesFlag(servers[:2]) + "," + frozen.Addr()
	r = cli(nil, "status", "--nodes", nodes, "--key", "free", "--node-timeout", "300ms")
	if r.code != 0 || r.elapsed > 2*time.Second {
		t.Fatalf("exit %d after %v, want 0 within a node timeout\n%s", r.code, r.elapsed, r.stdout)
	}
	has(t, r.row(t, frozen.Addr(), "unknown"), "no answer within 300ms")
	has(t, r.verdictLine(t), "free: no answering node holds the key, and the 1 that did not answer are short of a majority")
}

func TestStatusSplit(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 5)
	// Two rivals with two nodes each, one node empty: no majority.
	const a, b = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
	do(t, servers[0].Addr, "SET", "split", a, "PX", 20000)
	do(t, servers[1].Addr, "SET", "split", a, "PX", 20000)
	do(t, servers[2].Addr, "SET", "split", b, "PX", 10000)
	do(t, servers[3].Addr, "SET", "split", b, "PX", 10000)

	r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "split")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s", r.code, r.stdout)
	}
	for i, want := range map[int]time.Duration{0: 20 * time.Second, 2: 10 * time.Second} {
		row := r.row(t, servers[i].Addr, "holds")
		has(t, row, "token "+strings.Repeat(string("AB"[i/2]), 5)+"…")
		if ttl := ttlOf(t, row); ttl <= want-5*time.Second || ttl > want {
			t.Errorf("ttl %v, want just under %v: %q", ttl, want, row)
		}
	}
	r.row(t, servers[4].Addr, "free")
	has(t, r.verdictLine(t), "split: 4 of 5 nodes hold a token, 2 distinct, at most 2 node(s) each; none is on a majority (quorum 3)")

	// A key that is not a string holds no lock token: status says what it
	// is, and the node counts as holding none (issue 19: not "unknown",
	// WRONGTYPE, exit 69).
	do(t, servers[4].Addr, "LPUSH", "split", "x")
	r = cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "split")
	has(t, r.row(t, servers[4].Addr, "not"), "not a lock", "a list, not a lock's key")
	has(t, r.verdictLine(t), "split: 4 of 5 nodes hold a token")
	if r.code != 0 {
		t.Errorf("exit %d, want 0\n%s", r.code, r.stdout)
	}
}

func TestStatusUnknown(t *testing.T) {
	t.Parallel()
	up := redistest.Start(t)
	nodes := fmt.Sprintf("%s,127.0.0.1:%d,127.0.0.1:%d", up.Addr, redistest.FreePort(t), redistest.FreePort(t))
	r := cli(nil, "status", "--nodes", nodes, "--key", "k")
	if r.code != exitUnavailable {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnavailable, r.stdout)
	}
	has(t, r.verdictLine(t), "unknown: no answering node holds the key, and with the 2 that did not answer it could be on a majority (quorum 2)")
}

// TestStatusFenceKeyMatchesLibrary checks, on real nodes, that the counter
// status reads (redlock.FenceKey) is the one the library raised.
func TestStatusFenceKeyMatchesLibrary(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	client := lockClient(t, servers, redlock.WithFencing())
	ctx := context.Background()
	for _, key := range []string{"job", "{tag}job", "x{y}z", "a}b", "{}x", "{a", "}", "{", "a{}b}", "ünï{c}ode"} {
		l, err := client.Lock(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The token is stored on a majority at least; a late node may lag.
		stored := 0
		for _, s := range servers {
			if got, _ := redis.Uint64(do(t, s.Addr, "GET", fenceKey(key)), nil); got == l.Token() {
				stored++
			}
		}
		if stored < 2 {
			t.Errorf("key %q: %d of 3 nodes hold the library's token %d at %q, want a majority", key, stored, l.Token(), fenceKey(key))
		}
	}
}

func TestStatusTokenPrefix(t *testing.T) {
	for token, want := range map[string]string{
		"Zx3kQ9vLmN2pR7tY8wA1bC":                  "Zx3kQ…", // the library's: 22 characters
		"0123456789abcdef0123456789abcdef0123456": "01234567…",
		"abc":        "…",
		"":           "…",
		"\x00\x01ab": `"\x00"…`,
	} {
		if got := tokenPrefix(token); got != want {
			t.Errorf("tokenPrefix(%q) = %q, want %q", token, got, want)
		}
	}
}

func TestStatusJudge(t *testing.T) {
	held := func(tok string) keyStatus { return keyStatus{held: true, token: tok} }
	free, silent := keyStatus{}, keyStatus{err: redlock.ErrNodeTimeout}
	for _, c := range []struct {
		nodes []keyStatus
		want  verdictKind
	}{
		{[]keyStatus{held("a"), held("a"), free}, verdictHeld},
		{[]keyStatus{held("a"), held("a"), silent}, verdictHeld},
		{[]keyStatus{held("a"), held("b"), free}, verdictSplit},
		{[]keyStatus{held("a"), free, free}, verdictSplit},
		{[]keyStatus{held("a"), silent, free}, verdictUnknown},
		{[]keyStatus{free, free, free}, verdictFree},
		{[]keyStatus{free, free, silent}, verdictFree},
		{[]keyStatus{free, silent, silent}, verdictUnknown},
		{[]keyStatus{held("a"), held("a"), held("b"), held("b")}, verdictSplit},
		{[]keyStatus{held("a"), held("a"), held("a"), held("b")}, verdictHeld},
		{[]keyStatus{held("a"), held("a"), held("b"), held("b"), silent}, verdictUnknown},
		{[]keyStatus{held("a")}, verdictHeld},
		{[]keyStatus{silent}, verdictUnknown},
	} {
		if v := judge(c.nodes); v.kind != c.want {
			t.Errorf("%+v: %v, want %v", c.nodes, v, c.want)
		}
	}
}

func TestStatusACLAndTLS(t *testing.T) {
	t.Parallel()
	users := []string{"--user", "default", "off", "--user", "admin", "on", ">pw", "~*", "+@all",
		"--user", "reader", "on", ">pw", "%R~*", "+get", "+pttl",
		"--user", "lockonly", "on", ">pw", "~job", "+get", "+pttl"}
	var servers []*redistest.Server
	for range 3 {
		servers = append(servers, startAuth(t, "admin", "pw", users...))
	}
	env := map[string]string{envPassword: "pw"}
	r := cli(env, "status", "--nodes", nodesFlag(servers), "--key", "job", "--user", "reader")
	if r.code != 0 {
		t.Fatalf("read-only user: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	has(t, r.verdictLine(t), "free")

	// Without access to the counter, status says so and still judges.
	r = cli(env, "status", "--nodes", nodesFlag(servers), "--key", "job", "--user", "lockonly")
	has(t, r.row(t, servers[0].Addr, "free"), "fence ?: NOPERM")
	has(t, r.verdictLine(t), "free")

	r = cli(nil, "status", "--nodes", nodesFlag(servers), "--key", "job")
	has(t, r.row(t, servers[0].Addr, "unknown"), "NOAUTH")

	f := redistest.GenerateTLS(t)
	var tlsNodes []*redistest.Server
	for range 3 {
		tlsNodes = append(tlsNodes, redistest.StartTLS(t, f))
	}
	r = cli(nil, "status", "--nodes", nodesFlag(tlsNodes), "--key", "job", "--node-timeout", "10s",
		"--tls-ca", f.CACert, "--tls-cert", clientPEM(t, f, "cert"), "--tls-key", clientPEM(t, f, "key"))
	if r.code != 0 {
		t.Fatalf("TLS: exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	has(t, r.verdictLine(t), "free")
}

func TestStatusBadUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--key", "k"}, nil, "no nodes"},
		{[]string{"--nodes", "a:1"}, nil, "--key is required"},
		{[]string{"--key", "k"}, map[string]string{envNodes: "a:1,b"}, `node "b"`},
		{[]string{"--nodes", "a:1", "--key", "k", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--nodes", "a:1", "--key", "k", "--node-timeout", "0s"}, nil, "--node-timeout"},
		{[]string{"--nodes", "a:1", "--key", "k", "--tls-cert", "c.pem"}, nil, "go together"},
		{[]string{"--ttl", "1s"}, nil, "bad flags (see redlock status -h)"},
	} {
		r := cli(c.env, append([]string{"status"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("status %q: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
	if r := cli(nil, "status", "-h"); r.code != 0 || !strings.Contains(r.stderr, "never the whole") {
		t.Errorf("status -h: exit %d, stderr %q", r.code, r.stderr)
	}
}

func (k verdictKind) String() string {
	return [...]string{"free", "held", "split", "unknown"}[k]
}

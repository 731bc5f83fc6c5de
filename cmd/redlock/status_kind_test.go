package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/keys"
	"github.com/quorumlock/redlock/internal/redistest"
)

// status on the key of a semaphore, a read-write lock or an election says
// what it is, exit 0; and status on their name says which of them use it.
func TestStatusOnOtherPrimitives(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	client := lockClient(t, servers, redlock.WithKeyPrefix("app:"))
	ctx := context.Background()

	sem, err := client.Semaphore("jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(ctx)
	w, err := client.RWMutex("doc").RLock(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Unlock(ctx)
	lead, err := client.Election("boss").Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Resign(ctx)

	_, readers, _ := keys.RW("app:doc")
	for _, c := range []struct{ key, want string }{
		{keys.Semaphore("app:jobs"), "semaphore"},
		{readers, "read-write lock"},
		{keys.Leader("app:boss"), "leader record"},
	} {
		r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", c.key)
		if r.code != 0 {
			t.Errorf("status --key %s = exit %d, want 0\n%s%s", c.key, r.code, r.stdout, r.stderr)
		}
		// A majority at least: the acquisition returns once a quorum has
		// it, and the last node's write may still be on its way.
		has(t, r.verdictLine(t), "not a lock: on ", " of 3 nodes the key is", c.want)
	}

	// By name, with the prefix: the lock key is free, and the semaphore is
	// named.
	r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key-prefix", "app:", "--key", "jobs")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	has(t, r.stdout, "also under this name: semaphore "+keys.Semaphore("app:jobs")+" on ", " of 3 nodes", `key "app:jobs"`)
	has(t, r.verdictLine(t), "free")
	r = cli(nil, "status", "--nodes", nodesFlag(servers), "--key-prefix", "app:", "--key", "boss")
	has(t, r.stdout, "also under this name: election (leader record) "+keys.Leader("app:boss"))
	has(t, r.verdictLine(t), "held by a majority") // the election's lock is on app:boss itself
}

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	client := lockClient(t, servers, redlock.WithFencing(), redlock.WithKeyPrefix("p:"))
	ctx := context.Background()
	// A fenced lock holds the nodes whose fence its second round raised; a
	// node whose first answer came after the verdict missed that round, so
	// the lock is taken again until it holds all three.
	var l *redlock.Lock
	for try := 1; ; try++ {
		var err error
		if l, err = client.Lock(ctx, "report", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if pollFor(time.Second, func() bool { return l.Held() >= 3 }) {
			break
		}
		l.Unlock(ctx)
		if try == 5 {
			t.Fatalf("lock held on %d nodes in 5 tries, want 3", l.Held())
		}
	}
	defer l.Unlock(ctx)
	servers[2].Stop()

	r := cli(nil, "status", "--json", "--nodes", nodesFlag(servers), "--key-prefix", "p:", "--key", "report")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var got statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if got.Key != "p:report" || got.FenceKey != "redlock:fence:{p:report}" || got.Verdict != "held" || got.OnNodes != 2 || got.Silent != 1 ||
		got.TokenPrefix != tokenPrefix(l.Value()) || len(got.Node) != 3 {
		t.Fatalf("status --json = %+v", got)
	}
	fence := strconv.FormatUint(l.Token(), 10) // 1, unless the loop above took the lock again
	for i, n := range got.Node {
		if i < 2 && (n.State != "holds" || n.Fence != fence || n.PTTLms == nil || *n.PTTLms <= 0) {
			t.Errorf("node %d = %+v, want holds with fence %s and a ttl", i, n, fence)
		}
		if i == 2 && (n.State != "unknown" || !strings.Contains(n.Error, "refused")) {
			t.Errorf("stopped node = %+v, want unknown with the cause", n)
		}
	}
}

// status on a fencing counter says it is one. A counter is a string
// without a ttl on every node that saw a fenced lock, so read as a lock
// it looked held by a majority, by a token of one digit.
func TestStatusOnFencingCounter(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	client := lockClient(t, servers, redlock.WithFencing())
	ctx := context.Background()
	// Every node's counter, the stragglers' too. Lock returns at a
	// majority, and the second round, which raises the counters, goes to
	// the nodes whose first answers came before the verdict: on fresh
	// servers a node's SET may go out again by EVAL after NOSCRIPT, behind
	// it, and that node gets no counter from this lock. So the lock is
	// taken again until every node has one (up to 5 times).
	for try := 1; ; try++ {
		l, err := client.Lock(ctx, "report", 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		all := pollFor(time.Second, func() bool {
			for _, s := range servers {
				if !exists(t, s.Addr, fenceKey("report")) {
					return false
				}
			}
			return true
		})
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if all {
			break
		}
		if try == 5 {
			t.Fatal("a fencing counter is missing on a node after 5 fenced locks")
		}
	}

	r := cli(nil, "status", "--nodes", nodesFlag(servers), "--key", fenceKey("report"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	has(t, r.verdictLine(t), "not a lock: on 3 of 3 nodes the key is a fencing counter")
}

// exists reports whether key exists on the server at addr.
func exists(t *testing.T, addr, key string) bool {
	t.Helper()
	conn, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := redis.Int(conn.Do("EXISTS", key))
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

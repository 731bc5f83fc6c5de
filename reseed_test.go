package redlock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// restartEmpty stops s and starts a new redis-server, without s's data, on
// the same address, as a node without persistence does after a crash.
func restartEmpty(t *testing.T, s *redistest.Server) *redistest.Server {
	t.Helper()
	_, p, err := net.SplitHostPort(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	s.Stop()
	fresh := redistest.StartOnPort(t, port)
	if err := fresh.WaitReady(10 * time.Second); err != nil {
		t.Fatalf("restart on %s: %v\n%s", s.Addr, err, fresh.Log())
	}
	return fresh
}

// A node that restarted empty gets the key back at the next Extend, with the
// holder's token and fencing counter, so that the lock again tolerates the
// loss of another node.
func TestRealExtendReseedsANodeThatRestartedEmpty(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run("fencing="+strconv.FormatBool(fenced), func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
			var opts []redlock.Option
			if fenced {
				opts = append(opts, redlock.WithFencing())
			}
			c := realClient(t, addrs, opts...)
			ctx := context.Background()
			l, err := c.Lock(ctx, "reseed", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			realAwaitToken(t, addrs, "reseed", l.Value())

			restartEmpty(t, servers[0])
			conn0 := realConn(t, addrs[0])
			if got := realGet(t, conn0, "reseed"); got != "" {
				t.Fatalf("node 0 still holds %q after an empty restart", got)
			}
			// The pool's old connections to node 0 are broken: the first
			// Extend may see node 0 fail rather than answer; it still wins
			// on the other two. Extend until node 0 has been re-seeded.
			if !realEventually(10*time.Second, func() bool {
				if err := l.Extend(ctx, 30*time.Second); err != nil {
					t.Fatalf("Extend: %v", err)
				}
				return realGet(t, conn0, "reseed") == l.Value()
			}) {
				t.Fatal("node 0 was never re-seeded by Extend")
			}
			if ttl := realPTTL(t, conn0, "reseed"); ttl <= 0 || ttl > 30*time.Second {
				t.Errorf("re-seeded key's ttl %v, want (0, 30s]", ttl)
			}
			if h := l.Held(); h != 3 {
				t.Errorf("Held = %d after the re-seed, want 3", h)
			}
			if fenced {
				counter := realGet(t, conn0, redlock.FenceKey("reseed"))
				if counter != strconv.FormatUint(l.Token(), 10) {
					t.Errorf("node 0's fencing counter %q, want the lock's token %d", counter, l.Token())
				}
			}

			// Node 1 now fails too: nodes 0 and 2 are still a majority.
			servers[1].Stop()
			if err := l.Extend(ctx, 30*time.Second); err != nil {
				t.Fatalf("Extend with node 0 re-seeded and node 1 down: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		})
	}
}

// A re-seed never takes a key that another token holds: Extend's SET NX
// goes only where the key is gone, and a node holding another token stays
// as it is.
func TestRealExtendDoesNotReseedOverAnotherToken(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs)
	ctx := context.Background()
	l, err := c.Lock(ctx, "reseed:other", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, "reseed:other", l.Value())
	conn0 := realConn(t, addrs[0])
	if _, err := conn0.Do("SET", "reseed:other", "intruder", "PX", 30000); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	redlock.Settle(c)
	if got := realGet(t, conn0, "reseed:other"); got != "intruder" {
		t.Errorf("node 0 holds %q, want the other token kept", got)
	}
	if h := l.Held(); h != 2 {
		t.Errorf("Held = %d, want 2", h)
	}
}

// Re-seeding follows a won Extend only: when a majority has lost the key,
// Extend reports the loss and puts the key back nowhere, since no majority
// proves that the lock was held throughout.
func TestExtendDoesNotReseedWhenAMajorityLostTheKey(t *testing.T) {
	cl := newCluster(t, 3)
	c := cl.client(t)
	ctx := context.Background()
	l, err := c.Lock(ctx, "reseed:lost", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	redlock.Settle(c)
	cl.nodes[0].Del("reseed:lost")
	cl.nodes[1].Del("reseed:lost")
	err = l.Extend(ctx, 30*time.Second)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend = %v, want ErrLockLost", err)
	}
	redlock.Settle(c)
	for i := range 2 {
		if cl.nodes[i].Exists("reseed:lost") {
			t.Errorf("node %d was re-seeded after a lost Extend", i)
		}
	}
}

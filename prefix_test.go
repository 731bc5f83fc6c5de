package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// WithKeyPrefix puts the prefix before every key on the nodes, and the
// fencing counter follows WithFencePrefix; the API keeps the plain key.
func TestKeyAndFencePrefix(t *testing.T) {
	cl := newCluster(t, 3)
	c := cl.client(t, redlock.WithKeyPrefix("app1:"), redlock.WithFencePrefix("app1:fence:"), redlock.WithFencing())
	ctx := context.Background()
	l, err := c.Lock(ctx, "job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	redlock.Settle(c)
	if l.Key() != "job" {
		t.Errorf("Key() = %q, want the key as given", l.Key())
	}
	if n := cl.count("app1:job", l.Value()); n != 3 {
		t.Errorf("%d nodes hold app1:job, want 3", n)
	}
	if n := cl.count("job", l.Value()); n != 0 {
		t.Errorf("%d nodes hold the unprefixed key", n)
	}
	if got, want := c.FenceKey("job"), "app1:fence:{app1:job}"; got != want {
		t.Errorf("FenceKey = %q, want %q", got, want)
	}
	// The token counts once a majority raised its counter: a node whose
	// round-1 SET was sent after the raise reached it (its goroutine not
	// yet run, on a loaded machine) holds the key with its counter unraised.
	raised := 0
	for i, m := range cl.nodes {
		if !m.Exists("app1:fence:{app1:job}") {
			continue
		}
		if v, err := m.Get("app1:fence:{app1:job}"); err != nil || v != "1" {
			t.Errorf("node %d: counter %q, %v; want 1", i, v, err)
		}
		raised++
	}
	if raised < 2 {
		t.Errorf("the counter app1:fence:{app1:job} is on %d nodes, want a majority", raised)
	}
	// A Client with another prefix does not see the lock; one with the
	// same prefix does.
	other := cl.client(t, redlock.WithKeyPrefix("app2:"))
	ol, err := other.TryLock(ctx, "job", time.Second)
	if err != nil {
		t.Fatalf("another prefix's lock: %v", err)
	}
	_ = ol.Unlock(ctx)
	same := cl.client(t, redlock.WithKeyPrefix("app1:"))
	if _, err := same.TryLock(ctx, "job", time.Second); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("same prefix: err = %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFencePrefixInvalid(t *testing.T) {
	cl := newCluster(t, 3)
	pools := []redlock.Pool{cl.pools[0], cl.pools[1], cl.pools[2]}
	for _, p := range []string{"", "a{b", "x}"} {
		if _, err := redlock.New(pools, redlock.WithFencePrefix(p)); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("WithFencePrefix(%q): err = %v, want ErrInvalid", p, err)
		}
	}
}

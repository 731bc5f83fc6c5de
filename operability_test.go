package redlock_test

// The operator's view on real nodes (issue 10): a degraded quorum and a lock
// that lost its key on a node are visible before they become an outage.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
)

// Three pools, the third pointing at nothing: Lock succeeds, as it should,
// and the deployment says it survives no further failure, through Ping,
// Lock.Margin and the slog observer, with the dead node named.
func TestRealDegradedQuorumIsVisible(t *testing.T) {
	addrs := realNodes(t, 2)
	dead := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t)) // nothing listens
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c := realClient(t, append(addrs, dead), redlock.WithObserver(observe.Slog(logger)))
	ctx := context.Background()

	h, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Up != 2 || h.Spare() != 0 || !h.Degraded() {
		t.Errorf("Ping: %v; want 2 of 3 up, none spare", h)
	}
	if ne := h.Nodes[2].Err; ne == nil || !strings.Contains(ne.Error(), dead) {
		t.Errorf("Ping's node 2 error %v does not name %s", ne, dead)
	}

	l, err := c.Lock(ctx, "real:degraded", 10*time.Second)
	if err != nil {
		t.Fatalf("Lock with 2 of 3 up: %v", err)
	}
	realEventually(2*time.Second, func() bool { return l.Margin() == 0 && l.Held() == 2 })
	if l.Held() != 2 || l.Margin() != 0 {
		t.Errorf("Held %d, Margin %d; want 2 and 0", l.Held(), l.Margin())
	}
	// The warning comes once every node has answered (observe.KindSettled).
	if !realEventually(2*time.Second, func() bool { return strings.Contains(logs.String(), "bare majority") }) ||
		!strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("no warning of a lock on a bare majority in the log:\n%s", logs.String())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// After one node's key is overwritten by another token, Extend still
// succeeds on the other two, which is right, and the lock shows that it now
// stands on a bare majority. (A node that lost the key outright is
// re-seeded instead: reseed_test.go.)
func TestRealFlushedNodeIsVisible(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs)
	ctx := context.Background()
	l, err := c.Lock(ctx, "real:flushed", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, "real:flushed", l.Value())
	realEventually(2*time.Second, func() bool { return l.Held() == 3 })
	if l.Held() != 3 || l.Margin() != 1 {
		t.Errorf("before the flush: Held %d, Margin %d; want 3 and 1", l.Held(), l.Margin())
	}
	if _, err := realConn(t, addrs[1]).Do("SET", "real:flushed", "someone-else", "PX", 10000); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend with the key on 2 of 3: %v", err)
	}
	// Node 1 answers its refusal just after the majority; Margin counts it then.
	realEventually(2*time.Second, func() bool { return l.Held() == 2 && l.Margin() == 0 })
	if l.Held() != 2 || l.Margin() != 0 {
		t.Errorf("after the overwrite: Held %d, Margin %d; want 2 and 0", l.Held(), l.Margin())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer that a logger may write while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

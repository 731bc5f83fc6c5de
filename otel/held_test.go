package redlockotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/observe"
	redlockotel "github.com/quorumlock/redlock/otel"
)

// A clock the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock(h *harness) *clock {
	c := &clock{t: time.Now()}
	redlockotel.SetNow(h.obs, c.now)
	return c
}
func (h *harness) gauges(t *testing.T) string {
	return fmt.Sprintf("held %d degraded %d", h.sum(t, "redlock.lock.held"), h.sum(t, "redlock.lock.degraded"))
}

// The rules of the held-lock table, event by event, as held.go states them.
func TestHeldTable(t *testing.T) {
	h := newHarness(t, redlockotel.WithMaxTTL(time.Minute))
	clk := newClock(h)
	ctx := context.Background()
	send := func(e observe.Event) { clk.advance(time.Millisecond); h.obs.Observe(ctx, e) }
	want := func(step, gauges string) {
		t.Helper()
		if got := h.gauges(t); got != gauges {
			t.Fatalf("%s: %s, want %s", step, got, gauges)
		}
	}
	bare := observe.Event{Kind: observe.KindAcquired, Held: 3, Margin: 0, Quorum: 3}
	healthy := observe.Event{Kind: observe.KindAcquired, Held: 5, Margin: 2, Quorum: 3}
	with := func(e observe.Event, id uint64, key string) observe.Event { e.ID, e.Key = id, key; return e }
	as := func(e observe.Event, kind observe.Kind) observe.Event { e.Kind = kind; return e }

	send(with(bare, 1, "a"))
	send(observe.Event{Kind: observe.KindAcquired, ID: 2, Key: "one-node", Held: 1, Quorum: 1})
	send(observe.Event{Kind: observe.KindAcquired, ID: 3, Key: "two-nodes", Held: 2, Quorum: 2})
	want("bare majority of 5, one node, two nodes", "held 3 degraded 2")

	// The Unlock of the first lock on "a" begins; a second lock is granted
	// on "a" before that Unlock's end is reported.
	clk.advance(time.Second)
	unlockBegan := clk.now()
	send(with(bare, 4, "a"))
	want("a new lock on a replaces the old", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindReleased, ID: 5, Key: "a", Latency: clk.now().Add(time.Millisecond).Sub(unlockBegan)})
	want("the old lock's late Unlock leaves the new one", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindLost, ID: 1, Key: "a", Err: redlock.ErrLockLost})
	want("the old lock's loss leaves the new one", "held 3 degraded 2")
	send(as(with(healthy, 6, "a"), observe.KindExtended))
	want("extended on a healthy margin", "held 3 degraded 1")
	send(as(with(bare, 7, "a"), observe.KindExtended))
	want("extended on a bare majority", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindExtendFailed, ID: 8, Key: "a", Latency: time.Millisecond, Err: redlock.ErrNotObtained})
	want("a failed Extend: the old window holds", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindLost, ID: 4, Key: "a", Err: redlock.ErrLockLost})
	want("lost", "held 2 degraded 1")

	send(as(with(bare, 9, "unknown"), observe.KindExtended))
	want("an Extend of a lock not seen acquired", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindExtendFailed, ID: 10, Key: "unknown", Latency: time.Microsecond, Err: redlock.ErrExpired})
	want("an Extend of an expired lock", "held 2 degraded 1")
	send(as(with(bare, 15, "gone"), observe.KindExtended))
	want("an Extend of another lock not seen acquired", "held 3 degraded 2")
	send(observe.Event{Kind: observe.KindExtendFailed, ID: 16, Key: "gone", Latency: time.Microsecond,
		Err: fmt.Errorf("%w: %w: the key is gone", redlock.ErrNotObtained, redlock.ErrLockLost)})
	want("an Extend that found the lock lost", "held 2 degraded 1")
	send(observe.Event{Kind: observe.KindReleaseFailed, ID: 11, Key: "two-nodes", Latency: time.Millisecond, Err: redlock.ErrExpired})
	want("a failed Unlock", "held 1 degraded 0")
	send(observe.Event{Kind: observe.KindReleased, ID: 12, Key: "two-nodes", Latency: time.Millisecond})
	want("a second Unlock", "held 1 degraded 0")

	send(with(bare, 13, "b"))
	clk.advance(59 * time.Second)
	send(as(with(bare, 14, "b"), observe.KindExtended))
	clk.advance(59 * time.Second)
	want("extended within the max ttl", "held 1 degraded 1")
	clk.advance(2 * time.Second)
	want("past the max ttl", "held 0 degraded 0")
	if n := redlockotel.HeldStates(h.obs); n != 0 {
		t.Errorf("%d locks kept past the max ttl", n)
	}
}

// A Lock whose end never comes (its token function panicked) has its span
// ended with an error and its state dropped; so do answers that no call
// will claim.
func TestAbandonedCalls(t *testing.T) {
	h := newHarness(t)
	clk := newClock(h)
	c := startCluster(t, 1)
	client := client(t, h, c.pools, redlock.WithTokenFunc(func() (string, error) { panic("no entropy") }))
	func() {
		defer func() { _ = recover() }()
		_, _ = client.TryLock(context.Background(), "panics", time.Minute)
		t.Fatal("TryLock did not panic")
	}()
	if n := redlockotel.CallStates(h.obs); n != 1 {
		t.Fatalf("%d calls kept, want the panicked one", n)
	}
	// Answers to an Unlock whose entry is gone.
	h.obs.Observe(context.Background(), observe.Event{Kind: observe.KindNode, ID: 99, Op: observe.OpRelease, Outcome: observe.OutcomeAgreed})

	clk.advance(redlockotel.MaxBufferedAge + time.Second)
	redlockotel.Sweep(h.obs)
	if n := redlockotel.CallStates(h.obs); n != 1 {
		t.Fatalf("%d calls kept after the buffered age, want the Lock call only", n)
	}
	if len(h.ended("redlock.lock")) != 0 {
		t.Fatal("the Lock span ended before its time")
	}
	clk.advance(redlockotel.MaxCallAge)
	redlockotel.Sweep(h.obs)
	if n := redlockotel.CallStates(h.obs); n != 0 {
		t.Errorf("%d calls kept after the max call age, want 0", n)
	}
	span := h.oneSpan(t, "redlock.lock")
	if span.Status().Code != codes.Error {
		t.Errorf("abandoned span's status %v, want Error", span.Status())
	}
}

// Close ends the spans still open and stops the gauges.
func TestClose(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.obs.Observe(ctx, observe.Event{Kind: observe.KindAttempt, ID: 1, Key: "k", Try: 1})
	h.obs.Observe(ctx, observe.Event{Kind: observe.KindAcquired, ID: 2, Key: "j", Quorum: 3})
	if err := h.obs.Close(); err != nil {
		t.Fatal(err)
	}
	if span := h.oneSpan(t, "redlock.lock"); span.Status().Code != codes.Error {
		t.Errorf("span left open at Close: status %v", span.Status())
	}
	if _, ok := h.metric(t, "redlock.lock.held"); ok {
		t.Error("the held gauge is still reported after Close")
	}
	h.obs.Observe(ctx, observe.Event{Kind: observe.KindAttempt, ID: 3, Key: "k", Try: 1})
	h.obs.Observe(ctx, observe.Event{Kind: observe.KindAcquired, ID: 3, Key: "k", Quorum: 3})
	if n := redlockotel.CallStates(h.obs) + redlockotel.HeldStates(h.obs); n != 0 {
		t.Errorf("%d states kept after Close", n)
	}
	if got := h.sum(t, "redlock.lock.outcomes", acquired); got != 2 {
		t.Errorf("%d acquisitions counted, want 2: counters go on after Close", got)
	}
}

// Failures that come after the majority: Lock returns with the failing
// nodes still in flight (a provisional margin of 2), and the degraded gauge
// follows the final margin once every node has answered (EventSettled).
func TestDegradedFromSettled(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 5)
	c.servers[3].Stop()
	c.servers[4].Stop()
	late := newGate(1)
	c.pools[3].wait.Store(late)
	c.pools[4].wait.Store(late)
	cl := client(t, h, c.pools)
	l, err := cl.Lock(context.Background(), "settled", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if m := l.Margin(); m != 2 {
		t.Fatalf("margin %d with two nodes in flight, want 2", m)
	}
	if got := h.sum(t, "redlock.lock.degraded"); got != 0 {
		t.Errorf("degraded gauge %d before the failures are known, want 0", got)
	}
	late.pass() // the dead nodes answer now
	waitFor(t, 5*time.Second, "the degraded gauge at 1 after every node answered",
		func() bool { return h.sum(t, "redlock.lock.degraded") == 1 })
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

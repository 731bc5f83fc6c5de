package redlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
	"github.com/quorumlock/redlock/redigo"
	"go.uber.org/goleak"
)

// Issue 23, "no lock left behind": a release is never skipped, Close ends
// what runs, every waiter wakes, and every bound holds, for every primitive
// (engine.go).

// A holder is one primitive's held lease, with its release, and a probe
// that another client can run to see whether the lease is free again.
type holder struct {
	name    string
	acquire func(ctx context.Context, c *redlock.Client) (release func(context.Context) error, err error)
	free    func(ctx context.Context, c *redlock.Client) error // nil once the lease is free
}

func holders() []holder {
	return []holder{
		{"mutex",
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				l, err := c.Lock(ctx, "left:mutex", time.Minute)
				return l.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) error {
				l, err := c.TryLock(ctx, "left:mutex", time.Minute)
				if err == nil {
					err = l.Unlock(ctx)
				}
				return err
			}},
		{"permit",
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				p, err := acquireOn(ctx, c, "left:sem", 1, time.Minute)
				return p.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) error {
				p, err := tryAcquireOn(ctx, c, "left:sem", 1, time.Minute)
				if err == nil {
					err = p.Unlock(ctx)
				}
				return err
			}},
		{"reader",
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				l, err := c.RWMutex("left:rw").RLock(ctx, time.Minute)
				return l.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) error {
				l, err := c.RWMutex("left:rw").TryLock(ctx, time.Minute)
				if err == nil {
					err = l.Unlock(ctx)
				}
				return err
			}},
		{"writer",
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				l, err := c.RWMutex("left:rw2").Lock(ctx, time.Minute)
				return l.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) error {
				l, err := c.RWMutex("left:rw2").TryRLock(ctx, time.Minute)
				if err == nil {
					err = l.Unlock(ctx)
				}
				return err
			}},
		{"leadership",
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				ld, err := c.Election("left:elect", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "v")
				return ld.Resign, err
			},
			func(ctx context.Context, c *redlock.Client) error {
				l, err := c.TryLock(ctx, "left:elect", time.Minute)
				if err == nil {
					err = l.Unlock(ctx)
				}
				return err
			}},
	}
}

// A release with a ctx that has ended (defer l.Unlock(ctx) after the
// request's context was cancelled) is still sent: the lease is free at
// once for another client. A second release says "already released", not
// "expired".
func TestRealReleaseWithEndedContext(t *testing.T) {
	addrs := realNodes(t, 3)
	owner, other := realClient(t, addrs), realClient(t, addrs)
	for _, h := range holders() {
		t.Run(h.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			release, err := h.acquire(ctx, owner)
			if err != nil {
				t.Fatal(err)
			}
			redlock.Settle(owner)
			cancel()
			if err := release(ctx); err != nil {
				t.Fatalf("release with an ended ctx: %v", err)
			}
			if err := h.free(context.Background(), other); err != nil {
				t.Fatalf("the lease is still held after its release: %v", err)
			}
			err = release(context.Background())
			if h.name == "leadership" {
				if !errors.Is(err, redlock.ErrNotLeader) {
					t.Errorf("second Resign = %v, want ErrNotLeader", err)
				}
				return
			}
			if !errors.Is(err, redlock.ErrReleased) || errors.Is(err, redlock.ErrExpired) {
				t.Errorf("second release = %v, want ErrReleased and not ErrExpired", err)
			}
		})
	}
}

// A release that no majority confirms says so, and wraps the ctx error of
// a caller whose ctx had ended; it still takes one node timeout at most.
func TestRealUnconfirmedReleaseWrapsContext(t *testing.T) {
	servers := redistest.StartN(t, 2)
	frozen := redistest.StartFrozen(t)
	const timeout = 300 * time.Millisecond
	c := realClient(t, []string{servers[0].Addr, servers[1].Addr, frozen.Addr()}, redlock.WithNodeTimeout(timeout))
	l, err := c.Lock(context.Background(), "left:unconfirmed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	servers[1].Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err = l.Unlock(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "release not confirmed") {
		t.Errorf("Unlock = %v, want a release not confirmed, with context.Canceled", err)
	}
	if took > timeout+500*time.Millisecond {
		t.Errorf("Unlock took %v, want at most one node timeout (%v)", took, timeout)
	}
	conn := realConn(t, servers[0].Addr)
	if v := realGet(t, conn, "left:unconfirmed"); v != "" {
		t.Errorf("node 0 still holds %q: the release was not sent", v)
	}
}

// Close wakes every waiting call of every primitive at once, with ErrClosed;
// their next timed attempt was a minute away.
func TestRealCloseEndsWaitingCalls(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	owner := realClient(t, addrs)
	waiter := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithWakeUp(false))
	var calls []func() error
	for _, h := range holders() {
		release, err := h.acquire(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = release(ctx) })
		wait := func() error { _, err := h.acquire(ctx, waiter); return err }
		switch h.name { // readers share: a writer waits for a reader, a reader for a writer
		case "reader":
			wait = func() error { _, err := waiter.RWMutex("left:rw").Lock(ctx, time.Minute); return err }
		case "writer":
			wait = func() error { _, err := waiter.RWMutex("left:rw2").RLock(ctx, time.Minute); return err }
		}
		calls = append(calls, wait)
	}
	done := make(chan error, len(calls))
	for _, call := range calls {
		go func() { done <- call() }()
	}
	time.Sleep(300 * time.Millisecond) // each has made its first attempt and waits
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	for range calls {
		select {
		case err := <-done:
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("a waiting call ended with %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a waiting call still waits %v after Close", time.Since(start))
		}
	}
}

// Close resigns leaderships and ends Do loops: Done closes, the cause says
// the client closed, and the keys are free for others at once. Every later
// call fails with ErrClosed, Ping included; a release still goes out.
func TestRealCloseEndsHolds(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	c, other := realClient(t, addrs), realClient(t, addrs)
	ld, err := c.Election("close:elect", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Lock(ctx, "close:held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	inFn := make(chan struct{})
	doErr := make(chan error, 1)
	var cause atomic.Value
	go func() {
		doErr <- c.Do(ctx, "close:do", time.Minute, func(ctx context.Context) error {
			close(inFn)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		})
	}()
	<-inFn
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ld.Done():
	default:
		t.Error("the leadership's Done is open after Close")
	}
	if err := ld.Err(); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("leadership Err = %v, want ErrClosed", err)
	}
	select {
	case err := <-doErr:
		if !errors.Is(err, redlock.ErrClosed) || !errors.Is(err, redlock.ErrLockLost) {
			t.Errorf("Do = %v, want ErrClosed and ErrLockLost", err)
		}
		if c, _ := cause.Load().(error); !errors.Is(c, redlock.ErrClosed) {
			t.Errorf("fn's cause = %v, want ErrClosed", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do still runs after Close")
	}
	for _, key := range []string{"close:elect", "close:do"} {
		l, err := other.TryLock(ctx, key, time.Minute)
		if err != nil {
			t.Errorf("%s is still held after Close: %v", key, err)
			continue
		}
		_ = l.Unlock(ctx)
	}

	// Every later call fails the same way.
	for name, err := range map[string]error{
		"TryLock":     func() error { _, err := c.TryLock(ctx, "x", time.Second); return err }(),
		"Lock":        func() error { _, err := c.Lock(ctx, "x", time.Second); return err }(),
		"Do":          c.Do(ctx, "x", time.Second, func(context.Context) error { return nil }),
		"Ping":        func() error { _, err := c.Ping(ctx); return err }(),
		"Acquire":     func() error { _, err := acquireOn(ctx, c, "x", 1, time.Second); return err }(),
		"RLock":       func() error { _, err := c.RWMutex("x").RLock(ctx, time.Second); return err }(),
		"Campaign":    func() error { _, err := c.Election("y").Campaign(ctx, "v"); return err }(),
		"Leader":      func() error { _, err := c.Election("y").Leader(ctx); return err }(),
		"Observe":     func() error { _, err := c.Election("y").Observe(ctx); return err }(),
		"Extend":      held.Extend(ctx, time.Minute),
		"Close again": c.Close(),
	} {
		if name == "Close again" {
			if err != nil {
				t.Errorf("a second Close: %v", err)
			}
			continue
		}
		if !errors.Is(err, redlock.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	// A release is never refused.
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
	if _, err := other.TryLock(ctx, "close:held", time.Minute); err != nil {
		t.Errorf("the lock released after Close is still held: %v", err)
	}
}

// Close ends an Observe that began before it: its goroutine returns and the
// channel closes, even while it waits to send a change that no one reads
// (before the fix it waited for ctx, here forever).
func TestRealCloseEndsObserve(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	c := realClient(t, addrs)
	e := c.Election("close:observe", redlock.WithObserveInterval(10*time.Millisecond))
	before := goleak.IgnoreCurrent()
	ch, err := e.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := <-ch; l.Term != 0 {
		t.Fatalf("first leader %v, want none", l)
	}
	if _, err := c.Election("close:observe", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	// The change is read within an interval; the send then waits, as no
	// one receives. (If Close came first, the test passes either way.)
	time.Sleep(200 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("Observe's goroutine outlives Close: %v", err)
	}
	for range ch { // closed, after at most the change it held
	}
}

// Close returns within its stated bound, two node timeouts, with a frozen
// node among a leadership, a Do loop and a waiting Lock; and the leadership
// it resigned is free on the live nodes.
func TestRealCloseBoundWithFrozenNode(t *testing.T) {
	servers := redistest.StartN(t, 2)
	frozen := redistest.StartFrozen(t)
	addrs := []string{servers[0].Addr, servers[1].Addr, frozen.Addr()}
	const timeout = 200 * time.Millisecond
	ctx := context.Background()
	c := realClient(t, addrs, redlock.WithNodeTimeout(timeout), redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	other := realClient(t, addrs, redlock.WithNodeTimeout(timeout))
	ld, err := c.Election("bound:elect", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Lock(ctx, "bound:held", time.Minute); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = c.Lock(ctx, "bound:held", time.Minute) }()
	go func() {
		_ = c.Do(ctx, "bound:do", time.Minute, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	time.Sleep(3 * timeout) // the waiting Lock has made its first attempt
	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	if took > 2*timeout+300*time.Millisecond {
		t.Errorf("Close took %v, want at most two node timeouts (%v)", took, 2*timeout)
	}
	t.Logf("Close took %v (%v)", took, err)
	if ld.Err() == nil {
		t.Error("the leadership survived Close")
	}
	for i, s := range servers {
		if v := realGet(t, realConn(t, s.Addr), "bound:elect"); v != "" {
			t.Errorf("node %d still holds the resigned leadership's key", i)
		}
	}
}

// Every method of a nil or zero Client, and of the nil values of the
// primitives, returns an error wrapping ErrInvalid, never a panic.
func TestNilAndZeroReceivers(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*redlock.Client{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			for call, err := range map[string]error{
				"Lock":     func() error { _, err := c.Lock(ctx, "k", time.Second); return err }(),
				"TryLock":  func() error { _, err := c.TryLock(ctx, "k", time.Second); return err }(),
				"Do":       c.Do(ctx, "k", time.Second, func(context.Context) error { return nil }),
				"Ping":     func() error { _, err := c.Ping(ctx); return err }(),
				"Close":    c.Close(),
				"Acquire":  func() error { _, err := acquireOn(ctx, c, "k", 1, time.Second); return err }(),
				"RLock":    func() error { _, err := c.RWMutex("k").RLock(ctx, time.Second); return err }(),
				"Lock (w)": func() error { _, err := c.RWMutex("k").Lock(ctx, time.Second); return err }(),
				"Campaign": func() error { _, err := c.Election("k").Campaign(ctx, "v"); return err }(),
				"Leader":   func() error { _, err := c.Election("k").Leader(ctx); return err }(),
			} {
				if !errors.Is(err, redlock.ErrInvalid) {
					t.Errorf("%s = %v, want ErrInvalid", call, err)
				}
			}
			_ = c.FenceKey("k")
		})
	}
	var l *redlock.Lock
	var p *redlock.Lock
	var ld *redlock.Leadership
	for call, err := range map[string]error{
		"Lock.Extend":      l.Extend(ctx, time.Second),
		"Lock.Unlock":      l.Unlock(ctx),
		"zero Lock.Unlock": new(redlock.Lock).Unlock(ctx),
		"permit Extend":    p.Extend(ctx, time.Second),
		"permit Unlock":    p.Unlock(ctx),
		"Resign":           ld.Resign(ctx),
		"zero Resign":      new(redlock.Leadership).Resign(ctx),
		"zero Leadership":  new(redlock.Leadership).Err(),
		"zero Election":    func() error { _, err := new(redlock.Election).Leader(ctx); return err }(),
		"zero Semaphore":   func() error { _, err := new(redlock.Semaphore).Acquire(ctx, time.Second); return err }(),
		"zero RWMutex":     func() error { _, err := new(redlock.RWMutex).RLock(ctx, time.Second); return err }(),
	} {
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", call, err)
		}
	}
	_ = new(redlock.Leadership).Done()
	_ = new(redlock.Lock).Done()
}

// With WithKeyPrefix, a release wakes the waiter: the announcement names
// the prefixed key, and so does the waiter's registration.
func TestRealWakeUpWithKeyPrefix(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holderC := realClient(t, addrs, redlock.WithKeyPrefix("app:"))
	waiter := realClient(t, addrs, redlock.WithKeyPrefix("app:"), redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	t.Cleanup(func() { waiter.Close() })
	l, err := holderC.Lock(ctx, "wake:prefix", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := waiter.Lock(lctx, "wake:prefix", time.Minute)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, waiter, "wake:prefix", 1, len(addrs))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release (its timed attempt is a minute away): %v", err)
	}
}

// A release wakes the waiters of every primitive: a writer waiting for a
// reader, a reader waiting for a writer, a semaphore waiting for a permit,
// and a candidate waiting for a leader's resignation. Their timed attempts
// are a minute away; each must get in within seconds.
func TestRealWakeUpEveryPrimitive(t *testing.T) {
	addrs := realNodes(t, 3)
	for _, prefix := range []string{"", "app:"} {
		t.Run("prefix "+prefix, func(t *testing.T) { testWakeUpEveryPrimitive(t, addrs, prefix) })
	}
}

func testWakeUpEveryPrimitive(t *testing.T, addrs []string, prefix string) {
	ctx := context.Background()
	owner := realClient(t, addrs, redlock.WithKeyPrefix(prefix))
	type pair struct {
		name    string
		held    func() (func(context.Context) error, error)
		waitFor func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error)
	}
	pairs := []pair{
		{"writer after reader",
			func() (func(context.Context) error, error) {
				l, err := owner.RWMutex("wake:rw1").RLock(ctx, time.Minute)
				return l.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				l, err := c.RWMutex("wake:rw1").Lock(ctx, time.Minute)
				return l.Unlock, err
			}},
		{"reader after writer",
			func() (func(context.Context) error, error) {
				l, err := owner.RWMutex("wake:rw2").Lock(ctx, time.Minute)
				return l.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				l, err := c.RWMutex("wake:rw2").RLock(ctx, time.Minute)
				return l.Unlock, err
			}},
		{"permit",
			func() (func(context.Context) error, error) {
				p, err := acquireOn(ctx, owner, "wake:sem", 1, time.Minute)
				return p.Unlock, err
			},
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				p, err := acquireOn(ctx, c, "wake:sem", 1, time.Minute)
				return p.Unlock, err
			}},
		{"candidate",
			func() (func(context.Context) error, error) {
				ld, err := owner.Election("wake:elect", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "a")
				return ld.Resign, err
			},
			func(ctx context.Context, c *redlock.Client) (func(context.Context) error, error) {
				ld, err := c.Election("wake:elect", redlock.WithElectionTTL(time.Minute)).Campaign(ctx, "b")
				return ld.Resign, err
			}},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			waiter := realClient(t, addrs, redlock.WithKeyPrefix(prefix), redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
			t.Cleanup(func() { waiter.Close() })
			release, err := p.held()
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				rel, err := p.waitFor(wctx, waiter)
				if err == nil {
					err = rel(ctx)
				}
				got <- err
			}()
			all := uint64(1)<<len(addrs) - 1
			if !realEventually(10*time.Second, func() bool {
				return redlock.Waiters(waiter) == 1 && redlock.WakeLive(waiter) == all
			}) {
				t.Fatal("the waiter never waited for a release")
			}
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("not woken by the release: %v", err)
			}
		})
	}
}

// Announcements that are not real releases (forged here; a release of the
// same name in another database looks the same) cannot multiply a waiter's
// attempts: within one pause, woken attempts are spaced ever wider, so a
// flood adds a handful, not hundreds.
func TestRealWakeUpFloodIsCapped(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holderC := realClient(t, addrs)
	var ev wakeEvents
	waiter := realClient(t, addrs, redlock.WithTries(2),
		redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(&ev))
	t.Cleanup(func() { waiter.Close() })
	l, err := holderC.Lock(ctx, "wake:flood", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, _ = waiter.Lock(lctx, "wake:flood", time.Minute)
	}()
	awaitWaiting(t, waiter, "wake:flood", 1, len(addrs))
	conns := make([]redis.Conn, len(addrs))
	for i, a := range addrs {
		conns[i] = realConn(t, a)
	}
	const flood = 2 * time.Second
	sent := 0
	for end := time.Now().Add(flood); time.Now().Before(end); sent++ {
		for _, conn := range conns {
			if _, err := conn.Do("PUBLISH", redlock.ReleaseChannel("wake:flood"), "wake:flood"); err != nil {
				t.Fatal(err)
			}
		}
	}
	woken := ev.woken.Load()
	t.Logf("%d forged announcements per node in %v: %d woken attempts", sent, flood, woken)
	// 1 + log2(2s / 50µs) ≈ 16: generous for a round trip of 50µs or more.
	if woken > 20 {
		t.Errorf("%d woken attempts in %v of forged announcements, want at most 20", woken, flood)
	}
	if woken == 0 {
		t.Error("no woken attempt: the flood reached no waiter")
	}
}

// The cap does not count a woken attempt that lost to a new holder: the
// announcement that woke it was a real release. A waiter woken after each
// hand-over (the key changes holder on every node, then announces) makes
// an attempt after each one; if the holder changes on one node of three
// only, the same announcements are capped as a flood is.
func TestRealWakeUpCapSparesHandOvers(t *testing.T) {
	const handOvers = 50
	for _, tc := range []struct {
		name    string
		changed int // nodes where the holder changes
	}{
		{"every node", 3},
		{"one node", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := realNodes(t, 3)
			const key = "wake:handover"
			conns := make([]redis.Conn, len(addrs))
			for i, a := range addrs {
				conns[i] = realConn(t, a)
				if _, err := conns[i].Do("SET", key, "h0", "PX", 60000); err != nil {
					t.Fatal(err)
				}
			}
			var ev wakeEvents
			waiter := realClient(t, addrs, redlock.WithTries(2),
				redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(&ev))
			t.Cleanup(func() { waiter.Close() })
			lctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(lctx, key, time.Minute)
				done <- err
			}()
			defer func() { cancel(); <-done }()
			awaitWaiting(t, waiter, key, 1, len(addrs))
			for i := 1; i <= handOvers; i++ {
				for j, conn := range conns {
					if j < tc.changed {
						if _, err := conn.Do("SET", key, fmt.Sprint("h", i), "PX", 60000); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := conn.Do("PUBLISH", redlock.ReleaseChannel(key), key); err != nil {
						t.Fatal(err)
					}
				}
				// The next hand-over once this one's woken attempt has
				// lost, or 100ms (the cap holds it back).
				for end := time.Now().Add(100 * time.Millisecond); ev.wokenLost.Load() < int64(i) && time.Now().Before(end); {
					time.Sleep(100 * time.Microsecond)
				}
			}
			woken := ev.woken.Load()
			t.Logf("%d hand-overs on %d of 3 nodes: %d woken attempts", handOvers, tc.changed, woken)
			switch {
			case tc.changed == 3 && woken < handOvers-5:
				t.Errorf("%d woken attempts after %d hand-overs, want one after each: the cap counted hand-overs", woken, handOvers)
			case tc.changed == 1 && woken > 20:
				t.Errorf("%d woken attempts after %d announcements with the holder unchanged on a quorum, want at most 20", woken, handOvers)
			case woken == 0:
				t.Error("no woken attempt: the announcements reached no waiter")
			}
		})
	}
}

// A re-seed runs after Extend's verdict, within ctx's deadline: one held
// past the old validity does not turn the won Extend into ErrExpired, and
// Extend returns by ctx's deadline.
func TestRealReseedAfterTheVerdict(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	c := realClient(t, addrs)
	l, err := c.Lock(ctx, "reseed:verdict", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, "reseed:verdict", l.Value())
	if _, err := realConn(t, addrs[2]).Do("DEL", "reseed:verdict"); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan int, 3), make(chan struct{})
	defer redlock.HoldReseed(l, entered, release)()
	time.AfterFunc(time.Until(l.Until())+100*time.Millisecond, func() { close(release) }) // past the old window
	time.Sleep(time.Until(l.Until()) - 200*time.Millisecond)                              // the ctx below ends after the old window
	old := l.Until()
	// Node 0 answers last, so that node 2's "no key" is in before the
	// majority is.
	node0 := make(chan struct{})
	defer redlock.HoldNodeStart(c, 0, node0)()
	time.AfterFunc(30*time.Millisecond, func() { close(node0) })
	ectx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Extend(ectx, time.Second)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Extend with a slow re-seed = %v, want nil: a majority extended", err)
	}
	if !l.Until().After(old) {
		t.Errorf("Until did not move: %v, old %v", l.Until(), old)
	}
	if took > 250*time.Millisecond+150*time.Millisecond {
		t.Errorf("Extend took %v, past its ctx's deadline (250ms)", took)
	}
	select {
	case <-entered:
	default:
		t.Error("node 2 was not re-seeded")
	}
}

// An Unlock that overtakes a re-seed in flight leaves no key behind: the
// re-seed's SET lands after the release and is released in turn.
func TestRealUnlockDuringReseedLeavesNoKey(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	c := realClient(t, addrs)
	l, err := c.Lock(ctx, "reseed:unlock", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, "reseed:unlock", l.Value())
	conn2 := realConn(t, addrs[2])
	if _, err := conn2.Do("DEL", "reseed:unlock"); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan int, 3), make(chan struct{})
	defer redlock.HoldReseed(l, entered, release)()
	node0 := make(chan struct{}) // node 0 answers last: see TestRealReseedAfterTheVerdict
	defer redlock.HoldNodeStart(c, 0, node0)()
	time.AfterFunc(30*time.Millisecond, func() { close(node0) })
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, time.Minute) }()
	select {
	case node := <-entered:
		if node != 2 {
			t.Fatalf("re-seeding node %d, want 2", node)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("node 2 was never re-seeded")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-extended; err != nil && !errors.Is(err, redlock.ErrReleased) && !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Extend: %v", err)
	}
	redlock.Settle(c)
	for i, a := range addrs {
		if v := realGet(t, realConn(t, a), "reseed:unlock"); v != "" {
			t.Errorf("node %d holds the released token %q", i, v)
		}
	}
}

// On one node whose Pool keeps its deadlines, rounds run on the caller's
// goroutine (inline.go), and a caller queued behind another's batch must
// still return by its own deadline: not the batch ahead's, nor the later
// deadline of a batch that takes it. Extends of one lock, on a node frozen
// with SIGSTOP.
func TestRealInlineQueuedCallerKeepsItsOwnDeadline(t *testing.T) {
	server := redistest.Start(t)
	if err := server.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	const timeout = 300 * time.Millisecond
	c := realClient(t, []string{server.Addr}, redlock.WithNodeTimeout(timeout))
	ctx := context.Background()
	l, err := c.Lock(ctx, "inline:queued", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Thaw() })
	extend := func(ctx context.Context) { _ = l.Extend(ctx, time.Minute) }
	go extend(ctx) // sent alone: the lane is busy until its deadline
	time.Sleep(20 * time.Millisecond)
	short := make(chan time.Duration, 1)
	go func() { // queued behind it, with a 20ms ctx
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		short <- realTimed(func() { extend(sctx) })
	}()
	own := make(chan time.Duration, 1)
	go func() { own <- realTimed(func() { extend(ctx) }) }() // queued, no ctx deadline
	time.Sleep(260 * time.Millisecond)
	go extend(ctx) // queued last: its batch's deadline is the latest
	if d := <-short; d > 20*time.Millisecond+100*time.Millisecond {
		t.Errorf("a caller with a 20ms ctx returned after %v", d)
	}
	if d := <-own; d > timeout+150*time.Millisecond {
		t.Errorf("a caller without a ctx deadline returned after %v, want its node timeout (%v)", d, timeout)
	}
}

// Extend with no ctx deadline keeps its stated bound when it re-seeds: two
// node timeouts, one for the round and one for the re-seed, even when the
// majority comes late in the first and the re-seed never answers.
func TestRealExtendReseedBoundWithoutDeadline(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	c := realClient(t, addrs, redlock.WithNodeTimeout(timeout))
	l, err := c.Lock(ctx, "reseed:bound", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, "reseed:bound", l.Value())
	if _, err := realConn(t, addrs[2]).Do("DEL", "reseed:bound"); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan int, 3), make(chan struct{})
	defer redlock.HoldReseed(l, entered, release)()
	defer close(release) // the re-seed is held until the test ends
	node0 := make(chan struct{})
	defer redlock.HoldNodeStart(c, 0, node0)()
	time.AfterFunc(timeout/2, func() { close(node0) }) // the majority comes half a node timeout late
	start := time.Now()
	err = l.Extend(ctx, time.Minute)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Extend = %v, want nil: a majority extended", err)
	}
	if took > 2*timeout+500*time.Millisecond {
		t.Errorf("Extend took %v, want at most two node timeouts (%v)", took, 2*timeout)
	}
	select {
	case <-entered:
	default:
		t.Error("node 2 was not re-seeded")
	}
}

// Resign keeps its stated bound when an extension is in flight that wins
// late and then re-seeds a node that restarted empty (the re-seed never
// answers), and the release then waits for a slow node too: it ends the
// extension at once, whether its round or its re-seed is running, so the
// release's node timeout is all it takes. Before the fix Resign waited for
// that extension and its re-seed, nearly two node timeouts, before it sent
// the release: nearly three in all (and the re-seed's wait ignored the
// cancellation: nearly two).
func TestRealResignBoundWithExtensionInFlight(t *testing.T) {
	for _, during := range []string{"round", "re-seed"} {
		t.Run(during, func(t *testing.T) { testResignBound(t, during) })
	}
}

func testResignBound(t *testing.T, during string) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	const timeout = 500 * time.Millisecond
	c := realClient(t, addrs, redlock.WithNodeTimeout(timeout))
	ld, err := c.Election("resign:bound", redlock.WithElectionTTL(3*time.Second)).Campaign(ctx, "v") // extended every second
	if err != nil {
		t.Fatal(err)
	}
	l := redlock.LeadershipLock(ld)
	realAwaitToken(t, addrs, "resign:bound", l.Value())
	redlock.Settle(c)
	if _, err := realConn(t, addrs[2]).Do("DEL", "resign:bound"); err != nil { // node 2 restarted empty
		t.Fatal(err)
	}
	entered, release := make(chan int, 3), make(chan struct{})
	defer redlock.HoldReseed(l, entered, release)()
	defer close(release) // the re-seed never answers
	started := make(chan struct{}, 1)
	defer redlock.SlowNode(c, 0, timeout*9/10, started)() // node 0 answers late, within its timeout
	select {
	case <-started: // the next extension (and publish) round has begun
	case <-time.After(10 * time.Second):
		t.Fatal("no extension began")
	}
	if during == "round" {
		time.Sleep(50 * time.Millisecond) // both rounds of the leadership are in flight
	} else {
		select {
		case <-entered: // the extension won; its re-seed runs
		case <-time.After(10 * time.Second):
			t.Fatal("no re-seed began")
		}
	}
	start := time.Now()
	err = ld.Resign(ctx)
	took := time.Since(start)
	t.Logf("Resign took %v: %v", took, err)
	if took > timeout+300*time.Millisecond {
		t.Errorf("Resign took %v, want at most one node timeout (%v)", took, timeout)
	}
}

// An acquisition that passed its check of Close but had not yet sent its
// round when Close began (here, held back while it makes its token) sends
// nothing: no command reaches the nodes after Close returns, so a program
// exiting then leaves no key behind. (Before the fix Close returned at
// once, and the attempt's SETs and releases, and a reader's removal of its
// registration, came after.)
func TestRealCloseWaitsForAStartedAcquisition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blockAt int32 // the token the attempt makes (a waiting reader makes its registration's first)
		acquire func(ctx context.Context, c *redlock.Client) error
	}{
		{"mutex", 1, func(ctx context.Context, c *redlock.Client) error {
			_, err := c.Lock(ctx, "close:started", time.Minute)
			return err
		}},
		{"semaphore", 1, func(ctx context.Context, c *redlock.Client) error {
			s, err := c.Semaphore("close:started", 1)
			if err != nil {
				return err
			}
			_, err = s.Acquire(ctx, time.Minute)
			return err
		}},
		{"reader", 2, func(ctx context.Context, c *redlock.Client) error {
			_, err := c.RWMutex("close:started").RLock(ctx, time.Minute)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := realNodes(t, 3)
			ctx := context.Background()
			entered, release := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			c := realClient(t, addrs, redlock.WithWakeUp(false), redlock.WithTokenFunc(func() (string, error) {
				n := calls.Add(1)
				if n == tc.blockAt {
					close(entered)
					<-release
				}
				return fmt.Sprintf("close-started-%d-%d", n, time.Now().UnixNano()), nil
			}))
			acquired := make(chan error, 1)
			go func() { acquired <- tc.acquire(ctx, c) }()
			select {
			case <-entered: // past Close's check, making its token
			case err := <-acquired:
				t.Fatalf("the acquisition returned %v before making its token", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the acquisition made no token")
			}
			go func() {
				time.Sleep(50 * time.Millisecond) // Close has begun by then
				close(release)
			}()
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			sent := realWrites(t, addrs)
			select {
			case err := <-acquired:
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("the acquisition returned %v, want ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the acquisition did not return")
			}
			if after := realWrites(t, addrs); after != sent {
				t.Errorf("%d commands reached the nodes after Close returned", after-sent)
			}
			for i, a := range addrs {
				if keys, err := redis.Strings(realConn(t, a).Do("KEYS", "*")); err != nil || len(keys) > 0 {
					t.Errorf("node %d holds %v (%v)", i, keys, err)
				}
			}
		})
	}
}

// realWrites returns how many SET, EVAL and EVALSHA commands the nodes at
// addrs have run.
func realWrites(t *testing.T, addrs []string) (n int64) {
	t.Helper()
	for _, a := range addrs {
		info, err := redis.String(realConn(t, a).Do("INFO", "commandstats"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			for _, cmd := range []string{"cmdstat_set:", "cmdstat_eval:", "cmdstat_evalsha:"} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					var calls int64
					if _, err := fmt.Sscanf(rest, "calls=%d", &calls); err != nil {
						t.Fatalf("%s: %v", line, err)
					}
					n += calls
				}
			}
		}
	}
	return n
}

// A leadership's Until is the zero Time from the moment Resign begins, as
// documented, even while Resign still waits for an extension stuck on a
// frozen node: a leader checking Until must not act on after resigning.
// (Before the fix Until kept the old window until Resign's release began.)
func TestRealLeadershipUntilZeroOnceResignBegins(t *testing.T) {
	servers := redistest.StartN(t, 1)
	ctx := context.Background()
	const timeout = time.Second
	c := realClient(t, []string{servers[0].Addr}, redlock.WithNodeTimeout(timeout))
	ld, err := c.Election("resign:until", redlock.WithElectionTTL(1500*time.Millisecond)).Campaign(ctx, "v") // extended every 500 ms
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[0].Thaw() })
	time.Sleep(600 * time.Millisecond) // an extension has begun, and waits for the frozen node
	resigned := make(chan error, 1)
	go func() { resigned <- ld.Resign(ctx) }()
	select {
	case <-ld.Done(): // Resign has begun
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after Resign began")
	}
	if u := ld.Until(); !u.IsZero() {
		t.Errorf("Until is %v (%v ahead) after Resign began, want the zero Time", u, time.Until(u))
	}
	_ = servers[0].Thaw()
	<-resigned
}

// Do whose lock Close released between the acquisition and fn does not run
// fn: fn would run unprotected, as Do promises never to. It returns an error
// wrapping ErrClosed, and the key is free. (Before the fix fn ran, with a
// cancelled context.)
func TestRealDoClosedBeforeFnDoesNotRunIt(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	for _, do := range []struct {
		name string
		run  func(c *redlock.Client, fn func(context.Context) error) error
	}{
		{"Do", func(c *redlock.Client, fn func(context.Context) error) error {
			return c.Do(ctx, "closed:do", time.Minute, fn)
		}},
		{"RWMutex.Do", func(c *redlock.Client, fn func(context.Context) error) error {
			return c.RWMutex("closed:do").Do(ctx, time.Minute, fn)
		}},
		{"Semaphore.Do", func(c *redlock.Client, fn func(context.Context) error) error {
			s, err := c.Semaphore("closed:do", 1)
			if err != nil {
				return err
			}
			return s.Do(ctx, time.Minute, fn)
		}},
	} {
		t.Run(do.name, func(t *testing.T) {
			// Close at the acquisition: between Do's acquisition and its fn.
			obs := &closeOnKind{kind: observe.KindAcquired, key: "closed:do", done: make(chan struct{})}
			c := realClient(t, addrs, redlock.WithObserver(obs))
			obs.c.Store(c)
			ran := false
			err := do.run(c, func(context.Context) error { ran = true; return nil })
			if ran {
				t.Error("fn ran after Close had released its lock")
			}
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("Do = %v, want ErrClosed", err)
			}
			// Close, called on the acquisition's own goroutine, does not
			// wait for that acquisition (it would wait for itself until
			// its bound, three node timeouts, and fail).
			if obs.err != nil || obs.took > 500*time.Millisecond {
				t.Errorf("Close from the Observer took %v: %v", obs.took, obs.err)
			}
		})
	}
	other := realClient(t, addrs)
	if l, err := other.TryLock(ctx, "closed:do", time.Minute); err != nil {
		t.Errorf("the lock is still held: %v", err)
	} else {
		_ = l.Unlock(ctx)
	}
}

// Close keeps its bound, and leaves no node call running, when it comes
// during a fenced acquisition whose rounds each win late: before the fix
// the attempt ran its fencing round after Close too, won, and only then was
// released, three slow rounds in all, so Close gave up waiting at its bound
// (ErrNodeTimeout) with the release still running. The attempt is now let
// go between its rounds once Close has begun.
func TestRealCloseDuringFencedAcquisition(t *testing.T) {
	for _, primitive := range []string{"mutex", "writer"} {
		t.Run(primitive, func(t *testing.T) {
			addrs := realNodes(t, 3)
			const timeout = 500 * time.Millisecond
			c := realClient(t, addrs, redlock.WithNodeTimeout(timeout), redlock.WithFencing())
			defer redlock.SlowNodes(c, 0b011, timeout*7/10)() // two nodes answer late: every round wins late
			got := make(chan error, 1)
			go func() {
				var err error
				if primitive == "mutex" {
					_, err = c.Lock(context.Background(), "close:fenced", time.Minute)
				} else {
					_, err = c.RWMutex("close:fenced").Lock(context.Background(), time.Minute)
				}
				got <- err
			}()
			time.Sleep(20 * time.Millisecond) // round 1 is in flight
			start := time.Now()
			err := c.Close()
			took := time.Since(start)
			if err != nil {
				t.Errorf("Close = %v after %v: node calls outlived its bound", err, took)
			}
			if took > 2*timeout+300*time.Millisecond {
				t.Errorf("Close took %v, want at most two node timeouts (%v)", took, 2*timeout)
			}
			if err := <-got; !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("the acquisition = %v, want ErrClosed", err)
			}
		})
	}
}

// Close keeps its bound, and leaves no node call running, when it comes
// during a waiting RW writer's attempt with a frozen node (SIGSTOP): the
// attempt's undo on the frozen node, then the writer's removal of its
// intent mark, which must still go out so that readers are not held back:
// three node timeouts. Before the fix Close stopped waiting at two and
// returned ErrNodeTimeout with the removal still running, while its doc
// said everything ends within two.
func TestRealCloseDuringRWWriterAttemptWithFrozenNode(t *testing.T) {
	servers := redistest.StartN(t, 3)
	addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
	const timeout = 400 * time.Millisecond
	ctx := context.Background()
	owner := realClient(t, addrs, redlock.WithNodeTimeout(timeout))
	reader, err := owner.RWMutex("close:rw").RLock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redlock.Settle(owner)
	if err := servers[2].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[2].Thaw() })
	c := realClient(t, addrs, redlock.WithNodeTimeout(timeout), redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	defer redlock.SlowNode(c, 0, timeout/2, nil)() // node 0 refuses half a node timeout late
	got := make(chan error, 1)
	go func() { _, err := c.RWMutex("close:rw").Lock(ctx, time.Minute); got <- err }()
	time.Sleep(timeout / 8) // the writer's first attempt is in flight
	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	if err != nil {
		t.Errorf("Close = %v after %v: node calls outlived its bound", err, took)
	}
	if took > 3*timeout+300*time.Millisecond {
		t.Errorf("Close took %v, want at most three node timeouts (%v)", took, 3*timeout)
	}
	if err := <-got; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("the writer = %v, want ErrClosed", err)
	}
	_ = servers[2].Thaw()
	_ = reader.Unlock(ctx)
}

// closeOnKind closes its Client the first time it is told of an event of
// kind (for key, unless key is empty), and records what Close returned and
// how long it took.
type closeOnKind struct {
	kind  observe.Kind
	key   string
	c     atomic.Pointer[redlock.Client]
	after func()        // if set, runs right after Close returned
	done  chan struct{} // closed once Close has returned
	err   error
	took  time.Duration
}

func (o *closeOnKind) Observe(_ context.Context, e observe.Event) {
	if e.Kind != o.kind || (o.key != "" && e.Key != o.key) {
		return
	}
	if c := o.c.Swap(nil); c != nil {
		start := time.Now()
		o.err = c.Close()
		o.took = time.Since(start)
		if o.after != nil {
			o.after()
		}
		close(o.done)
	}
}

// Close called from an Observer returns. From the events reported on the
// caller's goroutine, or by Do's keeper once it has lost, it returns at
// once, with nil. KindNode is reported from inside the node call that
// Close waits for: from it Close waits out its bound, three node timeouts,
// and returns an error wrapping ErrNodeTimeout, as observe.Observer
// documents. KindSettled comes from the node call that answers last, or
// from the caller if every node answered before the round was won: either.
func TestRealCloseFromAnObserver(t *testing.T) {
	addrs := realNodes(t, 3)
	const nodeTimeout = 200 * time.Millisecond
	const (
		outside = iota // reported on the caller's goroutine: Close returns at once
		inside         // reported inside a node call: Close waits out its bound
		either
	)
	for _, tc := range []struct {
		kind  observe.Kind
		where int
	}{
		{observe.KindAttempt, outside},
		{observe.KindNode, inside},
		{observe.KindRetry, outside},
		{observe.KindAcquired, outside},
		{observe.KindSettled, either},
		{observe.KindExtended, outside},
		{observe.KindReleased, outside},
		{observe.KindReleaseFailed, outside},
		{observe.KindNotAcquired, outside},
		{observe.KindExtendFailed, outside},
		{observe.KindLost, outside},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			obs := &closeOnKind{kind: tc.kind, done: make(chan struct{})}
			c := realClient(t, addrs, redlock.WithObserver(obs), redlock.WithNodeTimeout(nodeTimeout))
			obs.c.Store(c)
			ctx := context.Background()
			key := "close-from-" + tc.kind.String()
			switch tc.kind {
			case observe.KindNotAcquired, observe.KindRetry: // the key is taken
				for _, a := range addrs {
					if _, err := realConn(t, a).Do("SET", key, "another holder's token"); err != nil {
						t.Fatal(err)
					}
				}
				if tc.kind == observe.KindNotAcquired {
					_, _ = c.TryLock(ctx, key, 5*time.Second)
				} else { // Lock retries, and gives up on the closed Client
					_, _ = c.Lock(ctx, key, 5*time.Second)
				}
			case observe.KindReleaseFailed: // the key, deleted behind the holder's back
				l, err := c.Lock(ctx, key, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range addrs {
					if _, err := realConn(t, a).Do("DEL", key); err != nil {
						t.Fatal(err)
					}
				}
				if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrLockLost) {
					t.Fatalf("Unlock of a deleted key = %v, want ErrLockLost", err)
				}
			case observe.KindExtendFailed, observe.KindLost:
				// Do's lock, deleted behind its back: its next extension
				// fails and Do has lost it.
				go func() {
					_ = c.Do(ctx, key, 600*time.Millisecond, func(ctx context.Context) error {
						<-ctx.Done()
						return nil
					})
				}()
				conns := []redis.Conn{realConn(t, addrs[0]), realConn(t, addrs[1]), realConn(t, addrs[2])}
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					held := 0
					for _, conn := range conns {
						if realGet(t, conn, key) != "" {
							held++
						}
					}
					if held >= 2 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("Do has not taken the key after 5s")
					}
				}
				for _, conn := range conns {
					if _, err := conn.Do("DEL", key); err != nil {
						t.Fatal(err)
					}
				}
			default:
				if l, err := c.Lock(ctx, key, 5*time.Second); err == nil {
					_ = l.Extend(ctx, 5*time.Second)
					_ = l.Unlock(ctx)
				}
			}
			select {
			case <-obs.done:
			case <-time.After(10 * time.Second):
				t.Fatal("Close, called from the Observer, has not returned after 10s")
			}
			waited := errors.Is(obs.err, redlock.ErrNodeTimeout) && obs.took <= 3*nodeTimeout+time.Second
			atOnce := obs.err == nil && obs.took <= 500*time.Millisecond
			switch {
			case tc.where == inside && !waited:
				t.Errorf("Close from a %v event: %v after %v, want ErrNodeTimeout after its bound of %v",
					tc.kind, obs.err, obs.took, 3*nodeTimeout)
			case tc.where == outside && !atOnce:
				t.Errorf("Close from a %v event: %v after %v, want nil at once", tc.kind, obs.err, obs.took)
			case !waited && !atOnce:
				t.Errorf("Close from a %v event: %v after %v, want nil at once or ErrNodeTimeout after %v",
					tc.kind, obs.err, obs.took, 3*nodeTimeout)
			}
		})
	}
}

// closingOnAFailedExtension returns three in-process nodes and a Client
// on them (node timeout 1 s) whose Observer closes it when an extension
// first fails.
func closingOnAFailedExtension(t *testing.T) (*cluster, *closeOnKind, *redlock.Client) {
	nodes := newCluster(t, 3)
	obs := &closeOnKind{kind: observe.KindExtendFailed, done: make(chan struct{})}
	c := nodes.client(t, redlock.WithObserver(obs), redlock.WithNodeTimeout(time.Second))
	obs.c.Store(c)
	return nodes, obs, c
}

// Close that comes after Do's fn returned, with the lock valid, while an
// extension is still in flight, is no loss: Do returns fn's nil, and fn's
// cause is context.Canceled. (keep saw Close before it saw fn's return,
// and Do reported the lock lost.) The Observer closes the Client when the
// extension, cut short by fn's return, fails.
func TestDoCloseAfterFnReturnedIsNoLoss(t *testing.T) {
	const ttl = 300 * time.Millisecond
	for i := range 10 {
		_, obs, c := closingOnAFailedExtension(t)
		undo := redlock.SlowNodes(c, 0b111, 30*time.Millisecond) // each extension is in flight 30 ms
		var fnCtx context.Context
		err := c.Do(context.Background(), "after-fn", ttl, func(ctx context.Context) error {
			fnCtx = ctx
			time.Sleep(ttl/3 + 15*time.Millisecond) // returns with the first extension in flight
			if ctx.Err() != nil {
				t.Errorf("round %d: fn's context ended while the lock was held: %v", i, context.Cause(ctx))
			}
			return nil
		})
		undo()
		<-obs.done
		if err != nil || context.Cause(fnCtx) != context.Canceled {
			t.Fatalf("round %d: Close after fn returned: Do = %v, fn's cause %v; want nil and context.Canceled",
				i, err, context.Cause(fnCtx))
		}
	}
}

// Resign that begins while the leadership lasts returns nil even if Close
// comes while it winds the keeper down: the loss that the keeper then sees
// came after the leadership ended. (Resign returned the keeper's "closed"
// as a loss.)
func TestResignThenCloseIsNoLoss(t *testing.T) {
	const ttl = 300 * time.Millisecond
	for i := range 10 {
		nodes, obs, c := closingOnAFailedExtension(t)
		ld := mustCampaign(t, c.Election("resign-close", redlock.WithElectionTTL(ttl)), "v")
		undo := redlock.SlowNodes(c, 0b111, 30*time.Millisecond)
		time.Sleep(ttl/3 + 15*time.Millisecond) // an extension is in flight
		if err := ld.Err(); err != nil {
			t.Fatalf("round %d: not leading before Resign: %v", i, err)
		}
		err := ld.Resign(context.Background())
		undo()
		<-obs.done
		if err != nil {
			t.Fatalf("round %d: Resign of a lasting leadership, Close during it: %v, want nil (Err: %v)", i, err, ld.Err())
		}
		if n := nodes.count("resign-close", redlock.LeadershipLock(ld).Value()); n != 0 {
			t.Fatalf("round %d: %d nodes hold the key after Resign", i, n)
		}
	}
}

// Close leaves the release of a Resign under way to that Resign, and waits
// for it within its bound: when Close returns, no node holds the key. (It
// returned at once, the key still on every node, and a program that exited
// then left it until its ttl.) Once with Close called from the keeper's
// event while Resign winds it down, and then as a shutdown races them: a
// Resign on one goroutine, Close on another.
func TestCloseWaitsForAResignUnderWay(t *testing.T) {
	t.Run("from the keeper", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		nodes, obs, c := closingOnAFailedExtension(t)
		ld := mustCampaign(t, c.Election("close-resign", redlock.WithElectionTTL(ttl)), "v")
		token := redlock.LeadershipLock(ld).Value()
		held := -1
		obs.after = func() { held = nodes.count("close-resign", token) }
		undo := redlock.SlowNodes(c, 0b111, 30*time.Millisecond)
		defer undo()
		time.Sleep(ttl/3 + 15*time.Millisecond) // an extension is in flight
		_ = ld.Resign(context.Background())
		<-obs.done
		if held != 0 || obs.err != nil {
			t.Fatalf("Close returned %v after %v with the key on %d of 3 nodes, want nil and none", obs.err, obs.took, held)
		}
	})
	t.Run("racing", func(t *testing.T) {
		nodes := newCluster(t, 3)
		left := 0
		const rounds = 200
		for i := range rounds {
			c := nodes.client(t, redlock.WithNodeTimeout(time.Second))
			ld := mustCampaign(t, c.Election("close-race", redlock.WithElectionTTL(10*time.Second)), "v")
			token := redlock.LeadershipLock(ld).Value()
			resigned := make(chan error, 1)
			go func() { resigned <- ld.Resign(context.Background()) }()
			for !errors.Is(ld.Err(), redlock.ErrNotLeader) { // Resign has begun
				runtime.Gosched()
			}
			if err := c.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", i, err)
			}
			if nodes.count("close-race", token) > 0 {
				left++
			}
			if err := <-resigned; err != nil {
				t.Fatalf("round %d: Resign: %v", i, err)
			}
		}
		if left > 0 {
			t.Errorf("in %d of %d rounds Close returned with the key of a Resign under way on some node", left, rounds)
		}
	})
}

// Close waits for a waiting RWMutex.Lock or RLock to remove its wait mark
// (the writer's intent mark, the reader's registration among the waiting
// readers), as it documents: the program may exit, closing its pools, the
// moment Close returns. (A waiter asleep in its pause ran no node call, so
// Close found nothing to wait for and returned first; the mark stayed for
// the retry pause, a minute here, holding new readers back.)
func TestRealCloseWaitsForAWaiterToRemoveItsMark(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	owner := realClient(t, addrs)
	_, _, intent := redlock.RWNames("close:waiter")
	waiting, _ := redlock.RWQueueNames("close:waiter")
	conns := make([]redis.Conn, len(addrs))
	for i, a := range addrs {
		conns[i] = realConn(t, a)
	}
	// on counts the nodes on which the waiter's mark is.
	on := func(write bool) int {
		n := 0
		for _, conn := range conns {
			var k int
			var err error
			if write {
				k, err = redis.Int(conn.Do("EXISTS", intent))
			} else {
				k, err = redis.Int(conn.Do("ZCARD", waiting))
			}
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				n++
			}
		}
		return n
	}
	for _, write := range []bool{true, false} {
		name := "RLock"
		if write {
			name = "Lock"
		}
		t.Run(name, func(t *testing.T) {
			// The holder that makes the waiter wait: a reader for a
			// writer, a writer for a reader.
			var holder *redlock.Lock
			var err error
			redlock.Settle(owner) // the last subtest's releases, on every node
			if write {
				holder, err = owner.RWMutex("close:waiter").TryRLock(ctx, time.Minute)
			} else {
				holder, err = owner.RWMutex("close:waiter").TryLock(ctx, time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
			// The holder on every node, its last grant too: a waiter that
			// came first on a node would be granted there, and leave no mark.
			redlock.Settle(owner)
			defer func() { _ = holder.Unlock(ctx) }()
			pools := make([]*redigo.Pool, len(addrs))
			asPools := make([]redlock.Pool, len(addrs))
			for i, a := range addrs {
				pools[i] = redigo.NewPool(a)
				asPools[i] = pools[i]
			}
			c, err := redlock.New(asPools, redlock.WithNodeTimeout(time.Second),
				redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithWakeUp(false))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				var err error
				if write {
					_, err = c.RWMutex("close:waiter").Lock(ctx, time.Minute)
				} else {
					_, err = c.RWMutex("close:waiter").RLock(ctx, time.Minute)
				}
				done <- err
			}()
			if !realEventually(5*time.Second, func() bool { return on(write) == len(addrs) }) {
				for i, conn := range conns {
					keys, err := redis.Strings(conn.Do("KEYS", "*"))
					t.Logf("node %d: keys %v (%v)", i, keys, err)
				}
				t.Fatalf("the waiter's mark is on %d of %d nodes after 5s", on(write), len(addrs))
			}
			start := time.Now()
			err = c.Close()
			took := time.Since(start)
			if err != nil {
				t.Errorf("Close: %v", err)
			}
			for _, p := range pools { // the program exits
				_ = p.Close()
			}
			if n := on(write); n != 0 {
				t.Errorf("Close returned after %v with the waiter's mark on %d of %d nodes", took, n, len(addrs))
			}
			if took > 3*time.Second+time.Second {
				t.Errorf("Close took %v, beyond its bound of three node timeouts", took)
			}
			if err := <-done; !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("the waiter's call returned %v, want ErrClosed", err)
			}
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With one node, a won acquisition's KindSettled is reported on the
// caller's goroutine, and Close called from it returns at once for every
// primitive, as observe.Observer says. (An RWMutex waiter's loop, counted
// among Close's calls, held its count through it, and Close waited out
// its bound for its own call. And the node's part, once its ballot had
// decided the round, settled only after casting it, so that on a loaded
// machine the caller could settle first, leaving the report to the node
// call: 17 of 180 runs failed with three at once.)
func TestCloseFromSettledOnTheCallersGoroutine(t *testing.T) {
	const nodeTimeout = 300 * time.Millisecond
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		lock func(c *redlock.Client) error
	}{
		{"Lock", func(c *redlock.Client) error { _, err := c.Lock(ctx, "settled", 5*time.Second); return err }},
		{"RWMutex.Lock", func(c *redlock.Client) error { _, err := c.RWMutex("settled").Lock(ctx, 5*time.Second); return err }},
		{"RWMutex.RLock", func(c *redlock.Client) error { _, err := c.RWMutex("settled").RLock(ctx, 5*time.Second); return err }},
		{"Semaphore.Acquire", func(c *redlock.Client) error {
			s, err := c.Semaphore("settled", 2)
			if err == nil {
				_, err = s.Acquire(ctx, 5*time.Second)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := newCluster(t, 1)
			obs := &closeOnKind{kind: observe.KindSettled, done: make(chan struct{})}
			c := nodes.client(t, redlock.WithObserver(obs), redlock.WithNodeTimeout(nodeTimeout))
			obs.c.Store(c)
			_ = tc.lock(c)
			select {
			case <-obs.done:
			case <-time.After(5 * time.Second):
				t.Fatal("no KindSettled, or Close has not returned, after 5s")
			}
			if obs.err != nil || obs.took > nodeTimeout/2 {
				t.Errorf("Close from KindSettled: %v after %v, want nil at once", obs.err, obs.took)
			}
		})
	}
}

// An acquisition whose majority comes after Close began is released before
// Close returns: a program exiting right after Close leaves no key behind.
// Here every node's part of the attempt is held until Close has begun, and
// the nodes are read once the attempt has returned, before the acquisition
// looks at its outcome: the round itself has undone what it won. (Before
// the fix fanout returned such a round as won, and the key stayed until
// the acquisition let it go; Close, finding no call running, could return
// first.)
func TestRealCloseReleasesAnAttemptWonDuringIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []redlock.Option
		acquire func(ctx context.Context, c *redlock.Client) error
		nodes   int  // 3 if zero
		round2  bool // hold fencing's second round instead of the first
	}{
		{"mutex", nil, closeAcquisitions["mutex"], 0, false},
		{"mutex on one node", nil, closeAcquisitions["mutex"], 1, false}, // its round runs on the caller's goroutine (inline.go)
		{"fenced mutex", []redlock.Option{redlock.WithFencing()}, closeAcquisitions["mutex"], 0, false},
		{"fenced mutex, its second round", []redlock.Option{redlock.WithFencing()}, closeAcquisitions["mutex"], 0, true},
		{"campaign, its second round", nil, closeAcquisitions["campaign"], 0, true},
		{"prefixed semaphore", []redlock.Option{redlock.WithKeyPrefix("app:")}, closeAcquisitions["semaphore"], 0, false},
		{"reader", nil, closeAcquisitions["reader"], 0, false},
		{"writer", nil, closeAcquisitions["writer"], 0, false},
		{"campaign", nil, closeAcquisitions["campaign"], 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := cmp.Or(tc.nodes, 3)
			addrs := realNodes(t, n)
			ctx := context.Background()
			var retries atomic.Int32 // an attempt that Close ended is not retried, nor reported as one
			countRetries := observerFunc(func(e observe.Event) {
				if e.Kind == observe.KindRetry {
					retries.Add(1)
				}
			})
			opts := append([]redlock.Option{redlock.WithWakeUp(false), redlock.WithNodeTimeout(2 * time.Second),
				redlock.WithObserver(countRetries)}, tc.opts...)
			c := realClient(t, addrs, opts...)
			entered, release := make(chan int, 64), make(chan struct{})
			closed := make(chan struct{})
			defer func() { // on a failure too, so that nothing stays held
				for _, ch := range []chan struct{}{release, closed} {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
			}()
			skip := 0
			if tc.round2 {
				skip = n // the first round's node goroutines go on
			}
			defer redlock.HoldNodeStarts(c, 1<<n-1, skip, entered, release)()
			undone := make(chan []string, 1) // what the nodes held as the attempt returned
			conns := nodeConns(t, addrs)
			defer redlock.AfterAttempts(c, func() {
				select {
				case undone <- nodeKeys(t, conns):
				default:
				}
			})()

			acquired := make(chan error, 1)
			go func() { acquired <- tc.acquire(ctx, c) }()
			for range n {
				select {
				case <-entered:
				case err := <-acquired:
					t.Fatalf("the acquisition returned %v before its round went out", err)
				case <-time.After(10 * time.Second):
					t.Fatal("the attempt's round did not start")
				}
			}
			closeErr := make(chan error, 1)
			go func() { closeErr <- c.Close() }()
			if !awaitClosing(t, c) {
				t.FailNow()
			}
			close(release) // the round goes out, after Close began, and wins
			awaitClose(t, closeErr)
			select {
			case keys := <-undone:
				if len(keys) > 0 {
					t.Errorf("the nodes held %v as the attempt returned: its round did not undo what it won", keys)
				}
			default:
				t.Error("no attempt returned before Close did")
			}
			if keys := nodeKeys(t, conns); len(keys) > 0 {
				t.Errorf("the nodes hold %v once Close has returned", keys)
			}
			close(closed)
			select {
			case err := <-acquired:
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("the acquisition returned %v, want ErrClosed", err)
				}
				t.Log(err)
			case <-time.After(10 * time.Second):
				t.Fatal("the acquisition did not return")
			}
			if n := retries.Load(); n > 0 {
				t.Errorf("%d retries reported after Close", n)
			}
		})
	}
}

// gateClock blocks the first Now after armed is set, signalling entered,
// until gate is closed.
type gateClock struct {
	armed   *atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g gateClock) Now() time.Time {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return time.Now()
}

// On one node a round runs on the caller's goroutine, and its node call's
// count ends before the verdict; fencing's second round, won after Close
// began, must still be undone before Close returns. Here the verdict is
// held at the round's check of its validity (the clock's next Now) with
// Close begun: Close must not return meanwhile. (fanout counted only the
// first round among Close's calls: Close returned at once, and the key
// stayed until the undo, after it.)
func TestRealCloseWaitsForAFencingRoundOnOneNode(t *testing.T) {
	addrs := realNodes(t, 1)
	var armed atomic.Bool
	clock := gateClock{&armed, make(chan struct{}), make(chan struct{})}
	c := realClient(t, addrs, redlock.WithWakeUp(false), redlock.WithNodeTimeout(2*time.Second),
		redlock.WithFencing(), redlock.WithClock(clock))
	entered, release := make(chan int, 4), make(chan struct{})
	defer func() {
		for _, ch := range []chan struct{}{release, clock.gate} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}()
	defer redlock.HoldNodeStarts(c, 1, 1, entered, release)() // the second round only
	acquired := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "close:fenced", time.Minute)
		acquired <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the fencing round did not start")
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- c.Close() }()
	if !awaitClosing(t, c) {
		t.FailNow()
	}
	armed.Store(true)
	close(release) // the round goes out, and its verdict waits at the clock
	select {
	case <-clock.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the round did not reach its verdict")
	}
	select {
	case err := <-closeErr:
		t.Fatalf("Close returned (%v) before the fencing round's verdict", err)
	case <-time.After(200 * time.Millisecond): // Close polls its count every millisecond
	}
	close(clock.gate)
	awaitClose(t, closeErr)
	keys, err := redis.Strings(realConn(t, addrs[0]).Do("KEYS", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if keys = slices.DeleteFunc(keys, func(k string) bool { return k == redlock.FenceKey("close:fenced") }); len(keys) > 0 {
		t.Errorf("the node holds %v once Close has returned", keys)
	}
	if err := <-acquired; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("the acquisition returned %v, want ErrClosed", err)
	}
}

// An acquisition won just before Close began is let go before Close
// returns, however close the two come: Close begins as the attempt returns
// won, before the acquisition looks at the outcome (where), or, for Do and
// Campaign, which register the lock with Close once they have it, as the
// acquisition hands the lock to them (handOff). Close must not return while
// the lock is still held, and must find it released when it does. (Before
// the fix the acquisition's count among Close's calls ended with its
// round: Close returned at once, and the key stayed until the acquisition
// let it go, after Close.)
func TestRealCloseWaitsForAnAttemptWonJustBeforeIt(t *testing.T) {
	type hookAt int
	const (
		afterAttempt hookAt = iota
		atHandOff
	)
	for _, tc := range []struct {
		name    string
		opts    []redlock.Option
		acquire string // in closeAcquisitions
		nodes   int    // 3 if zero
		where   hookAt
	}{
		{"mutex", nil, "mutex", 0, afterAttempt},
		{"mutex on one node", nil, "mutex", 1, afterAttempt},
		{"fenced mutex", []redlock.Option{redlock.WithFencing()}, "mutex", 0, afterAttempt},
		{"prefixed semaphore", []redlock.Option{redlock.WithKeyPrefix("app:")}, "semaphore", 0, afterAttempt},
		{"reader", nil, "reader", 0, afterAttempt},
		{"fenced writer", []redlock.Option{redlock.WithFencing()}, "writer", 0, afterAttempt},
		{"campaign", nil, "campaign", 0, afterAttempt},
		{"do", nil, "do", 5, afterAttempt},
		{"do, at the hand-off", nil, "do", 5, atHandOff},
		{"do on one node, at the hand-off", nil, "do", 1, atHandOff},
		{"campaign, at the hand-off", nil, "campaign", 0, atHandOff},
		{"writer", nil, "writer", 0, afterAttempt},
		{"rw do, at the hand-off", nil, "rw do", 0, atHandOff},
		{"rdo, at the hand-off", nil, "rdo", 0, atHandOff},
		{"semaphore do, at the hand-off", []redlock.Option{redlock.WithKeyPrefix("app:")}, "semaphore do", 0, atHandOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := realNodes(t, cmp.Or(tc.nodes, 3))
			c := realClient(t, addrs, append([]redlock.Option{redlock.WithWakeUp(false), redlock.WithNodeTimeout(2 * time.Second)}, tc.opts...)...)
			conns := nodeConns(t, addrs)
			closeErr := make(chan error, 1)
			var (
				early  atomic.Value // Close's error, had it returned during the hook
				hooked atomic.Int32
			)
			hook := func() {
				if hooked.Add(1) > 1 {
					return
				}
				if keys := nodeKeys(t, conns); len(keys) == 0 {
					t.Error("the attempt holds nothing: it did not win")
				}
				go func() { closeErr <- c.Close() }()
				if !awaitClosing(t, c) {
					return
				}
				select {
				case err := <-closeErr:
					early.Store(fmt.Sprint(err))
					closeErr <- err
				case <-time.After(200 * time.Millisecond): // Close polls its count every millisecond
				}
			}
			if tc.where == afterAttempt {
				defer redlock.AfterAttempts(c, hook)()
			} else {
				defer redlock.AtHandOff(c, hook)()
			}
			err := closeAcquisitions[tc.acquire](context.Background(), c)
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("the acquisition returned %v, want ErrClosed", err)
			}
			if hooked.Load() == 0 {
				t.Fatal("the hook did not run")
			}
			awaitClose(t, closeErr)
			if e := early.Load(); e != nil {
				t.Errorf("Close returned (%v) while the acquisition still held what it won", e)
			}
			if keys := nodeKeys(t, conns); len(keys) > 0 {
				t.Errorf("the nodes hold %v once Close has returned", keys)
			}
		})
	}
}

// The context a Do or Campaign gives its acquisition carries the hand-off
// of the acquisition's count among Close's calls (engine.go, handOff), and
// an Observer is given that context. A Lock called with it later, after Do
// returned, or while Do's own acquisition fails, must not hand its count
// over to a hand-off that no one ends: Close would then wait out its bound
// and return ErrNodeTimeout.
func TestRealHandOffContextUsedAgain(t *testing.T) {
	addrs := realNodes(t, 3)
	var kept atomic.Value // the first KindAttempt's ctx
	obs := observerFunc2(func(ctx context.Context, e observe.Event) {
		if e.Kind == observe.KindAttempt {
			kept.CompareAndSwap(nil, ctxBox{ctx})
		}
	})
	c := realClient(t, addrs, redlock.WithWakeUp(false), redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithObserver(obs))
	if err := c.Do(context.Background(), "handoff", time.Minute, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	box, _ := kept.Load().(ctxBox)
	if box.ctx == nil {
		t.Fatal("no KindAttempt")
	}
	for _, key := range []string{"handoff", "handoff:other"} {
		l, err := c.Lock(box.ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Errorf("Close after Locks with a Do's acquisition context: %v after %v", err, time.Since(start))
	}
}

// ctxBox holds a context in an atomic.Value, whose stored types must agree.
type ctxBox struct{ ctx context.Context }

// observerFunc2 is an observe.Observer given ctx as well as the event.
type observerFunc2 func(ctx context.Context, e observe.Event)

func (f observerFunc2) Observe(ctx context.Context, e observe.Event) { f(ctx, e) }

// Close called from the KindReleased event of the release that Do sends
// when Close began at its hand-off (holdLease, registration refused)
// returns at once, as observe.Observer promises for that kind: the
// hand-off's count ends with the release's round, before its event. (It
// ended after the event: Close waited out its bound for its own call.)
func TestRealCloseFromReleasedAtTheHandOff(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			const nodeTimeout = 300 * time.Millisecond
			addrs := realNodes(t, n)
			var c *redlock.Client
			type result struct {
				err  error
				took time.Duration
			}
			second := make(chan result, 1)
			obs := observerFunc(func(e observe.Event) {
				if e.Kind == observe.KindReleased || e.Kind == observe.KindReleaseFailed {
					start := time.Now()
					err := c.Close()
					second <- result{err, time.Since(start)}
				}
			})
			c = realClient(t, addrs, redlock.WithWakeUp(false), redlock.WithNodeTimeout(nodeTimeout), redlock.WithObserver(obs))
			first := make(chan error, 1)
			defer redlock.AtHandOff(c, func() {
				go func() { first <- c.Close() }()
				if !awaitClosing(t, c) {
					return
				}
			})()
			err := c.Do(context.Background(), "close:released", time.Minute, func(context.Context) error { return errors.New("fn ran") })
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("Do = %v, want ErrClosed", err)
			}
			select {
			case r := <-second:
				if r.err != nil || r.took > nodeTimeout/2 {
					t.Errorf("Close from KindReleased: %v after %v, want nil at once", r.err, r.took)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no KindReleased")
			}
			if err := <-first; err != nil {
				t.Errorf("the first Close: %v", err)
			}
		})
	}
}

// Close returns at once while an acquisition waits in a token function or
// a RetryStrategy of the program's own, which may be slow (and may call
// Close): the loop's count is let go around them, and the attempt that
// follows sends nothing. (Close waited for them, its whole bound, and
// returned ErrNodeTimeout.) An RWMutex's waiter keeps its count, so that
// it removes its wait mark before Close returns; it is not tried here.
func TestRealCloseDuringTheProgramsTokenFuncAndRetryStrategy(t *testing.T) {
	const nodeTimeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		opt     func(block func()) redlock.Option
		acquire string
	}{
		{"token func, mutex", func(block func()) redlock.Option {
			return redlock.WithTokenFunc(func() (string, error) { block(); return fmt.Sprint(time.Now().UnixNano()), nil })
		}, "mutex"},
		{"token func, semaphore", func(block func()) redlock.Option {
			return redlock.WithTokenFunc(func() (string, error) { block(); return fmt.Sprint(time.Now().UnixNano()), nil })
		}, "semaphore"},
		{"token func, campaign", func(block func()) redlock.Option {
			return redlock.WithTokenFunc(func() (string, error) { block(); return fmt.Sprint(time.Now().UnixNano()), nil })
		}, "campaign"},
		{"retry strategy, mutex", func(block func()) redlock.Option {
			return redlock.WithRetryStrategy(func(int) time.Duration { block(); return time.Millisecond })
		}, "mutex"},
		{"retry strategy, do", func(block func()) redlock.Option {
			return redlock.WithRetryStrategy(func(int) time.Duration { block(); return time.Millisecond })
		}, "do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := realNodes(t, 3)
			entered, unblock := make(chan struct{}, 1), make(chan struct{})
			defer close(unblock)
			var once atomic.Bool
			block := func() {
				if once.CompareAndSwap(false, true) {
					entered <- struct{}{}
					select {
					case <-unblock:
					case <-time.After(10 * time.Second):
					}
				}
			}
			c := realClient(t, addrs, redlock.WithWakeUp(false), redlock.WithNodeTimeout(nodeTimeout), tc.opt(block))
			acquired := make(chan error, 1)
			go func() { acquired <- closeAcquisitions[tc.acquire](context.Background(), c) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the program's function was not called")
			}
			start := time.Now()
			if err := c.Close(); err != nil || time.Since(start) > nodeTimeout/2 {
				t.Errorf("Close during the program's function: %v after %v, want nil at once", err, time.Since(start))
			}
			unblock <- struct{}{}
			select {
			case err := <-acquired:
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("the acquisition returned %v, want ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the acquisition did not return")
			}
			if keys := nodeKeys(t, nodeConns(t, addrs)); len(keys) > 0 {
				t.Errorf("the nodes hold %v", keys)
			}
		})
	}
}

// Every call ends the count it holds among Close's calls, exactly once,
// on every path: won, refused, tries exhausted, ctx ended before and
// during the wait, a token error, fn's error and panic in Do, with the
// program's token function and RetryStrategy (whose count is let go
// around them). A count left over makes every later Close wait out its
// bound and fail; one ended twice lets Close return while calls run.
func TestRealCallsCountedExactlyOnce(t *testing.T) {
	addrs := realNodes(t, 3)
	var tokens atomic.Int64
	for _, tc := range []struct {
		name string
		opts []redlock.Option
	}{
		{"defaults", nil},
		{"program's token func and retry strategy", []redlock.Option{
			redlock.WithTokenFunc(func() (string, error) { return fmt.Sprintf("token-%d", tokens.Add(1)), nil }),
			redlock.WithRetryStrategy(redlock.ConstantRetry(time.Millisecond)),
		}},
		{"fenced, prefixed", []redlock.Option{redlock.WithFencing(), redlock.WithKeyPrefix("app:")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithTries(3),
				redlock.WithRetryDelay(time.Millisecond, 2*time.Millisecond)}, tc.opts...)
			c := realClient(t, addrs, opts...)
			other := realClient(t, addrs, opts...)
			ctx := context.Background()
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancelShort()
			held, err := other.Lock(ctx, "count:held", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(ctx)
			rw, sem := c.RWMutex("count:rw"), must(c.Semaphore("count:sem", 1))
			steps := []struct {
				name string
				run  func() error
			}{
				{"lock and unlock", func() error { return thenUnlock(ctx)(c.Lock(ctx, "count:a", time.Minute)) }},
				{"tries exhausted", func() error {
					_, err := c.Lock(ctx, "count:held", time.Minute)
					return want(err, redlock.ErrNotObtained)
				}},
				{"ctx ended before", func() error { _, err := c.Lock(cancelled, "count:b", time.Minute); return want(err, context.Canceled) }},
				{"ctx ends while waiting", func() error {
					_, err := c.Lock(short, "count:held", time.Minute)
					if err == nil {
						return errors.New("won a held key")
					}
					return nil
				}},
				{"do", func() error { return c.Do(ctx, "count:c", time.Minute, func(context.Context) error { return nil }) }},
				{"do, fn's error", func() error {
					return want(c.Do(ctx, "count:c", time.Minute, func(context.Context) error { return io.EOF }), io.EOF)
				}},
				{"do, fn panics", func() (err error) {
					defer func() {
						if recover() == nil {
							err = errors.New("no panic")
						}
					}()
					return c.Do(ctx, "count:c", time.Minute, func(context.Context) error { panic("fn") })
				}},
				{"do, refused", func() error {
					return want(c.Do(ctx, "count:held", time.Minute, func(context.Context) error { return nil }), redlock.ErrNotObtained)
				}},
				{"rw lock, rlock, rdo", func() error {
					if err := thenUnlock(ctx)(rw.Lock(ctx, time.Minute)); err != nil {
						return err
					}
					if err := thenUnlock(ctx)(rw.RLock(ctx, time.Minute)); err != nil {
						return err
					}
					return rw.RDo(ctx, time.Minute, func(context.Context) error { return nil })
				}},
				{"semaphore, semaphore do", func() error {
					if err := thenUnlock(ctx)(sem.Acquire(ctx, time.Minute)); err != nil {
						return err
					}
					return sem.Do(ctx, time.Minute, func(context.Context) error { return nil })
				}},
				{"campaign and resign", func() error {
					ld, err := c.Election("count:e").Campaign(ctx, "v")
					if err != nil {
						return err
					}
					return ld.Resign(ctx)
				}},
			}
			for _, st := range steps {
				if err := st.run(); err != nil {
					t.Errorf("%s: %v", st.name, err)
				}
				if !realEventually(5*time.Second, func() bool { return redlock.Calls(c) == 0 }) {
					t.Fatalf("%s: %d calls still counted 5s after it returned", st.name, redlock.Calls(c))
				}
			}
			start := time.Now()
			if err := c.Close(); err != nil || time.Since(start) > time.Second/2 {
				t.Errorf("Close: %v after %v, want nil at once", err, time.Since(start))
			}
			if n := redlock.Calls(c); n != 0 {
				t.Errorf("%d calls counted after Close returned", n)
			}
		})
	}
}

// thenUnlock returns a function that unlocks the lock an acquisition
// returned, and returns the acquisition's error, or Unlock's.
func thenUnlock(ctx context.Context) func(*redlock.Lock, error) error {
	return func(l *redlock.Lock, err error) error {
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

// want returns nil if err wraps target, and an error saying so otherwise.
func want(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return fmt.Errorf("got %v, want %v", err, target)
}

// must returns v, or panics on err (test setup only).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// awaitClosing waits until Close has begun on c, at most 10 s, and reports
// whether it has; if not, it says so with t.Error, and so may run on any
// goroutine.
func awaitClosing(t *testing.T, c *redlock.Client) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !redlock.Closing(c); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("Close did not begin")
			return false
		}
	}
	return true
}

// awaitClose waits, at most 20 s, for the error of a Close running on
// another goroutine, which must be nil.
func awaitClose(t *testing.T, closeErr <-chan error) {
	t.Helper()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
}

// closeAcquisitions are the acquisitions of each primitive on the key
// "close:won", for the tests of Close.
var closeAcquisitions = map[string]func(ctx context.Context, c *redlock.Client) error{
	"mutex": func(ctx context.Context, c *redlock.Client) error {
		_, err := c.Lock(ctx, "close:won", time.Minute)
		return err
	},
	"semaphore": func(ctx context.Context, c *redlock.Client) error {
		s, err := c.Semaphore("close:won", 1)
		if err != nil {
			return err
		}
		_, err = s.Acquire(ctx, time.Minute)
		return err
	},
	"reader": func(ctx context.Context, c *redlock.Client) error {
		_, err := c.RWMutex("close:won").RLock(ctx, time.Minute)
		return err
	},
	"writer": func(ctx context.Context, c *redlock.Client) error {
		_, err := c.RWMutex("close:won").Lock(ctx, time.Minute)
		return err
	},
	"campaign": func(ctx context.Context, c *redlock.Client) error {
		_, err := c.Election("close:won").Campaign(ctx, "v")
		return err
	},
	"do": func(ctx context.Context, c *redlock.Client) error {
		return c.Do(ctx, "close:won", time.Minute, func(context.Context) error { return errors.New("fn ran") })
	},
	"rw do": func(ctx context.Context, c *redlock.Client) error {
		return c.RWMutex("close:won").Do(ctx, time.Minute, func(context.Context) error { return errors.New("fn ran") })
	},
	"rdo": func(ctx context.Context, c *redlock.Client) error {
		return c.RWMutex("close:won").RDo(ctx, time.Minute, func(context.Context) error { return errors.New("fn ran") })
	},
	"semaphore do": func(ctx context.Context, c *redlock.Client) error {
		s, err := c.Semaphore("close:won", 1)
		if err != nil {
			return err
		}
		return s.Do(ctx, time.Minute, func(context.Context) error { return errors.New("fn ran") })
	},
}

// nodeKeys returns the keys that the nodes behind conns hold, but for
// fencing counters (which stay by design), each prefixed with its node's
// index. It may run on any goroutine, one at a time.
func nodeKeys(t *testing.T, conns []redis.Conn) []string {
	t.Helper()
	var all []string
	for i, conn := range conns {
		keys, err := redis.Strings(conn.Do("KEYS", "*"))
		if err != nil {
			t.Errorf("node %d: %v", i, err)
			all = append(all, fmt.Sprintf("%d: unread", i))
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, strings.TrimSuffix(redlock.FenceKey("k"), "{k}")) {
				all = append(all, fmt.Sprintf("%d:%s", i, k))
			}
		}
	}
	return all
}

// nodeConns dials each node at addrs, for nodeKeys.
func nodeConns(t *testing.T, addrs []string) []redis.Conn {
	conns := make([]redis.Conn, len(addrs))
	for i, a := range addrs {
		conns[i] = realConn(t, a)
	}
	return conns
}

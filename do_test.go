package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redigo"
)

// doNodes starts n in-process Redis nodes whose keys expire in real time.
// They are closed when t ends.
type doNodes struct {
	t     testing.TB
	nodes []*miniredis.Miniredis
	pools []*redigo.Pool
}

func doStart(t testing.TB, n int) *doNodes {
	t.Helper()
	d := &doNodes{t: t}
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			t.Fatalf("starting miniredis: %v", err)
		}
		d.nodes = append(d.nodes, m)
		d.pools = append(d.pools, redigo.NewPool(m.Addr()))
	}
	t.Cleanup(func() {
		for i := range d.nodes {
			d.pools[i].Close()
			d.nodes[i].Close()
		}
	})
	return d
}

func (d *doNodes) client(opts ...redlock.Option) *redlock.Client {
	d.t.Helper()
	pools := make([]redlock.Pool, len(d.pools))
	for i, p := range d.pools {
		pools[i] = p
	}
	// A node timeout that a loaded machine running -race can meet; tests of
	// timeouts pass their own, which comes later and wins.
	opts = append([]redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}, opts...)
	c, err := redlock.New(pools, opts...)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = c.Close() })
	return c
}

// holders counts the nodes where key holds value.
func (d *doNodes) holders(key, value string) int {
	n := 0
	for _, m := range d.nodes {
		if v, err := m.Get(key); err == nil && v == value {
			n++
		}
	}
	return n
}

// doNoLeaks fails t if goroutines started during the test are still running
// when it ends. Call it first, so that it runs after every other cleanup.
func doNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// doWaitUntil polls cond every 5ms for at most limit.
func doWaitUntil(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestDoHoldsPastSeveralTTLs(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	rival := nodes.client(redlock.WithTries(1))
	const ttl = time.Second
	ctx := context.Background()

	var checks int
	var held *redlock.Lock
	err := c.Do(ctx, "job", ttl, func(ctx context.Context) error {
		held = redlock.HeldLock(ctx)
		if held == nil {
			return errors.New("HeldLock(fn's ctx) = nil")
		}
		// Three ttls: the lock must outlive its first ttl several times over.
		for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("fn's ctx ended while the lock was extended: %w", context.Cause(ctx))
			}
			if !time.Now().Before(held.Until()) {
				return fmt.Errorf("validity ran out: until %v", held.Until())
			}
			if l, err := rival.TryLock(ctx, "job", ttl); !errors.Is(err, redlock.ErrNotObtained) {
				if l != nil {
					_ = l.Unlock(ctx)
				}
				return fmt.Errorf("rival TryLock while held = %v, want ErrNotObtained", err)
			}
			checks++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checks < 10 {
		t.Fatalf("only %d checks ran in 3 ttls", checks)
	}
	if n := nodes.holders("job", held.Value()); n > 1 {
		t.Fatalf("key still held on %d nodes after Do returned, want at most one in flight", n)
	}
	select {
	case <-held.Done():
	default:
		t.Fatal("Done not closed after Do released the lock")
	}
	l, err := rival.TryLock(ctx, "job", ttl)
	if err != nil {
		t.Fatalf("rival TryLock after Do = %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestDoQuorumLostCancelsWithinValidity(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 5)
	c := nodes.client()
	const ttl = 600 * time.Millisecond
	var killed, cancelled time.Time
	var held *redlock.Lock
	var cause error
	err := c.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
		held = redlock.HeldLock(ctx)
		time.Sleep(ttl / 2) // past the first extension
		killed = time.Now()
		for _, m := range nodes.nodes[:3] {
			m.Close()
		}
		select {
		case <-ctx.Done():
			cancelled = time.Now()
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(5 * ttl):
			return errors.New("fn's ctx not cancelled within 5 ttls of losing quorum")
		}
	})
	if !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want ErrLockLost joined with fn's context.Canceled", err)
	}
	// The lock was valid until its last successful extension began plus ttl,
	// and every extension began before the kill.
	if bound := killed.Add(ttl); cancelled.After(bound.Add(250 * time.Millisecond)) {
		t.Errorf("cancelled %v after the kill; the validity bound is ttl %v", cancelled.Sub(killed), ttl)
	}
	if until := held.Until(); cancelled.Before(until) {
		t.Errorf("cancelled %v before validity ended, though no node refused", until.Sub(cancelled))
	}
	if !errors.Is(cause, redlock.ErrLockLost) || !strings.Contains(cause.Error(), "validity ran out") {
		t.Errorf("cause = %v, want ErrLockLost saying validity ran out", cause)
	}
	var ne *redlock.NodeError
	if !errors.As(cause, &ne) {
		t.Errorf("cause = %v, want the failed extension's node errors", cause)
	}
}

func TestDoRefusalCancelsAtOnce(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	const ttl = 3 * time.Second
	var lostAt time.Time
	var held *redlock.Lock
	var cause error
	err := c.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
		held = redlock.HeldLock(ctx)
		// Lock returns on a majority; let the last SET land before the flush.
		if !doWaitUntil(time.Second, func() bool { return nodes.holders("job", held.Value()) == 3 }) {
			return errors.New("key never reached all three nodes")
		}
		// Two nodes lose the key, as after a restart without persistence.
		lostAt = time.Now()
		nodes.nodes[0].FlushAll()
		nodes.nodes[1].FlushAll()
		<-ctx.Done()
		cause = context.Cause(ctx)
		return cause // as fn commonly does: the cause it was told
	})
	elapsed := time.Since(lostAt)
	if !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("Do = %v, want ErrLockLost wrapping the refused extension", err)
	}
	if n := strings.Count(err.Error(), "lock lost"); n != 1 {
		t.Errorf("Do = %q: says \"lock lost\" %d times; fn returned the cause, which needs no repeating", err, n)
	}
	if !strings.Contains(cause.Error(), "refused") {
		t.Errorf("cause = %v, want it to say the extension was refused", cause)
	}
	// The next extension, due within ttl/3, proves the loss; waiting for
	// validity to run out would take close to ttl.
	if elapsed > ttl/3+500*time.Millisecond {
		t.Errorf("cancelled %v after the key vanished, want about ttl/3 = %v", elapsed, ttl/3)
	}
	if held.Until().IsZero() {
		return // released by Do, as it should be
	}
	t.Errorf("lock not released after Do: until %v", held.Until())
}

func TestDoFnIgnoringContextGetsLossError(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	const ttl = 300 * time.Millisecond
	err := c.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
		for _, m := range nodes.nodes[:2] {
			m.Close()
		}
		// Carry on regardless, well past validity.
		time.Sleep(2 * ttl)
		return nil
	})
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
}

func TestDoFnReturnsJustAfterValidity(t *testing.T) {
	// Extensions all fail, fn returns without looking at its ctx: Do must
	// still report the loss, whichever of its paths notices first.
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	const ttl = 200 * time.Millisecond
	err := c.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
		l := redlock.HeldLock(ctx)
		for _, m := range nodes.nodes {
			m.Close()
		}
		for time.Now().Before(l.Until()) {
			time.Sleep(time.Millisecond)
		}
		return errors.New("fn failed")
	})
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "fn failed") {
		t.Fatalf("Do = %v, want fn's error joined with ErrLockLost", err)
	}
}

func TestDoKeepsLockAfterParentCancel(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	rival := nodes.client(redlock.WithTries(1))
	const ttl = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := c.Do(ctx, "job", ttl, func(fnCtx context.Context) error {
		cancel()
		select {
		case <-fnCtx.Done():
		case <-time.After(time.Second):
			return errors.New("fn's ctx not cancelled with its parent")
		}
		// Winding down takes longer than a ttl; the lock must still cover it.
		time.Sleep(2 * ttl)
		if _, err := rival.TryLock(context.Background(), "job", ttl); !errors.Is(err, redlock.ErrNotObtained) {
			return fmt.Errorf("rival TryLock while fn winds down = %v, want ErrNotObtained", err)
		}
		return fnCtx.Err()
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do = %v, want fn's context.Canceled and no loss", err)
	}
}

func TestDoNotAcquired(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client(redlock.WithTries(1))
	ctx := context.Background()
	l, err := c.Lock(ctx, "job", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	ran := false
	err = c.Do(ctx, "job", time.Second, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, redlock.ErrNotObtained) || ran {
		t.Fatalf("Do on a held key = %v (fn ran: %v), want ErrNotObtained without running fn", err, ran)
	}
	if err := c.Do(ctx, "job", time.Second, nil); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("Do(nil fn) = %v, want ErrInvalid", err)
	}
	if redlock.HeldLock(ctx) != nil {
		t.Fatal("HeldLock of a plain context is not nil")
	}
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	var held *redlock.Lock
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic to pass through", r)
			}
		}()
		_ = c.Do(context.Background(), "job", time.Minute, func(ctx context.Context) error {
			held = redlock.HeldLock(ctx)
			// Lock returns on a majority; a SET still in flight could land
			// after the release and stay until its ttl.
			doWaitUntil(time.Second, func() bool { return nodes.holders("job", held.Value()) == 3 })
			panic("boom")
		})
	}()
	// Unlock returns after a majority; the last node follows in the background.
	if !doWaitUntil(500*time.Millisecond, func() bool { return nodes.holders("job", held.Value()) == 0 }) {
		t.Fatalf("key still held on %d nodes after fn panicked", nodes.holders("job", held.Value()))
	}
}

func TestLockDone(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	ctx := context.Background()
	closedBy := func(l *redlock.Lock, limit time.Duration) (time.Time, bool) {
		select {
		case <-l.Done():
			return time.Now(), true
		case <-time.After(limit):
			return time.Time{}, false
		}
	}

	t.Run("validity ends", func(t *testing.T) {
		l, err := c.Lock(ctx, "expire", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		at, ok := closedBy(l, time.Second)
		if !ok {
			t.Fatal("Done not closed within 1s of a 200ms lock")
		}
		if at.Before(l.Until()) {
			t.Fatalf("Done closed %v before Until", l.Until().Sub(at))
		}
		if at.Sub(l.Until()) > 200*time.Millisecond {
			t.Fatalf("Done closed %v after Until", at.Sub(l.Until()))
		}
	})

	t.Run("extend pushes it back", func(t *testing.T) {
		l, err := c.Lock(ctx, "extend", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
		done := l.Done()
		first := l.Until()
		time.Sleep(100 * time.Millisecond)
		if err := l.Extend(ctx, 600*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, ok := closedBy(l, time.Until(first)+50*time.Millisecond); ok {
			t.Fatal("Done closed at the old validity after a successful Extend")
		}
		at, ok := closedBy(l, time.Second)
		if !ok || at.Before(l.Until()) {
			t.Fatalf("Done closed at %v (ok %v), want just after Until %v", at, ok, l.Until())
		}
		if l.Done() != done {
			t.Fatal("Done returned a different channel")
		}
	})

	t.Run("failed extend brings it forward", func(t *testing.T) {
		nodes := doStart(t, 3)
		c := nodes.client()
		l, err := c.Lock(ctx, "shorten", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done := l.Done()
		// One node answers: the extension fails, but that node now holds
		// the key for 100ms only, so validity must shrink to match.
		for _, m := range nodes.nodes[:2] {
			m.Close()
		}
		if err := l.Extend(ctx, 100*time.Millisecond); !errors.Is(err, redlock.ErrNotObtained) {
			t.Fatalf("Extend with two of three nodes down = %v, want ErrNotObtained", err)
		}
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatalf("Done open 1s after validity shrank to %v", time.Until(l.Until()))
		}
	})

	t.Run("unlock closes it", func(t *testing.T) {
		l, err := c.Lock(ctx, "unlock", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done := l.Done()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		default:
			t.Fatal("Done not closed by Unlock")
		}
	})

	t.Run("after release", func(t *testing.T) {
		l, err := c.Lock(ctx, "late", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		default:
			t.Fatal("Done of a released lock is open")
		}
	})

	t.Run("concurrent use", func(t *testing.T) {
		// Long enough that the Extends, slow on a loaded machine, never
		// let it run out: this subtest is for the race detector.
		l, err := c.Lock(ctx, "race", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for range 10 {
					_ = l.Done()
					if i%2 == 0 {
						_ = l.Extend(ctx, 10*time.Second)
					}
				}
			})
		}
		wg.Wait()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := closedBy(l, time.Second); !ok {
			t.Fatal("Done open after Unlock")
		}
	})
}

func ExampleClient_Do() {
	// Three in-process Redis nodes stand in for independent masters.
	var pools []redlock.Pool
	for range 3 {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			panic(err)
		}
		defer m.Close()
		p := redigo.NewPool(m.Addr())
		defer p.Close()
		pools = append(pools, p)
	}
	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		panic(err)
	}

	// The lock is extended while the work runs and released when it returns.
	// ctx is cancelled if the lock is lost, and the error then says so.
	err = client.Do(context.Background(), "reports:daily", 10*time.Second,
		func(ctx context.Context) error {
			fmt.Println("building the report while holding the lock")
			return nil
		})
	if errors.Is(err, redlock.ErrLockLost) {
		fmt.Println("lost the lock part way; the work may not have been exclusive")
	} else if err != nil {
		fmt.Println("error:", err)
	}
	// Output: building the report while holding the lock
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/observe"
)

// wakeEvents counts a Client's woken attempts and their outcomes.
type wakeEvents struct {
	woken, wokenLost, wokenWon atomic.Int64
}

func (o *wakeEvents) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.KindAttempt && e.Woken:
		o.woken.Add(1)
	case e.Kind == observe.KindRetry && e.Woken:
		o.wokenLost.Add(1)
	case e.Kind == observe.KindAcquired && e.Woken:
		o.wokenWon.Add(1)
	}
}

// awaitWaiting waits until c has want Lock calls waiting on key with its
// subscription confirmed on every node, so that a release from now on is
// announced to them.
func awaitWaiting(t *testing.T, c *redlock.Client, key string, want, nodes int) {
	t.Helper()
	all := uint64(1)<<nodes - 1
	if !realEventually(10*time.Second, func() bool {
		return redlock.Waiting(c, key) == want && redlock.WakeLive(c) == all
	}) {
		t.Fatalf("waiting on %s: %d calls, subscriptions %b; want %d and %b",
			key, redlock.Waiting(c, key), redlock.WakeLive(c), want, all)
	}
}

// A release wakes a waiter at once, not at its next timed attempt, which
// here is a minute away.
func TestWakeUpOnRelease(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holder := realClient(t, addrs)
	var ev wakeEvents
	waiter := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(&ev))
	t.Cleanup(func() { waiter.Close() })

	l, err := holder.Lock(ctx, "wake:one", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Lock(lctx, "wake:one", 30*time.Second)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, waiter, "wake:one", 1, len(addrs))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// The timed attempt was a minute away; 10 s is slack for a loaded
	// machine, not a measurement (see docs/benchmarks.md).
	if d := time.Since(released); d > 10*time.Second {
		t.Errorf("waiter got the lock %v after the release", d)
	}
	if ev.wokenWon.Load() != 1 {
		t.Errorf("%d woken acquisitions, want 1", ev.wokenWon.Load())
	}
}

// An announcement is a hint: forged ones wake the waiter, whose attempts
// fail while the lock is held, and do not count toward WithTries.
func TestWakeUpAnnouncementIsOnlyAHint(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holder := realClient(t, addrs)
	var ev wakeEvents
	waiter := realClient(t, addrs, redlock.WithTries(2),
		redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(&ev))
	t.Cleanup(func() { waiter.Close() })

	l, err := holder.Lock(ctx, "wake:forged", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var acquired atomic.Bool
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Lock(lctx, "wake:forged", 30*time.Second)
		if err == nil {
			acquired.Store(true)
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, waiter, "wake:forged", 1, len(addrs))
	conns := make([]redis.Conn, len(addrs))
	for i, a := range addrs {
		conns[i] = realConn(t, a)
	}
	const forged = 5
	for i := range forged {
		for _, c := range conns {
			if _, err := c.Do("PUBLISH", redlock.ReleaseChannel, "wake:forged"); err != nil {
				t.Fatal(err)
			}
		}
		// A wave may wake the waiter twice: an announcement of the wave
		// before, arriving during the attempt it woke, counts with the
		// first of this one.
		if !realEventually(10*time.Second, func() bool { return ev.wokenLost.Load() >= int64(i+1) }) {
			t.Fatalf("forged announcement %d: %d woken attempts failed, want %d", i+1, ev.wokenLost.Load(), i+1)
		}
		if acquired.Load() {
			t.Fatal("a forged announcement granted the lock while it was held")
		}
	}
	if n := redlock.Waiting(waiter, "wake:forged"); n != 1 {
		t.Fatalf("after %d failed woken attempts and WithTries(2), %d calls wait; want 1", forged, n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// One subscription per node per Client, whatever the number of waiters and
// keys; it closes once no one has waited for a while, and at Close.
func TestWakeUpOneSubscriptionPerNode(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holder := realClient(t, addrs)
	waiter := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	const keys = 10
	var held []*redlock.Lock
	for i := range keys {
		l, err := holder.Lock(ctx, fmt.Sprintf("wake:many:%d", i), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for i := range keys {
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := waiter.Lock(lctx, fmt.Sprintf("wake:many:%d", i), 30*time.Second)
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs <- err
		})
	}
	for i := range keys {
		awaitWaiting(t, waiter, fmt.Sprintf("wake:many:%d", i), 1, len(addrs))
	}
	numsub := func(addr string) int64 {
		conn := realConn(t, addr)
		v, err := redis.Values(conn.Do("PUBSUB", "NUMSUB", redlock.ReleaseChannel))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := redis.Int64(v[1], nil)
		return n
	}
	for i, a := range addrs {
		if n := numsub(a); n != 1 {
			t.Errorf("node %d: %d subscriptions for %d waiters on %d keys, want 1", i, n, keys, keys)
		}
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
	}
	for i, a := range addrs {
		if !realEventually(10*time.Second, func() bool { return numsub(a) == 0 }) {
			t.Errorf("node %d: the subscription is still open with no one waiting", i)
		}
	}
	if err := waiter.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// With wake-up off, releases announce nothing: a subscriber sees only the
// release of the Client that has it on.
func TestWakeUpOff(t *testing.T) {
	addrs := realNodes(t, 1)
	ctx := context.Background()
	sub := redis.PubSubConn{Conn: realConn(t, addrs[0])}
	if err := sub.Subscribe(redlock.ReleaseChannel); err != nil {
		t.Fatal(err)
	}
	if _, ok := sub.Receive().(redis.Subscription); !ok {
		t.Fatal("no subscription confirmation")
	}
	for _, c := range []struct {
		key  string
		opts []redlock.Option
	}{{"wake:off", []redlock.Option{redlock.WithWakeUp(false)}}, {"wake:on", nil}} {
		l, err := realClient(t, addrs, c.opts...).Lock(ctx, c.key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	switch m := sub.ReceiveWithTimeout(10 * time.Second).(type) {
	case redis.Message:
		if string(m.Data) != "wake:on" {
			t.Errorf("first announcement %q, want wake:on: the Client with wake-up off announced", m.Data)
		}
	case error:
		t.Fatal(m)
	default:
		t.Fatalf("unexpected %T", m)
	}
}

// A Lock that waits with wake-up still ends with its context.
func TestWakeUpWaiterEndsWithContext(t *testing.T) {
	addrs := realNodes(t, 3)
	holder := realClient(t, addrs)
	waiter := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	t.Cleanup(func() { waiter.Close() })
	if _, err := holder.Lock(context.Background(), "wake:ctx", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, "wake:ctx", time.Second)
		got <- err
	}()
	awaitWaiting(t, waiter, "wake:ctx", 1, len(addrs))
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, redlock.ErrNotObtained) {
			t.Errorf("err = %v, want ErrNotObtained and context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lock still waiting 10s after its context ended")
	}
	if n := redlock.Waiting(waiter, "wake:ctx"); n != 0 {
		t.Errorf("%d calls still registered as waiting", n)
	}
}

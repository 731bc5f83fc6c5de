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
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
	"github.com/quorumlock/redlock/redigo"
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
// subscription to the key's channel confirmed on every node, so that a
// release from now on is announced to them.
func awaitWaiting(t *testing.T, c *redlock.Client, key string, want, nodes int) {
	t.Helper()
	all := uint64(1)<<nodes - 1
	if !realEventually(10*time.Second, func() bool {
		return redlock.Waiting(c, key) == want && redlock.WakeLive(c) == all && redlock.WakeHeard(c, key) == all
	}) {
		t.Fatalf("waiting on %s: %d calls, subscriptions %b, to the key's channel %b; want %d and %b",
			key, redlock.Waiting(c, key), redlock.WakeLive(c), redlock.WakeHeard(c, key), want, all)
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

// gatedSubscriber is a redigo pool whose subscription asks for its first
// channel only (the one that keeps it open) until gate is closed, as if
// the SUBSCRIBE of the keys' channels took that long.
type gatedSubscriber struct {
	*redigo.Pool
	gate chan struct{}
}

func (g gatedSubscriber) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	changed := make(chan struct{}, 1)
	inner := &driver.Subscription{Changed: changed, Ready: sub.Ready, Deliver: sub.Deliver,
		Channels: func() []string {
			select {
			case <-g.gate:
				return sub.Channels()
			default:
				return sub.Channels()[:1]
			}
		}}
	ctx, cancel := context.WithCancel(ctx) // ends the forwarding with this subscription
	defer cancel()
	go func() {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return
		}
		for {
			select {
			case changed <- struct{}{}:
			default:
			}
			select {
			case <-sub.Changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return g.Pool.Subscribe(ctx, inner)
}

// A release after the waiter's failed attempt and before its subscription
// to the key's channel reached the nodes is announced to no one. The
// subscription's confirmation stands for it: the waiter is woken then, not
// at its timed attempt a minute later.
func TestWakeUpReleaseBeforeTheKeysSubscription(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holder := realClient(t, addrs)
	gate := make(chan struct{})
	pools := make([]redlock.Pool, len(addrs))
	for i, addr := range addrs {
		p := redigo.NewPool(addr)
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = gatedSubscriber{p, gate}
	}
	var ev wakeEvents
	waiter, err := redlock.New(pools, realNodeTimeout,
		redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })
	const key = "wake:gap"
	l, err := holder.Lock(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Lock(lctx, key, 30*time.Second)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	all := uint64(1)<<len(addrs) - 1
	if !realEventually(10*time.Second, func() bool {
		return redlock.Waiting(waiter, key) == 1 && redlock.WakeLive(waiter) == all
	}) {
		t.Fatal("the waiter is not waiting with its subscriptions open")
	}
	for i, a := range addrs {
		v, err := redis.Values(realConn(t, a).Do("PUBSUB", "NUMSUB", redlock.ReleaseChannel(key)))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := redis.Int64(v[1], nil); n != 0 || redlock.WakeHeard(waiter, key) != 0 {
			t.Fatalf("node %d: %d subscribers to the key's channel before the gate opened", i, n)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(gate)
	released := time.Now()
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
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
			if _, err := c.Do("PUBLISH", redlock.ReleaseChannel("wake:forged"), "wake:forged"); err != nil {
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
	numsub := func(addr, channel string) int64 {
		conn := realConn(t, addr)
		v, err := redis.Values(conn.Do("PUBSUB", "NUMSUB", channel))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := redis.Int64(v[1], nil)
		return n
	}
	anchor := redlock.ReleaseChannel("")
	for i, a := range addrs {
		if n := numsub(a, anchor); n != 1 {
			t.Errorf("node %d: %d subscriptions for %d waiters on %d keys, want 1", i, n, keys, keys)
		}
		for k := range keys {
			if n := numsub(a, redlock.ReleaseChannel(fmt.Sprintf("wake:many:%d", k))); n != 1 {
				t.Errorf("node %d: %d subscribers to the channel of key %d, want 1", i, n, k)
			}
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
		if !realEventually(10*time.Second, func() bool { return numsub(a, anchor) == 0 }) {
			t.Errorf("node %d: the subscription is still open with no one waiting", i)
		}
	}
	if err := waiter.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A Client hears the channels of the keys it waits for, and only while it
// waits: the waiter that won a key has dropped the key's channel, so that
// its own release of it comes back to no one, while the key it still
// waits for keeps its channel on the same connection.
func TestWakeUpChannelsFollowTheWaiters(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	holder := realClient(t, addrs)
	waiter := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	t.Cleanup(func() { waiter.Close() })
	numsub := func(addr, channel string) int64 {
		v, err := redis.Values(realConn(t, addr).Do("PUBSUB", "NUMSUB", channel))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := redis.Int64(v[1], nil)
		return n
	}
	keys := []string{"wake:follow:a", "wake:follow:b"}
	held := make([]*redlock.Lock, len(keys))
	for i, key := range keys {
		l, err := holder.Lock(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
	}
	won := make(chan *redlock.Lock, len(keys))
	errs := make(chan error, len(keys))
	for _, key := range keys {
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := waiter.Lock(lctx, key, 30*time.Second)
			if err != nil {
				errs <- err
				return
			}
			won <- l
		}()
	}
	for _, key := range keys {
		awaitWaiting(t, waiter, key, 1, len(addrs))
	}
	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var a *redlock.Lock
	select {
	case a = <-won:
	case err := <-errs:
		t.Fatalf("waiter: %v", err)
	}
	for i, addr := range addrs {
		if !realEventually(10*time.Second, func() bool { return numsub(addr, redlock.ReleaseChannel(keys[0])) == 0 }) {
			t.Errorf("node %d: the winner still hears the channel of the key it holds", i)
		}
		if n := numsub(addr, redlock.ReleaseChannel(keys[1])); n != 1 {
			t.Errorf("node %d: %d subscribers to the channel of the key still waited for, want 1", i, n)
		}
		if n := numsub(addr, redlock.ReleaseChannel("")); n != 1 {
			t.Errorf("node %d: %d subscriptions open, want 1", i, n)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-won:
		if err := b.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-errs:
		t.Fatalf("waiter: %v", err)
	}
}

// With wake-up off, releases announce nothing: a subscriber sees only the
// release of the Client that has it on.
func TestWakeUpOff(t *testing.T) {
	addrs := realNodes(t, 1)
	ctx := context.Background()
	sub := redis.PubSubConn{Conn: realConn(t, addrs[0])}
	if err := sub.PSubscribe(redlock.ReleaseChannel("*")); err != nil {
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
		if string(m.Data) != "wake:on" || m.Channel != redlock.ReleaseChannel("wake:on") {
			t.Errorf("first announcement %q on %s, want wake:on on its channel: the Client with wake-up off announced", m.Data, m.Channel)
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

// Every primitive's release wakes the waiters of its keys: the release
// scripts announce on the channel of the very key that the waiters
// subscribed to. The waiters' timed attempts are a minute away.
func TestWakeUpEveryPrimitive(t *testing.T) {
	addrs := realNodes(t, 3)
	ctx := context.Background()
	type acquire func(c *redlock.Client) (*redlock.Lock, error)
	sem := func(key string) acquire {
		return func(c *redlock.Client) (*redlock.Lock, error) {
			s, err := c.Semaphore(key, 1)
			if err != nil {
				return nil, err
			}
			return s.Acquire(ctx, 30*time.Second)
		}
	}
	write := func(key string) acquire {
		return func(c *redlock.Client) (*redlock.Lock, error) { return c.RWMutex(key).Lock(ctx, 30*time.Second) }
	}
	read := func(key string) acquire {
		return func(c *redlock.Client) (*redlock.Lock, error) { return c.RWMutex(key).RLock(ctx, 30*time.Second) }
	}
	for _, tc := range []struct {
		name           string
		holder, waiter acquire
		opts           []redlock.Option
	}{
		{"semaphore", sem("wake:sem"), sem("wake:sem"), nil},
		{"semaphore with a prefix", sem("wake:sem"), sem("wake:sem"), []redlock.Option{redlock.WithKeyPrefix("app:")}},
		{"writer after a writer", write("wake:rw1"), write("wake:rw1"), nil},
		{"writer after a reader", read("wake:rw2"), write("wake:rw2"), nil},
		{"reader after a writer", write("wake:rw3"), read("wake:rw3"), []redlock.Option{redlock.WithKeyPrefix("app:")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			holder := realClient(t, addrs, tc.opts...)
			var ev wakeEvents
			waiter := realClient(t, addrs, append([]redlock.Option{redlock.WithObserver(&ev),
				redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute))}, tc.opts...)...)
			t.Cleanup(func() { waiter.Close() })
			l, err := tc.holder(holder)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				w, err := tc.waiter(waiter)
				if err == nil {
					err = w.Unlock(ctx)
				}
				got <- err
			}()
			if !realEventually(10*time.Second, func() bool { return redlock.Waiters(waiter) == 1 && ev.woken.Load() >= 1 }) {
				t.Fatal("the waiter is not waiting, woken once by its subscription's confirmation")
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not woken by the release (its timed attempt is a minute away)")
			}
			if ev.wokenWon.Load() != 1 {
				t.Errorf("%d woken acquisitions, want 1", ev.wokenWon.Load())
			}
		})
	}
}

// changesAfter forwards Changed to its redigo pool's subscription only
// after delay, as a writer still busy with an earlier change would read
// it: a channel dropped and added again in between is neither
// unsubscribed nor subscribed again.
type changesAfter struct {
	*redigo.Pool
	delay time.Duration
}

func (p changesAfter) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	changed := make(chan struct{}, 1)
	inner := *sub
	inner.Changed = changed
	ctx, cancel := context.WithCancel(ctx) // ends the forwarding with this subscription
	defer cancel()
	go func() {
		for {
			select {
			case <-sub.Changed:
			case <-ctx.Done():
				return
			}
			select {
			case <-time.After(p.delay):
			case <-ctx.Done():
				return
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	return p.Pool.Subscribe(ctx, &inner)
}

// A release between a waiter's failed attempt and its registration is
// announced before anyone of its Client waits to hear it. Where the
// Client's channel for the key is already confirmed, no confirmation comes
// to stand for that announcement; the registration takes the confirmed
// nodes as announcements instead, and the waiter wins at once, not at its
// timed attempt a minute later. Two ways a Client hears a key no contender
// of it waits for: an election's observer of the key (Campaign and
// Observe in one process), and a channel dropped by the winner and added
// again by the next waiter before the subscription read the drop.
func TestWakeUpReleaseBeforeRegistration(t *testing.T) {
	ctx := context.Background()
	all := uint64(1)<<3 - 1
	// lockAcross locks key on c, releasing l after c's first attempt has
	// failed and before the call registers as a waiter; the pause lets
	// the release's announcement reach c (where it finds no contender).
	lockAcross := func(t *testing.T, c *redlock.Client, key string, l *redlock.Lock) {
		t.Helper()
		var once atomic.Bool
		undo := redlock.AfterAttempts(c, func() {
			if once.CompareAndSwap(false, true) {
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		defer undo()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := c.Lock(lctx, key, 30*time.Second)
		if err != nil {
			t.Fatalf("the key was free for the whole wait: %v", err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("beside an observer", func(t *testing.T) {
		addrs := realNodes(t, 3)
		holder := realClient(t, addrs)
		c := realClient(t, addrs, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
		t.Cleanup(func() { c.Close() })
		const key = "wake:registration:observer"
		l, err := holder.Lock(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		leaders, err := c.Election(key).Observe(octx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range leaders {
			}
		}()
		if !realEventually(10*time.Second, func() bool { return redlock.WakeHeard(c, key) == all }) {
			t.Fatal("the observer's channel is not confirmed")
		}
		lockAcross(t, c, key, l)
	})

	t.Run("drop and add coalesced", func(t *testing.T) {
		addrs := realNodes(t, 3)
		holder := realClient(t, addrs)
		pools := make([]redlock.Pool, len(addrs))
		for i, addr := range addrs {
			p := redigo.NewPool(addr)
			t.Cleanup(func() { _ = p.Close() })
			pools[i] = changesAfter{p, 300 * time.Millisecond}
		}
		c, err := redlock.New(pools, realNodeTimeout, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		const key = "wake:registration:coalesced"
		l, err := holder.Lock(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A waits until its channel is confirmed, and wins the release.
		won := make(chan *redlock.Lock, 1)
		go func() {
			a, err := c.Lock(ctx, key, 30*time.Second)
			if err != nil {
				t.Error(err)
			}
			won <- a
		}()
		if !realEventually(10*time.Second, func() bool { return redlock.WakeHeard(c, key) == all }) {
			t.Fatal("the first waiter's channel is not confirmed")
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-won
		if a == nil {
			t.Fatal("the first waiter did not win")
		}
		// A's win dropped the channel; the drop waits in Changed while B
		// fails, A releases, and B registers, adding the channel again.
		lockAcross(t, c, key, a)
	})
}

// A node frozen (SIGSTOP) while a Lock waits: its subscription never
// confirms and its announcements never come, but the other two nodes'
// confirmations and announcements make a majority, so the release wakes
// the waiter, which wins on those two; and Close, with the frozen node's
// subscription still waiting for its confirmation, returns within its
// bound.
func TestWakeUpWithAFrozenNode(t *testing.T) {
	servers := redistest.StartN(t, 3)
	addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
	ctx := context.Background()
	const timeout = 300 * time.Millisecond
	holder := realClient(t, addrs, redlock.WithNodeTimeout(timeout))
	// The holder must hold all three nodes before one freezes, or its
	// release cannot reach a majority: Lock returns at two, and a
	// straggler's SET is settled, and taken again if it did not land.
	var l *redlock.Lock
	for try := 1; ; try++ {
		var err error
		if l, err = holder.Lock(ctx, "wake:frozen", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		redlock.Settle(holder)
		if l.Held() == 3 {
			break
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if try == 5 {
			t.Fatalf("the holder holds %d of 3 nodes after 5 locks", l.Held())
		}
	}
	if err := servers[2].Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = servers[2].Thaw() })
	var ev wakeEvents
	waiter := realClient(t, addrs, redlock.WithNodeTimeout(timeout), redlock.WithObserver(&ev),
		redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
	got := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := waiter.Lock(lctx, "wake:frozen", 30*time.Second)
		if err == nil {
			err = w.Unlock(ctx) // a majority: the two nodes that answer
		}
		got <- err
	}()
	if !realEventually(10*time.Second, func() bool {
		return redlock.Waiting(waiter, "wake:frozen") == 1 && redlock.WakeHeard(waiter, "wake:frozen") == 0b011
	}) {
		t.Fatalf("the waiter's channel confirmed on %b, want 011 (node 2 is frozen)", redlock.WakeHeard(waiter, "wake:frozen"))
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not woken by the release on the two nodes that answer")
	}
	if ev.wokenWon.Load() != 1 {
		t.Errorf("%d woken acquisitions, want 1", ev.wokenWon.Load())
	}
	start := time.Now()
	if err := waiter.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v with a frozen node's subscription open", took)
	}
}

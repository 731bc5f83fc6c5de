package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/observe"
)

func woke(wt *waiter) bool {
	select {
	case <-wt.wake:
		return true
	default:
		return false
	}
}

// A waiter wakes once announcements, with the nodes its own attempt held,
// make a majority possible, and only for an announcement from a node it did
// not hold: its own undo announces on those.
func TestWaiterWakesOnAMajority(t *testing.T) {
	wt := &waiter{keys: []string{"k"}, need: 3, wake: make(chan struct{}, 1)}
	wt.arm()
	wt.notify(0) // the attempt is still running: nothing is known yet
	if woke(wt) {
		t.Fatal("woken before the attempt ended")
	}
	// It held nodes 0 to 2 and let them go (a majority that answered after
	// its validity ended, say).
	wt.settle(0b00111)
	if woke(wt) {
		t.Fatal("woken by its own undo")
	}
	wt.notify(1)
	if woke(wt) {
		t.Fatal("woken by its own undo")
	}
	wt.notify(3)
	if !woke(wt) {
		t.Fatal("not woken with nodes 0 to 2 (its own) and 3 (announced) free")
	}

	wt.arm()
	wt.settle(0)
	wt.notify(2)
	wt.notify(2) // a duplicate counts once
	wt.notify(4)
	if woke(wt) {
		t.Fatal("woken with 2 of 3 needed nodes free")
	}
	wt.notify(0)
	if !woke(wt) {
		t.Fatal("not woken with three nodes announced")
	}

	wt.notify(1) // a pending wake-up...
	wt.arm()     // ...belongs to the attempt before
	if woke(wt) {
		t.Fatal("a wake-up from before the attempt survived arm")
	}
}

func TestStaggerDoublesOnSplitsAndNarrowsWithTheWait(t *testing.T) {
	rtt := 100 * time.Microsecond
	for splits, want := range []time.Duration{rtt, 2 * rtt, 4 * rtt} {
		if got := staggerFor(rtt, 0, splits); got != want {
			t.Errorf("staggerFor(%v, 0, %d) = %v, want %v", rtt, splits, got, want)
		}
	}
	if got, want := staggerFor(rtt, 0, 100), rtt<<maxSplitShift; got != want {
		t.Errorf("staggerFor(%v, 0, 100) = %v, want the cap %v", rtt, got, want)
	}
	// Who has waited 16 rtt draws from half the window; 144 rtt, a tenth.
	if got, want := staggerFor(rtt, ageScale*rtt, 0), rtt/2; got != want {
		t.Errorf("staggerFor(%v, 16rtt, 0) = %v, want %v", rtt, got, want)
	}
	if got, want := staggerFor(rtt, 9*ageScale*rtt, 1), 2*rtt/10; got != want {
		t.Errorf("staggerFor(%v, 144rtt, 1) = %v, want %v", rtt, got, want)
	}
	if got := staggerFor(0, time.Second, 3); got != 0 {
		t.Errorf("staggerFor(0, 1s, 3) = %v, want 0", got)
	}
	if got := staggerFor(time.Hour, time.Hour, 60); got <= 0 {
		t.Errorf("staggerFor(1h, 1h, 60) = %v: overflowed", got)
	}
}

// subMemPool is a memPool that is also a Subscriber whose subscription never
// delivers, and confirms only its first channel (the one that keeps it
// open), not the keys': the tests announce releases themselves
// (waker.deliver), at the moment they choose.
type subMemPool struct{ memPool }

var _ driver.Subscriber = (*subMemPool)(nil)

func (p *subMemPool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	sub.Ready(sub.Channels()[0])
	<-ctx.Done()
	return ctx.Err()
}

// attemptTimes records when each acquisition (by event ID) began its woken
// attempts.
type attemptTimes struct {
	mu    sync.Mutex
	woken map[uint64][]time.Time
}

func (a *attemptTimes) Observe(_ context.Context, e observe.Event) {
	if e.Kind != observe.KindAttempt || !e.Woken {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.woken == nil {
		a.woken = make(map[uint64][]time.Time)
	}
	a.woken[e.ID] = append(a.woken[e.ID], time.Now())
}

// firstAfter returns the first woken attempt after t of the acquisition id,
// and whether there is one.
func (a *attemptTimes) firstAfter(id uint64, t time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, at := range a.woken[id] {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// wakeBench is a holder and a waiting Client on three in-memory nodes; the
// waiting Client's every node call takes rtt (SlowNodes), so that its
// attempts last rtt, and its timed attempts are a minute apart.
type wakeBench struct {
	holder, waiter *Client
	times          attemptTimes
}

func newWakeBench(t *testing.T, rtt time.Duration) *wakeBench {
	t.Helper()
	b := &wakeBench{}
	var plain, subs []Pool
	for range 3 {
		n := newSimNode(1)
		plain = append(plain, &memPool{n})
		subs = append(subs, &subMemPool{memPool{n}})
	}
	var err error
	if b.holder, err = New(plain, WithWakeUp(false)); err != nil {
		t.Fatal(err)
	}
	if b.waiter, err = New(subs, WithNodeTimeout(5*rtt), WithRetryStrategy(ConstantRetry(time.Minute)), WithObserver(&b.times)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.waiter.Close(); b.holder.Close() })
	t.Cleanup(SlowNodes(b.waiter, 0b111, rtt))
	return b
}

// settled waits until n of the waiter Client's calls wait on key, each with
// its last attempt over (so that announcements from now on can wake it).
func (b *wakeBench) settled(t *testing.T, key string, n int) {
	t.Helper()
	w := b.waiter.wake
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		ws := w.waiting[key]
		ready := len(ws) == n
		for _, wt := range ws {
			wt.mu.Lock()
			ready = ready && wt.settled
			wt.mu.Unlock()
		}
		w.mu.Unlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls waiting on %s, settled, not reached in 10s", n, key)
		}
		time.Sleep(time.Millisecond)
	}
}

// probed waits until the acquisition id, waiting on key, has begun a
// woken attempt after confirmed (the probe the confirmations caused) and
// ended it.
func (b *wakeBench) probed(t *testing.T, key string, id uint64, confirmed time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, ok := b.times.firstAfter(id, confirmed); ok {
			break // the probe is under way: settled waits for its end
		}
		if time.Now().After(deadline) {
			t.Fatal("the confirmations woke no attempt in 10s")
		}
	}
	b.settled(t, key, 1)
}

// announce delivers key's release from every node to the waiter Client, as
// its subscriptions would, and returns when it did.
func (b *wakeBench) announce(key string) time.Time {
	at := time.Now()
	for node := range 3 {
		b.waiter.wake.deliver(node, key)
	}
	return at
}

// A woken waiter with no other waiter of its Client on the key attempts at
// once: no stagger, although its last attempt took rtt (200 ms), which the
// stagger window used to be drawn from. Four hand-overs, each within a fifth
// of rtt of the announcement (slack for a loaded machine); a draw from
// [0, rtt) would pass all four about once in 500 runs.
func TestWakeLoneWaiterAttemptsAtOnce(t *testing.T) {
	const rtt = 200 * time.Millisecond
	b := newWakeBench(t, rtt)
	ctx := context.Background()
	for i := range 4 {
		key := fmt.Sprintf("wake:lone:%d", i)
		l, err := b.holder.Lock(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			w, err := b.waiter.Lock(ctx, key, time.Minute)
			if err == nil {
				err = w.Unlock(ctx)
			}
			got <- err
		}()
		b.settled(t, key, 1)
		id := b.waiter.ids.Load() // the waiting call's, the last one made
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		at := b.announce(key)
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("hand-over %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("hand-over %d: the waiter did not get the key within 30s", i)
		}
		woke, ok := b.times.firstAfter(id, at)
		if !ok {
			t.Fatalf("hand-over %d: no woken attempt", i)
		}
		if d := woke.Sub(at); d > rtt/5 {
			t.Errorf("hand-over %d: the woken attempt began %v after the announcement, want at once (< %v)", i, d, rtt/5)
		}
	}
}

// Of two waiters of one Client on a key, the one that has waited longer
// attempts at once when woken, and the other only after one attempt's
// duration (rtt), so that the first has reached the nodes: the two do not
// divide the vote between them, and the first wins.
func TestWakeLocalLeadGoesFirst(t *testing.T) {
	const rtt = 200 * time.Millisecond
	b := newWakeBench(t, rtt)
	ctx := context.Background()
	const key = "wake:lead"
	l, err := b.holder.Lock(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		err error
	}
	got := make(chan result, 2)
	start := func(who string, ctx context.Context, waiting int) uint64 {
		go func() {
			w, err := b.waiter.Lock(ctx, key, time.Minute)
			if err == nil {
				err = w.Unlock(context.Background())
			}
			got <- result{who, err}
		}()
		b.settled(t, key, waiting)
		return b.waiter.ids.Load()
	}
	first := start("first", ctx, 1)
	second, cancel := context.WithCancel(ctx)
	defer cancel()
	secondID := start("second", second, 2)

	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	at := b.announce(key)
	r := <-got
	if r.who != "first" || r.err != nil {
		t.Fatalf("%s returned %v first; want the longer waiter to win", r.who, r.err)
	}
	woke, ok := b.times.firstAfter(first, at)
	if !ok || woke.Sub(at) > rtt/5 {
		t.Errorf("the longer waiter's woken attempt began %v after the announcement (found: %v), want at once (< %v)", woke.Sub(at), ok, rtt/5)
	}
	if woke, ok := b.times.firstAfter(secondID, at); ok && woke.Sub(at) < rtt*3/4 {
		t.Errorf("the other waiter's woken attempt began %v after the announcement, want no sooner than about rtt (%v)", woke.Sub(at), rtt)
	}
	cancel()
	if r := <-got; r.err != nil && !errors.Is(r.err, context.Canceled) {
		t.Errorf("%s: %v", r.who, r.err)
	}
}

// The first slot: a leader after no split vote goes at once; a waiter
// behind its Client's leader waits one attempt's duration and then draws;
// after split votes, every waiter draws from the doubled window.
func TestWakeDelay(t *testing.T) {
	rtt, waited := 100*time.Microsecond, 3*time.Millisecond
	for _, c := range []struct {
		lead          bool
		splits        int
		after, window time.Duration
	}{
		{true, 0, 0, 0},
		{true, 1, 0, staggerFor(rtt, waited, 1)},
		{true, 3, 0, staggerFor(rtt, waited, 3)},
		{false, 0, rtt, staggerFor(rtt, waited, 0)},
		{false, 2, rtt, staggerFor(rtt, waited, 2)},
	} {
		after, window := wakeDelay(c.lead, rtt, waited, c.splits)
		if after != c.after || window != c.window {
			t.Errorf("wakeDelay(lead %v, splits %d) = %v + [0, %v), want %v + [0, %v)", c.lead, c.splits, after, window, c.after, c.window)
		}
	}
	if after, window := wakeDelay(true, rtt, waited, 1); window <= 0 || after != 0 {
		t.Errorf("after a split, a leader draws from [0, %v) after %v: want a window", window, after)
	}
}

// A waiter leads while no contending waiter of its Client that registered
// before it shares one of its keys; observers never hold one back.
func TestWakeLeads(t *testing.T) {
	c, err := New([]Pool{&subMemPool{memPool{newSimNode(1)}}}, WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := c.wake
	obs := w.register([]string{"a"}, 1, false)
	x := w.register([]string{"a"}, 1, true)
	y := w.register([]string{"b", "a"}, 1, true) // an RW writer: two keys
	z := w.register([]string{"b"}, 1, true)
	other := w.register([]string{"c"}, 1, true)
	for _, c := range []struct {
		name string
		wt   *waiter
		want bool
	}{{"x", x, true}, {"y", y, false}, {"z", z, false}, {"other", other, true}, {"observer", obs, true}} {
		if got := w.leads(c.wt); got != c.want {
			t.Errorf("%s leads: %v, want %v", c.name, got, c.want)
		}
	}
	w.unregister(x)
	if !w.leads(y) || w.leads(z) {
		t.Errorf("after x left: y leads %v, z leads %v; want true, false", w.leads(y), w.leads(z))
	}
	w.unregister(y)
	if !w.leads(z) {
		t.Error("z alone on b does not lead")
	}
	for _, wt := range []*waiter{obs, z, other} {
		w.unregister(wt)
	}
}

// oldServerPool answers SET ... NX GET as a server before Redis 7.0 does,
// with ERR syntax error, and everything else as its in-memory node.
type oldServerPool struct {
	subMemPool
	gets atomic.Int64 // SET ... GET commands refused
}

func (p *oldServerPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for i, c := range cmds {
		if c.Name == "SET" && len(c.Args) > 5 {
			p.gets.Add(1)
			replies[i] = driver.Reply{Err: driver.ReplyError("ERR syntax error")}
			continue
		}
		if err := p.subMemPool.Exec(ctx, cmds[i:i+1], replies[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// On servers that refuse SET ... NX GET (before Redis 7.0), a contended
// attempt sends plain SET NX in its place at once, and the node gets plain
// SET NX from then on: with two tries, the second gets the key once the
// holder's ttl has run out. Each node is judged on its own answer: with
// one old server of three, the others are still asked for the holder.
func TestContendedLockOnAServerWithoutSetGet(t *testing.T) {
	for _, old := range []int{3, 1} {
		t.Run(fmt.Sprintf("%d old of 3", old), func(t *testing.T) {
			pools := make([]Pool, 3)
			olds := make([]*oldServerPool, old)
			for i := range pools {
				n := subMemPool{memPool{newSimNode(1)}}
				if i < old {
					olds[i] = &oldServerPool{subMemPool: n}
					pools[i] = olds[i]
				} else {
					pools[i] = &n
				}
			}
			holder, err := New(pools, WithWakeUp(false))
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			waiter, err := New(pools, WithRetryDelay(100*time.Millisecond, 100*time.Millisecond), WithTries(2))
			if err != nil {
				t.Fatal(err)
			}
			defer waiter.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := holder.Lock(ctx, "old", 30*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			l, err := waiter.Lock(ctx, "old", time.Minute)
			if err != nil {
				t.Fatalf("second try on servers without SET ... NX GET, the key free: %v", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			waiter.Close() // waits for the nodes still answering the won round
			for i, p := range olds {
				if got := p.gets.Load(); got != 1 {
					t.Errorf("old node %d: %d SET ... GET sent, want 1: then plain SET NX", i, got)
				}
			}
			for i, n := range waiter.nodes {
				if n.noGet.Load() != (i < old) {
					t.Errorf("node %d: noGet %v, want %v", i, n.noGet.Load(), i < old)
				}
			}
		})
	}
}

// A wake-up that only the confirmations of a key's subscription caused
// makes a probe: here it finds one node free (released in the gap, as far
// as the waiter can tell), holds it, and loses. That is not a split vote,
// and it sets no cap: at the release that follows, the waiter, its
// Client's only one, attempts at once. Counted as a split, the probe
// delayed that attempt by a stagger drawn from a doubled window and by the
// cap (at least one rtt, 200 ms here).
func TestWakeProbeHoldsNothingBack(t *testing.T) {
	const rtt = 200 * time.Millisecond
	b := newWakeBench(t, rtt)
	ctx := context.Background()
	const key = "wake:probe"
	l, err := b.holder.Lock(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := b.waiter.Lock(ctx, key, time.Minute)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	b.settled(t, key, 1)
	id := b.waiter.ids.Load()
	// Node 2 lets the key go unannounced; then the subscriptions confirm.
	n := b.holder.nodes[2].pool.(*memPool).n
	n.mu.Lock()
	delete(n.data, key)
	n.mu.Unlock()
	confirmed := time.Now()
	for node := range 3 {
		b.waiter.wake.confirmNow(node, key)
	}
	b.probed(t, key, id, confirmed)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	at := b.announce(key)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not get the key within 30s")
	}
	woke, ok := b.times.firstAfter(id, at)
	if !ok {
		t.Fatal("no woken attempt after the release")
	}
	if d := woke.Sub(at); d > rtt/5 {
		t.Errorf("the woken attempt began %v after the release's announcement, want at once (< %v)", d, rtt/5)
	}
}

// A reader that begins to wait while another reader of its Client waits
// on the same writer key still counts the confirmed nodes when it
// registers: the other reader heard the writer's release, which came
// between this one's failed attempt and its registration, but readers do
// not exclude each other, and its taking the lock frees nothing that
// would be announced to this one. Before, a registration beside another
// contender of its Client counted nothing, and this reader waited for its
// timed attempt, a minute later.
func TestWakeUpReaderBesideAReader(t *testing.T) {
	const rtt = 100 * time.Millisecond
	b := newWakeBench(t, rtt)
	ctx := context.Background()
	const key = "wake:readers"
	writer, _, _ := rwNames(key)
	h, err := b.holder.RWMutex(key).Lock(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	read := func() chan error {
		got := make(chan error, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := b.waiter.RWMutex(key).RLock(lctx, time.Minute)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		return got
	}
	// Reader A waits, its subscription confirmed, its probe over.
	first := read()
	b.settled(t, writer, 1)
	idA := b.waiter.ids.Load()
	confirmed := time.Now()
	for node := range 3 {
		b.waiter.wake.confirmNow(node, writer)
	}
	b.probed(t, writer, idA, confirmed)
	// Reader B's first attempt fails; before it registers, the writer
	// lets go, and A is woken (its attempt takes rtt: it still waits when
	// B registers).
	var once atomic.Bool
	undo := AfterAttempts(b.waiter, func() {
		if once.CompareAndSwap(false, true) {
			if err := h.Unlock(ctx); err != nil {
				t.Error(err)
			}
			b.announce(writer)
		}
	})
	defer undo()
	second := read()
	for i, got := range []chan error{first, second} {
		select {
		case err := <-got:
			if err != nil {
				t.Errorf("reader %d: %v", i+1, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("reader %d did not return in 30s", i+1)
		}
	}
}

// A confirmation that arrives after the key's last waiter left, before
// the subscription read the drop, still counts: if the key is waited for
// again before that read, the channel never leaves the connection, no
// confirmation comes again, and the next waiter's registration has only
// this one to count.
func TestWakeUpConfirmationAfterTheDrop(t *testing.T) {
	const rtt = 20 * time.Millisecond
	b := newWakeBench(t, rtt)
	ctx := context.Background()
	const key = "wake:late"
	l, err := b.holder.Lock(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter on another key keeps the subscriptions from stopping
	// (wakeLinger), which would forget the confirmations below.
	const other = "wake:late:other"
	if _, err := b.holder.Lock(ctx, other, time.Minute); err != nil {
		t.Fatal(err)
	}
	zctx, cancelZ := context.WithCancel(ctx)
	zdone := make(chan struct{})
	go func() {
		defer close(zdone)
		_, _ = b.waiter.Lock(zctx, other, time.Minute)
	}()
	defer func() { cancelZ(); <-zdone }()
	b.settled(t, other, 1)
	// X waits and leaves before its subscription is confirmed.
	xctx, cancel := context.WithCancel(ctx)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _ = b.waiter.Lock(xctx, key, time.Minute)
	}()
	b.settled(t, key, 1)
	cancel()
	<-gone
	for node := range 3 {
		b.waiter.wake.confirmNow(node, key)
	}
	// B's first attempt fails; the key is let go before B registers,
	// announced to no one.
	var once atomic.Bool
	undo := AfterAttempts(b.waiter, func() {
		if once.CompareAndSwap(false, true) {
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	defer undo()
	lctx, cancelB := context.WithTimeout(ctx, 20*time.Second)
	defer cancelB()
	w, err := b.waiter.Lock(lctx, key, time.Minute)
	if err != nil {
		t.Fatalf("the key was free for the whole wait: %v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// lateSubPool is a memPool whose subscriptions confirm every channel at
// once, deliver nothing, and, once their ctx has ended, return only when
// gate is closed: a connection slow to end.
type lateSubPool struct {
	memPool
	gate  chan struct{}
	ready *atomic.Int64 // subscriptions that have confirmed their channels
}

func (p *lateSubPool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	for _, ch := range sub.Channels() {
		sub.Ready(ch)
	}
	p.ready.Add(1)
	<-ctx.Done()
	<-p.gate
	return ctx.Err()
}

// A subscription run that ends after the next one began (stopped for
// idleness, then a new waiter) leaves the newer run's confirmations as
// they are: clearing them would leave the next waiter's registration
// nothing to count.
func TestWakeUpOldRunKeepsTheNewOnesConfirmations(t *testing.T) {
	gate := make(chan struct{})
	var ready atomic.Int64
	var plain, subs []Pool
	for range 3 {
		n := newSimNode(1)
		plain = append(plain, &memPool{n})
		subs = append(subs, &lateSubPool{memPool{n}, gate, &ready})
	}
	holder, err := New(plain, WithWakeUp(false))
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := New(subs, WithRetryStrategy(ConstantRetry(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	defer waiter.Close()
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	ctx := context.Background()
	const key = "wake:runs"
	l, err := holder.Lock(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	w := waiter.wake
	state := func() (heard, live uint64, stopped bool, runs int64) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.heard[key], w.live.Load(), w.stop == nil, w.runs.n.Load()
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				h, lv, s, r := state()
				t.Fatalf("%s: not reached in 10s (heard %b, live %b, stopped %v, runs %d)", what, h, lv, s, r)
			}
		}
	}
	lock := func(ctx context.Context) chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if l, err := waiter.Lock(ctx, key, time.Minute); err == nil {
				l.Unlock(context.Background())
			}
		}()
		return done
	}
	xctx, cancelX := context.WithCancel(ctx)
	x := lock(xctx)
	wait("the first waiter's confirmations", func() bool { h, _, _, _ := state(); return h == 0b111 })
	cancelX()
	<-x
	wait("the first run stopped for idleness", func() bool { _, _, s, _ := state(); return s })
	yctx, cancelY := context.WithCancel(ctx)
	defer cancelY()
	y := lock(yctx)
	defer func() { cancelY(); <-y }()
	wait("the second run's start", func() bool { _, _, s, r := state(); return !s && r == 6 })
	wait("the second run's confirmations", func() bool { return ready.Load() == 6 })
	close(gate)
	wait("the first run's end", func() bool { _, _, _, r := state(); return r == 3 })
	if h, lv, _, _ := state(); h != 0b111 || lv != 0b111 {
		t.Errorf("after the old run ended: the key confirmed on %b, subscriptions live on %b; want 111 and 111", h, lv)
	}
}

// confirmNow records node's confirmation of key's channel, as node's
// current subscription run would.
func (w *waker) confirmNow(node int, key string) {
	w.mu.Lock()
	gen := w.gens[node]
	w.mu.Unlock()
	w.confirmed(node, gen, key)
}

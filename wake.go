package redlock

import (
	"context"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// Wake-up on release.
//
// A Lock that finds its key held waits for its next timed attempt (the
// RetryStrategy), but it need not sleep through a release. The release
// script (scripts/release.lua), run by Unlock and by the undo of a lost
// attempt, publishes the key's name on releaseChannel after it deleted the
// key. Each Client keeps at most one subscription to that channel per node,
// shared by all its waiting Locks on every key: it opens when the first Lock
// starts waiting and closes wakeLinger after the last one stopped, or at
// Close. A waiter is woken once the nodes that announced a release since its
// attempt began, together with the nodes its failed attempt held itself
// (and has just released), make a majority possible.
//
// A notice is a hint, never a vote. A woken Lock runs an ordinary attempt,
// SET NX on every node and a majority counted within the validity window,
// so a notice that is late, lost, duplicated or forged can cost time but
// cannot grant a lock (docs/algorithm.md, "Wake-up on release"). A lost one
// costs at most the wait until the next timed attempt, which stays as the
// fallback.
//
// Woken attempts do not count toward WithTries: they come between the timed
// attempts, so Lock gives up when it did without wake-ups.
//
// The first slot, split votes and fairness. A woken waiter attempts at
// once if it leads: no other of its Client's waiters that registered before
// it waits on one of its keys (an Election's observer does not count: it
// never attempts). So a lone waiter's woken attempt follows the
// announcement with no delay, and a hand-over takes the release, the
// notice and one SET round. The other waiters of the same Client pause one
// attempt's duration (rtt, its last attempt's) first, and then a random
// stagger drawn from [0, w), so that the leader has reached the nodes: the
// SETs of one process's waiters do not divide the vote among themselves.
//
// Waiters in different processes cannot see each other: each one's leader
// goes at once, and the first whose SETs reach the nodes wins them. Two
// that both reach an odd number of nodes cannot divide them so that
// neither has a majority; with an even number, a node down, or three
// waiters or more, they can. A split vote (a woken attempt that held some
// nodes but lost) is resolved as Ethernet resolves a collision: the next
// woken attempt of each loser, leader or not, first pauses for a stagger
// drawn from [0, w), where
//
//	w = rtt × 2^splits × rtt/(rtt + waited/ageScale)
//
// rtt is the duration of its last attempt (about one round trip to a
// majority, with the undo of what it held); splits counts its woken
// attempts in a row that held some nodes but lost (reset when a woken
// attempt held none, that is, another waiter won cleanly), so repeated
// splits back off exponentially, up to 2^maxSplitShift; and waited is how
// long this Lock call has waited, so that after a split the waiter that
// has waited longest draws from the narrowest window and usually goes
// first. ageScale (16) keeps the windows of waiters that have all waited
// long from shrinking to nothing, where the scheduler's noise, not their
// age, would order them. Among leaders, who goes first at a release is who
// hears of it first: the order is not a queue, and the bound on a wait is
// statistical (docs/algorithm.md, "Wake-up on release", states it and
// docs/benchmarks.md measures it).
//
// Until this design, every woken waiter drew from [0, w) with splits at
// zero, first slot included. A lone waiter then slept a fraction of its
// last attempt; and a sleep shorter than a millisecond, in a process with
// nothing else to run, lasts about a millisecond (the runtime waits for
// timers in epoll with millisecond resolution), more than the rest of the
// hand-over: 1.74 ms at the median against 0.71 ms with the first slot
// (docs/benchmarks.md, "Hand-over latency: where the time went").

// releaseChannel is the Redis pub/sub channel on which releases announce
// themselves on each node; the message is the released key. A Client made
// with WithKeyPrefix uses the prefix followed by this name.
const releaseChannel = "redlock:released"

// wakeLinger is how long a Client keeps its subscriptions open after the
// last waiter stopped waiting, so that a burst of contention does not dial
// them again for every waiter.
const wakeLinger = time.Second

// Subscriptions that fail are opened again after a pause that doubles from
// subscribeRetryMin to subscribeRetryMax.
const (
	subscribeRetryMin = 50 * time.Millisecond
	subscribeRetryMax = 5 * time.Second
)

// ageScale softens the stagger's narrowing with the wait: a waiter's window
// halves once it has waited ageScale round trips.
const ageScale = 16

// maxSplitShift caps the stagger's doubling after split votes: 2^6 round
// trips.
const maxSplitShift = 6

// WithWakeUp turns wake-up on release on or off (on by default). On, every
// release announces itself on the channel "redlock:released", and a Lock that waits is woken
// by the announcements of other Clients' releases, through one subscription
// per node that is a Subscriber. Off, releases send no announcement and Lock
// waits for its timed attempts only; a Client with wake-up off does not
// wake the waiters of other Clients either.
func WithWakeUp(on bool) Option {
	return func(c *Client) { c.wakeOff = !on }
}

// A waker delivers release announcements to the Client's waiting Locks.
// It is safe for concurrent use.
type waker struct {
	client  *Client
	channel string

	mu      sync.Mutex
	waiting map[string][]*waiter // by key, in the order they registered
	count   int                  // waiters registered
	seq     uint64               // registrations so far
	stop    context.CancelFunc   // ends the running subscriptions; nil if none run
	idle    *time.Timer          // stops them once no one waits
	closed  bool

	runs inflight      // subscription goroutines
	live atomic.Uint64 // nodes whose subscription the server has confirmed
}

func newWaker(c *Client, channel string) *waker {
	return &waker{client: c, channel: channel, waiting: make(map[string][]*waiter)}
}

// A waiter is one waiting acquisition (acquireLoop), of any primitive.
type waiter struct {
	keys     []string // the node keys whose release may free it
	need     int      // the quorum
	seq      uint64   // its registration's number in the waker, from 1
	contends bool     // it attempts when woken (an acquisition, not an observer)

	// mu makes each of arm, settle and notify atomic, so that an
	// announcement for one attempt cannot leave a wake-up for the next.
	mu      sync.Mutex
	freed   uint64        // nodes that announced a release of key since arm
	free    uint64        // nodes the last attempt held (and has released)
	settled bool          // the last attempt has ended: free is known
	wake    chan struct{} // one slot: a wake-up is pending
}

// register adds a waiter for keys, the node keys (with the Client's
// prefix, as the release scripts announce them), and opens the
// subscriptions if they are not open. contends tells an acquisition, which
// attempts when woken, from an observer, which only reads. It returns nil
// once the Client is closed.
func (w *waker) register(keys []string, need int, contends bool) *waiter {
	wt := &waiter{keys: keys, need: need, contends: contends, wake: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.seq++
	wt.seq = w.seq
	for _, key := range keys {
		w.waiting[key] = append(w.waiting[key], wt)
	}
	w.count++
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	if w.stop == nil {
		w.start()
	}
	return wt
}

// unregister removes wt; the subscriptions close after wakeLinger if no
// other waiter comes.
func (w *waker) unregister(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range wt.keys {
		ws := w.waiting[key]
		if i := slices.Index(ws, wt); i >= 0 {
			ws = slices.Delete(ws, i, i+1) // keeps the order of registration
		}
		if len(ws) == 0 {
			delete(w.waiting, key)
		} else {
			w.waiting[key] = ws
		}
	}
	w.count--
	if w.count == 0 && w.stop != nil && !w.closed {
		w.idle = time.AfterFunc(wakeLinger, w.stopIdle)
	}
}

// stopIdle closes the subscriptions if still no one waits.
func (w *waker) stopIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count == 0 && w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

// start opens a subscription on every node that is a Subscriber; w.mu is
// held.
func (w *waker) start() {
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	for _, n := range w.client.nodes {
		if s, ok := n.pool.(driver.Subscriber); ok {
			w.runs.Add(1)
			go w.subscribe(ctx, n.index, s)
		}
	}
}

// subscribe keeps node's subscription open until ctx ends, opening it again
// after a failure.
func (w *waker) subscribe(ctx context.Context, node int, s driver.Subscriber) {
	defer w.runs.Done()
	bit := uint64(1) << node
	pause := subscribeRetryMin
	for {
		began := time.Now()
		s.Subscribe(ctx, w.channel, func() { w.live.Or(bit) }, func(key string) { w.deliver(node, key) })
		w.live.And(^bit)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > subscribeRetryMax {
			pause = subscribeRetryMin // it had been working
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		pause = min(2*pause, subscribeRetryMax)
	}
}

// deliver passes node's announcement that key was released to the key's
// waiters.
func (w *waker) deliver(node int, key string) {
	w.mu.Lock()
	for _, wt := range w.waiting[key] {
		wt.notify(node)
	}
	w.mu.Unlock()
}

// leads reports whether wt takes the first slot when woken: no waiter that
// registered before it and contends waits on one of its keys.
func (w *waker) leads(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range wt.keys {
		for _, x := range w.waiting[key] {
			if x.seq >= wt.seq {
				break // the rest registered after it
			}
			if x.contends {
				return false
			}
		}
	}
	return true
}

// close ends the subscriptions and waits for them, at most limit. It
// reports whether they all ended.
func (w *waker) close(limit time.Duration) bool {
	w.mu.Lock()
	w.closed = true
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
	w.mu.Unlock()
	return w.runs.wait(limit)
}

// arm starts an attempt: announcements count from here on.
func (wt *waiter) arm() {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.settled, wt.freed, wt.free = false, 0, 0
	select {
	case <-wt.wake:
	default:
	}
}

// settle ends a failed attempt that held the nodes in held before it let
// them go.
func (wt *waiter) settle(held uint64) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.free, wt.settled = held, true
	wt.check()
}

// notify records node's announcement.
func (wt *waiter) notify(node int) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.freed |= 1 << node
	wt.check()
}

// check wakes the waiter once a majority may be free: nodes that announced
// a release, with those its own attempt held. At least one announcement must
// come from a node the attempt did not hold: its own undo announces too, and
// must not wake it. wt.mu is held.
func (wt *waiter) check() {
	if !wt.settled {
		return
	}
	if wt.freed&^wt.free != 0 && bits.OnesCount64(wt.freed|wt.free) >= wt.need {
		select {
		case wt.wake <- struct{}{}:
		default:
		}
	}
}

// wakeDelay returns how long a woken waiter pauses before its attempt: at
// least after, and then a draw from [0, window). A leader (lead) whose last
// woken attempt did not divide the vote (splits 0) goes at once; a waiter
// behind a leader of its Client waits one attempt's duration (rtt) more;
// after a split vote every waiter draws from staggerFor's window.
func wakeDelay(lead bool, rtt, waited time.Duration, splits int) (after, window time.Duration) {
	if !lead {
		after = max(rtt, 0)
	}
	if splits > 0 || !lead {
		window = staggerFor(rtt, waited, splits)
	}
	return after, window
}

// staggerFor is the stagger window after an attempt that took rtt, for a
// waiter that has waited for waited, with splits woken attempts in a row
// that divided the vote.
func staggerFor(rtt, waited time.Duration, splits int) time.Duration {
	w := rtt << min(splits, maxSplitShift)
	if rtt <= 0 {
		return 0
	}
	// w × rtt/(rtt+waited/ageScale), in floating point: the product may
	// overflow.
	return time.Duration(float64(w) * float64(rtt) / float64(rtt+max(waited, 0)/ageScale))
}

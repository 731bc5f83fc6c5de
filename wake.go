package redlock

import (
	"context"
	"math/bits"
	"slices"
	"strings"
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
// attempt, announces the key's release on the key's channel after it
// deleted the key. Each Client keeps at most one subscription connection
// per node, shared by all its waiting Locks on every key: it opens when the
// first Lock starts waiting and closes wakeLinger after the last one
// stopped, or at Close. A waiter is woken once the nodes that announced a
// release since its attempt began, together with the nodes its failed
// attempt held itself (and has just released), make a majority possible.
//
// Channels per key. A release announces itself on the key's own channel
// (releaseChannelPrefix followed by the node key), and a Client's
// subscription on a node follows the keys its Locks wait for: a key's
// channel is added when its first waiter registers and dropped when its
// last one leaves, on the node's one connection, which stays open while
// anyone waits (and wakeLinger after). So a Client hears only the releases
// of keys it waits for, and not its own releases of a key it holds unless
// another of its Locks waits for the key: the waiter that won a key has
// dropped its channel before its Unlock. With a
// single channel for every key, each Client heard every release of every
// Client, its own included: a lone waiter's hand-over took about a seventh
// longer for the notices of its rival's own releases that it read at that
// moment (docs/benchmarks.md, "thirteenth look"), and a fleet's notices grew
// with the number of processes that had anyone waiting.
//
// A key's subscription begins some time after the waiter's failed attempt
// (the SUBSCRIBE's round trip): a release in between is announced to no
// one. So the server's confirmation of a key's channel on a node counts as
// that node's announcement (confirmed): the confirmations may wake the
// key's acquisitions, whose woken attempt then finds the key free or still
// held. The same covers a connection opened again after a failure, whose
// confirmations stand for the notices lost while it was down. A waiter
// that registers while its Client already hears the key gets no
// confirmation, and counts the nodes that have confirmed instead
// (register). It costs a waiting Lock one woken attempt when it begins to
// wait, whether its key's subscription begins then or is already there.
// That attempt, a probe (arm reports it), is not a contender's move: the
// nodes it holds are usually those its own failed attempt had just let go,
// so losing does not count as a split vote, and it neither counts toward
// nor sets the cap on woken attempts, so that the release it looks for,
// which may come at any moment, wakes the next attempt at once. Counted as
// ordinary woken attempts, probes cost two workers that take turns on a
// key (the releaser locks again 2 ms after its Unlock, while the other
// holds for 3 ms) 2.6 times the p99 wait of a single channel
// (docs/benchmarks.md, "fourteenth look"). TestSimulationWakeUpMissesNoRelease
// checks, on the simulation's clean networks, that no acquisition then
// waits for its timed attempt; without the confirmations some do.
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

// releaseChannelPrefix begins the Redis pub/sub channel on which the
// release of a key announces itself on each node: the channel is this
// prefix followed by the node key, and the message is the node key. A
// Client made with WithKeyPrefix puts its prefix first (so the channel of
// key "k" is "app:redlock:released:app:k"). The prefix alone, a channel on
// which no release is announced, keeps each subscription's connection in
// pub/sub mode while no key is waited for.
const releaseChannelPrefix = "redlock:released:"

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
// release announces itself on the key's channel, "redlock:released:"
// followed by the key (and the Client's key prefix before both), and a Lock
// that waits is woken by the announcements of other Clients' releases,
// through one subscription per node that is a Subscriber, to the channels
// of the keys its Client's Locks wait for. Off, releases send no announcement and Lock
// waits for its timed attempts only; a Client with wake-up off does not
// wake the waiters of other Clients either.
func WithWakeUp(on bool) Option {
	return func(c *Client) { c.wakeOff = !on }
}

// A waker delivers release announcements to the Client's waiting Locks.
// It is safe for concurrent use.
type waker struct {
	client *Client
	prefix string // a key's channel is prefix+key; prefix alone is the anchor

	mu       sync.Mutex
	waiting  map[string][]*waiter // by key, in the order they registered
	channels map[string]string    // the channel of each key in waiting
	heard    map[string]uint64    // the nodes that confirmed each key's channel and have not read a set without it since; may name keys no one waits for
	count    int                  // waiters registered
	seq      uint64               // registrations so far
	stop     context.CancelFunc   // ends the running subscriptions; nil if none run
	changed  []chan struct{}      // each running subscription's Changed
	idle     *time.Timer          // stops them once no one waits
	closed   bool

	gens []uint64      // each node's subscription run, counted by start; w.mu guards it
	runs inflight      // subscription goroutines
	live atomic.Uint64 // nodes whose subscription the server has confirmed
}

func newWaker(c *Client, prefix string) *waker {
	return &waker{client: c, prefix: prefix, waiting: make(map[string][]*waiter),
		channels: make(map[string]string), heard: make(map[string]uint64), gens: make([]uint64, len(c.nodes))}
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
	hinted  uint64        // nodes that confirmed a key's subscription since arm
	free    uint64        // nodes the last attempt held (and has released)
	settled bool          // the last attempt has ended: free is known
	probe   bool          // the pending wake-up came from confirmations: announcements alone would not have woken it
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
	added := false
	for _, key := range keys {
		if _, ok := w.waiting[key]; !ok {
			w.channels[key] = w.prefix + key
			added = true
		}
		// A release between the waiter's failed attempt and now was
		// announced before it registered. Where the key's channel is
		// already confirmed, no confirmation will stand for that
		// announcement: the waiter takes the confirmations as they are.
		// Even beside another contender of the Client on the key, which
		// heard the release: that one may not take what was freed (a
		// reader beside a reader, a permit too small for its weight, two
		// permits freed), or may leave without attempting.
		if contends {
			wt.hinted |= w.heard[key]
		}
		w.waiting[key] = append(w.waiting[key], wt)
	}
	if added {
		w.changes()
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
	dropped := false
	for _, key := range wt.keys {
		ws, ok := w.waiting[key]
		if !ok {
			continue // a key wt names twice, already removed
		}
		if i := slices.Index(ws, wt); i >= 0 {
			ws = slices.Delete(ws, i, i+1) // keeps the order of registration
		}
		if len(ws) == 0 {
			delete(w.waiting, key)
			delete(w.channels, key) // its confirmations are forgotten as the subscriptions read it (wanted)
			dropped = true
		} else {
			w.waiting[key] = ws
		}
	}
	if dropped {
		w.changes()
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
		w.changed = nil
	}
}

// changes tells the running subscriptions that the channels wanted have
// changed; w.mu is held.
func (w *waker) changes() {
	for _, ch := range w.changed {
		select {
		case ch <- struct{}{}:
		default: // one is pending: the subscription reads the set anew
		}
	}
}

// wanted returns the channels node's subscription should hear: the anchor,
// then each waited-for key's. Its Subscriber reads them to unsubscribe
// from the rest, so node's confirmation of a key no longer wanted is
// forgotten when it reads. One still wanted stays confirmed: a channel dropped and
// added again since the last read has not left the connection, which
// sends neither UNSUBSCRIBE nor SUBSCRIBE for it.
func (w *waker) wanted(node int, gen uint64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	bit := uint64(1) << node
	for key, nodes := range w.heard {
		if w.gens[node] != gen {
			break // a run that has ended: the current one reads for itself
		}
		if _, ok := w.channels[key]; !ok && nodes&bit != 0 {
			if nodes &^= bit; nodes == 0 {
				delete(w.heard, key)
			} else {
				w.heard[key] = nodes
			}
		}
	}
	out := make([]string, 0, 1+len(w.channels))
	out = append(out, w.prefix)
	for _, ch := range w.channels {
		out = append(out, ch)
	}
	return out
}

// start opens a subscription on every node that is a Subscriber; w.mu is
// held.
func (w *waker) start() {
	ctx, stop := context.WithCancel(context.Background())
	w.stop = stop
	w.changed = nil
	for _, n := range w.client.nodes {
		if s, ok := n.pool.(driver.Subscriber); ok {
			changed := make(chan struct{}, 1)
			w.changed = append(w.changed, changed)
			w.gens[n.index]++
			w.runs.Add(1)
			go w.subscribe(ctx, n.index, w.gens[n.index], s, changed)
		}
	}
}

// subscribe keeps node's subscription open until ctx ends, opening it again
// after a failure. gen is its run's number on node: a run that ends after
// the next one began (stopIdle, then register) leaves the newer run's
// confirmations as they are.
func (w *waker) subscribe(ctx context.Context, node int, gen uint64, s driver.Subscriber, changed <-chan struct{}) {
	defer w.runs.Done()
	bit := uint64(1) << node
	sub := &driver.Subscription{
		Channels: func() []string { return w.wanted(node, gen) },
		Changed:  changed,
		// A key's confirmation stands for an announcement: a release
		// before it reached no one.
		Ready: func(channel string) {
			if channel == w.prefix {
				w.mu.Lock()
				if w.gens[node] == gen { // not a run that has ended
					w.live.Or(bit)
				}
				w.mu.Unlock()
			} else if key, ok := strings.CutPrefix(channel, w.prefix); ok {
				w.confirmed(node, gen, key)
			}
		},
		Deliver: func(channel, _ string) {
			if key, ok := strings.CutPrefix(channel, w.prefix); ok && key != "" {
				w.deliver(node, key)
			}
		},
	}
	pause := subscribeRetryMin
	for {
		began := time.Now()
		s.Subscribe(ctx, sub)
		w.mu.Lock()
		if w.gens[node] == gen {
			w.live.And(^bit)
			for key, nodes := range w.heard {
				if nodes &^= bit; nodes == 0 {
					delete(w.heard, key)
				} else {
					w.heard[key] = nodes
				}
			}
		}
		w.mu.Unlock()
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

// confirmed records that node confirmed the subscription to key's channel,
// and passes it on to the key's acquisitions as the node's announcement of
// a release of key: one that came before the subscription was announced to
// no one. An Election's observer is not told: it registers before its
// first read, and a wake-up that came with the subscription would spend
// the one fresh read that an offer allows itself on an announcement
// (Observe), which a resignation just after needs.
//
// It is recorded even if no one waits for key any more: the subscription
// may not have read the drop yet, and if the key is wanted again before it
// does, the channel stays, and no confirmation comes again (wanted).
func (w *waker) confirmed(node int, gen uint64, key string) {
	w.mu.Lock()
	if w.gens[node] == gen { // a run that has ended leaves the bits to the current one
		w.heard[key] |= 1 << node
	}
	for _, wt := range w.waiting[key] {
		if wt.contends {
			wt.hint(node)
		}
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
		w.changed = nil
	}
	w.mu.Unlock()
	return w.runs.wait(limit)
}

// arm starts an attempt: announcements count from here on. It reports
// whether the wake-up that led to the attempt, if any, came from
// confirmations: the attempt is then a probe for a release that may have
// come before the key's subscription (confirmed).
func (wt *waiter) arm() (probe bool) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	probe = wt.probe
	wt.settled, wt.freed, wt.hinted, wt.free, wt.probe = false, 0, 0, 0, false
	select {
	case <-wt.wake:
	default:
	}
	return probe
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

// hint records node's confirmation of a subscription to one of wt's keys,
// which counts as an announcement (confirmed).
func (wt *waiter) hint(node int) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.hinted |= 1 << node
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
	wakes := func(freed uint64) bool {
		return freed&^wt.free != 0 && bits.OnesCount64(freed|wt.free) >= wt.need
	}
	if wakes(wt.freed | wt.hinted) {
		wt.probe = !wakes(wt.freed)
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

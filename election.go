package redlock

// Leader election on the quorum, in the spirit of etcd's concurrency.Election.
//
// A leadership is a fenced lock (docs/fencing.md) on the election's name,
// kept by the same extension loop as Do (keep, in do.go): its term is the
// lock's fencing token, so terms grow strictly in the order leaderships are
// granted, and a deposed leader's writes can be refused by term. Once
// elected, the leader publishes its term and value in a leader record next
// to the lock key on each node (scripts/elect_publish.lua), written only
// while that node's key holds the leader's token. A reader asks every node
// which leader it sees (scripts/elect_read.lua: the record, if the key still
// holds the token it names; no leader only if the node has no key at all;
// else that it cannot say) and believes only an answer that a majority of
// nodes gives (agree). docs/election.md has the safety argument.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

var (
	// ErrNoLeader reports that Leader found no leader that a majority of
	// nodes agrees on: a majority holds no key for the election, so that no
	// one leads; or, with Leader.Unknown set, the read cannot say who leads:
	// the nodes' answers are split (a hand-over in progress, nodes down), or
	// a majority holds a key without a leader record naming it (a leader
	// publishing its value, a plain Lock on the name).
	ErrNoLeader = errors.New("redlock: no leader")

	// ErrNotLeader reports a Resign by someone who is not the leader: an
	// Election that holds no leadership, or a Leadership already resigned.
	// A Leadership's Err wraps it once it has been resigned.
	ErrNotLeader = errors.New("redlock: not the leader")
)

// Defaults for the election options.
const (
	defaultElectionTTL     = 10 * time.Second
	defaultObserveInterval = 250 * time.Millisecond
)

var (
	//go:embed scripts/elect_publish.lua
	electPublishSource string
	electPublishScript = newScript(electPublishSource, 2)

	//go:embed scripts/elect_read.lua
	electReadSource string
	electReadScript = newScript(electReadSource, 2)
)

// An ElectionOption configures an Election. Options are checked by
// Client.Election, and a bad one is reported by every call of the Election.
type ElectionOption func(*Election)

// WithElectionTTL sets the ttl of the lock behind a leadership. The leader
// extends it every ttl/3 while it leads; if the leader dies, another
// candidate is elected at most about one ttl later. The default is 10s.
// It must exceed the clock drift allowance.
func WithElectionTTL(ttl time.Duration) ElectionOption {
	return func(e *Election) { e.ttl = ttl }
}

// WithObserveInterval sets how often Observe asks the nodes who leads. The
// default is 250ms. d must be positive.
func WithObserveInterval(d time.Duration) ElectionOption {
	return func(e *Election) { e.interval = d }
}

// An Election is one candidate's handle on the election called name: it
// campaigns, resigns, and reads who leads. Several processes, each with its
// own Election of the same name on the same nodes, compete to lead. An
// Election holds at most one leadership at a time. It is safe for concurrent
// use.
//
// The name is the lock key on the nodes, so it must not be used as a Lock
// key too. Each node also keeps, without a ttl, the key's fencing counter
// (FenceKey) and a small leader record next to it, in the same Redis Cluster
// slot.
//
// An election tolerates what the mutex tolerates: N − (N/2+1) crash-stop
// failures, nodes that stop answering or come back with their data. A node
// that restarts empty forgets the leader's key at once, so that a second
// leader can be elected beside a valid one; the restart rule of
// docs/safety.md (stay out longer than the ttl, or keep data across a
// crash) keeps it safe, and terms need the data kept, since fencing
// counters outlive every ttl (docs/election.md).
//
// A leadership lives in the process that won it: its proof is a random
// token kept in memory only, so a process that restarts cannot resume its
// term (there is no counterpart to etcd's ResumeElection). It campaigns
// again, and wins once its old key has expired, at most one ttl after the
// last extension, unless another candidate wins first; the new term is
// higher, so fenced resources refuse the old term's late writes.
// docs/election.md says why resuming by value or by a saved token would not
// be safe.
type Election struct {
	client   *Client
	name     string
	record   string // the leader record's key
	ttl      time.Duration
	interval time.Duration
	err      error // a bad name or option, returned by every call

	mu      sync.Mutex
	current *Leadership
}

// Election returns a handle on the election called name. It makes no
// network call; a bad name or option is reported, wrapping ErrInvalid, by
// every call of the Election.
func (c *Client) Election(name string, opts ...ElectionOption) *Election {
	e := &Election{client: c, name: name, ttl: defaultElectionTTL, interval: defaultObserveInterval}
	for _, opt := range opts {
		if opt == nil {
			e.err = invalid("nil election option")
			return e
		}
		opt(e)
	}
	switch {
	case c.usable() != nil:
		e.err = c.usable()
	case name == "":
		e.err = invalid("empty election name")
	case e.ttl <= 0 || truncateTTL(e.ttl) <= drift(truncateTTL(e.ttl), c.driftFactor):
		e.err = invalid("election ttl %v must exceed the clock drift allowance", e.ttl)
	case e.interval <= 0:
		e.err = invalid("observe interval %v must be positive", e.interval)
	}
	e.ttl = truncateTTL(e.ttl)
	if c.usable() == nil {
		e.record = leaderKey(c.keyPrefix + name)
	}
	return e
}

// leaderKey names the leader record of an election's lock key, in the key's
// Redis Cluster slot by the rule of fenceKey.
func leaderKey(key string) string {
	if hasHashTag(key) || strings.IndexByte(key, '}') >= 0 {
		return "redlock:leader:" + key
	}
	return "redlock:leader:{" + key + "}"
}

// usable checks what every call needs.
func (e *Election) usable(ctx context.Context) error {
	if e == nil || e.client == nil {
		return invalid("nil or zero *Election: make one with Client.Election")
	}
	if e.err != nil {
		return e.err
	}
	if ctx == nil {
		return invalid("nil context")
	}
	return nil
}

// open is usable for calls that a closed Client refuses: all but Resign.
func (e *Election) open(ctx context.Context) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	return e.client.closedErr()
}

// Name returns the election's name, which is its lock key.
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// Campaign blocks until this candidate leads the election, then returns the
// Leadership, with value published for Leader and Observe to read. Its term
// is a fencing token: it exceeds the term of every leadership granted
// before it, with or without WithFencing on the Client.
//
// Campaign retries as Lock does, without a limit on the tries: until it
// leads, ctx ends, the Client's retry strategy gives up, or the nodes refuse
// the commands themselves. It then returns Lock's error, wrapping
// ErrNotObtained (and ctx.Err() if ctx ended); every attempt has released
// what it acquired. It returns an error wrapping ErrInvalid, and sends
// nothing, for bad arguments or if this Election already leads.
//
// Once elected it publishes the value, waiting at most one node timeout; if
// the value reaches too few nodes by then (or ctx has ended), the leadership
// is returned all the same and the value is published again in the
// background until a majority has it. Until then Leader may report
// ErrNoLeader, never an earlier leader.
//
// The leadership is extended every ttl/3 in the background, independently of
// ctx, until Resign, until it is lost, or until the Client is closed; then
// Done is closed. Close resigns it at once: Err then wraps ErrClosed and
// ErrLockLost. A Campaign that waits wakes at once when the leader resigns
// (the engine's wake-up), and returns ErrClosed when the Client is closed;
// one whose attempt wins after Close began, or whose publishing of the
// value Close interrupts, releases the leadership and returns ErrClosed.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.open(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.current != nil && e.current.Err() == nil {
		e.mu.Unlock()
		return nil, invalid("election %q: this Election already leads; Resign first", e.name)
	}
	e.mu.Unlock()

	c := e.client
	// The acquisition stays counted among Close's calls until the
	// leadership is registered with Close, or released (handOff).
	hctx, h := withHandOff(ctx)
	l, err := c.lock(hctx, e.name, e.ttl, math.MaxInt, true) // fenced whatever the Client's options: terms are fencing tokens
	if err != nil {
		h.done(c)
		return nil, err
	}
	ld := &Leadership{election: e, lock: l, value: value, stop: make(chan struct{}), ended: make(chan struct{})}
	ld.ctx, ld.cancel = context.WithCancelCause(context.Background())
	h.won(c)
	remove, ok := c.onClose(ld.closeByClient)
	if !ok { // Close began after the lock was won: lead nothing
		ld.closeByClient()
		h.done(c)
		return nil, fmt.Errorf("%w: election %q: the client was closed as the leadership was won; it was released", ErrClosed, e.name)
	}
	h.done(c)
	ld.publish(ctx)
	go func() {
		defer remove() // Close resigns the leadership until its keys are let go
		ld.run()
		if ld.lost != nil && !errors.Is(ld.lost, ErrClosed) { // Close's closer releases it
			// Lost, not resigned: the nodes that kept the key (the
			// extensions that reached them pushed its expiry on) are freed
			// now, rather than at Resign, which may never come, or at the
			// ttl. Resign still returns the loss, and sends the release again.
			_ = ld.lock.unlock(context.Background(), 0)
		}
	}()
	if c.closed.Load() {
		// Close began while the record was being published, and has
		// resigned the leadership (closeByClient): a closed Client hands
		// out nothing, not even a leadership that has already ended.
		return nil, fmt.Errorf("%w: election %q: the client was closed as the leadership was won; it was released", ErrClosed, e.name)
	}

	e.mu.Lock()
	e.current = ld
	e.mu.Unlock()
	return ld, nil
}

// Resign gives up the leadership this Election holds: see Leadership.Resign.
// It returns an error wrapping ErrNotLeader if it holds none, or has
// already resigned and released it.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	ld := e.current
	e.mu.Unlock()
	if ld == nil || ld.lock == nil {
		return fmt.Errorf("%w: election %q: this Election holds no leadership", ErrNotLeader, e.name)
	}
	err := ld.Resign(ctx)
	e.mu.Lock()
	if e.current == ld && ld.isReleased() {
		e.current = nil
	}
	e.mu.Unlock()
	return err
}

func (ld *Leadership) isReleased() bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.released
}

// A Leader is who leads an election, as a majority of nodes saw it at one
// read: the leader's value and its term, and when the read began.
//
// Term 0 means no leader: a majority of nodes held no key for the
// election; or, with Unknown set, the read cannot say who leads: no answer
// had a majority (nodes down or slow, a hand-over in progress), or a
// majority held a key without a leader record naming it (a leader that has
// not published its value there yet). A read is
// never newer than its ReadAt: the nodes answered at some instant between
// ReadAt and its return, so time.Since(ReadAt) bounds its age. A leader's
// term may have ended since; a leader that acts on its own leadership uses
// its Leadership (Until, Done), not a Leader.
type Leader struct {
	Value   string
	Term    uint64
	ReadAt  time.Time // when the read began, on the Client's clock
	Unknown bool      // the read cannot say who leads (no answer had a majority, or a majority holds a key without its record); Value and Term are empty
}

// same reports whether l and o say the same thing, whenever they were read.
func (l Leader) same(o Leader) bool {
	return l.Value == o.Value && l.Term == o.Term && l.Unknown == o.Unknown
}

// Leader returns the current leader: the value and term that a majority of
// nodes reports. Each node counts a leader only while it still holds the
// leader's lock key, and a leader publishes only after it was granted, so
// Leader reports only leaders that Campaign elected; and while a leadership
// is valid, Leader reports no other, and never that no one leads
// (docs/election.md).
//
// If no leader has a majority, it returns an error wrapping ErrNoLeader,
// with the nodes' failures if any, and a Leader of term 0 that says which:
// a majority holds no key, so that no one leads, or (Unknown) the read
// cannot say: the leader has not yet published its value on a majority
// (a node that holds a key without its record counts here, never as "no
// leader"), a hand-over is under way, too many nodes failed to answer, or
// ctx ended first (the error then wraps ctx.Err() too, and says nothing of
// the nodes). Every Leader it returns
// has its ReadAt. Leader takes at most one node timeout, and returns as
// soon as a majority agrees or none can.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.open(ctx); err != nil {
		return Leader{}, err
	}
	return e.read(ctx)
}

// read asks every node which leader it sees. The Leader is Unknown when no
// answer had a majority; err wraps ErrNoLeader unless a majority agreed on
// a leader.
func (e *Election) read(ctx context.Context) (Leader, error) {
	ld, _, err := e.readDecided(ctx)
	return ld, err
}

func (e *Election) readDecided(ctx context.Context) (ld Leader, decided bool, err error) {
	c := e.client
	readAt := c.clock.Now()
	lane := laneOf(c.keyPrefix + e.name)
	s, ok, causes := agree(ctx, c, 0, func(ctx context.Context, n *node, deadline time.Time) (sight, error) {
		return n.readLeader(ctx, deadline, lane, c.keyPrefix+e.name, e.record)
	})
	switch {
	case !ok:
		return Leader{ReadAt: readAt, Unknown: true}, false, aggregate(fmt.Errorf("%w: election %q: no answer has a majority of the %d nodes",
			ErrNoLeader, e.name, len(c.nodes)), causes)
	case s.unnamed:
		// A majority holds a key whose record is not there (yet): someone
		// may lead, and the nodes cannot say who.
		return Leader{ReadAt: readAt, Unknown: true}, false, aggregate(fmt.Errorf("%w: election %q: a majority of nodes holds the key without a leader record naming its token",
			ErrNoLeader, e.name), causes)
	case s.term == 0:
		return Leader{ReadAt: readAt}, true, aggregate(fmt.Errorf("%w: election %q: a majority of nodes sees no leader",
			ErrNoLeader, e.name), causes)
	}
	return Leader{Value: s.value, Term: s.term, ReadAt: readAt}, true, nil
}

// Observe returns a channel that carries the election's leader each time
// what the nodes say changes: first what they say when Observe starts, then
// each change, as Leader would read it, every value with its ReadAt. A
// value of term 0 is no leader; one with Unknown set means that the read
// could not say who leads (as for Leader: a new leader shows so until its
// record is on a majority), reported once when it begins, not skipped and
// not hidden behind the last leader seen. A leader older (by term) than one already
// sent is skipped, so the terms sent never go back.
//
// When it reads. It reads at once whenever a release of the election's key
// is announced (a Resign, or a Campaign attempt that lost; the release
// announcements of WithWakeUp, on nodes whose driver is a
// driver.Subscriber), so a resignation shows as soon as a majority of nodes
// has announced it; and every observe interval (WithObserveInterval) in
// any case, which is what finds a new leader, a leader whose key expired,
// and every change on a Client without wake-up. The announcements are
// hints: each one only starts a read, which counts a majority as Leader
// does.
//
// How old a value can be. The channel is unbuffered. A value that the
// receiver has not taken within one observe interval of its read's return,
// or before a release is announced, is dropped, and the nodes are read
// again: a slow receiver gets a fresh read, never one made long before, nor
// one made before a resignation that has been announced. A value sent is therefore at most about one
// observe interval plus one node timeout old when it is received.
//
// The channel is closed once ctx ends or the Client is closed, and the
// goroutine behind it returns then, within a node timeout; a read that
// ctx's end cut short is not sent. With ctx already ended the channel is
// closed without a value. Bad arguments
// return an error wrapping ErrInvalid and no channel.
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if err := e.open(ctx); err != nil {
		return nil, err
	}
	c := e.client
	// A waiter on the key's releases: woken once a majority of nodes has
	// announced one (wake.go). nil without wake-up, or after Close.
	var wt *waiter
	if c.wake != nil {
		wt = c.wake.register([]string{c.keyPrefix + e.name}, c.quorum, false)
	}
	ch := make(chan Leader)
	go func() {
		defer close(ch)
		var woken <-chan struct{}
		if wt != nil {
			defer c.wake.unregister(wt)
			woken = wt.wake
		}
		var last Leader
		var highest uint64
		first := true
		rewoken := false // the last offer ended for an announcement
		wait := time.NewTimer(0)
		defer wait.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.closing:
				return
			case <-wait.C:
			case <-woken:
			}
			if wt != nil {
				// Announcements count from before the read: one that
				// comes while it runs wakes the next read at once.
				wt.arm()
				wt.settle(0)
			}
			cur, _, _ := e.readDecided(ctx)
			// A read that ctx's end cut short says nothing of the nodes
			// (every node "failed"): it is not sent as Unknown.
			if ctx.Err() != nil {
				return
			}
			wait.Reset(e.interval)
			if !(first || !cur.same(last)) || (cur.Term != 0 && cur.Term < highest) {
				continue
			}
			// Offer it for one interval from when the read returned; then
			// read again rather than hand out an old read. (Counted from
			// the return, not from ReadAt: a read slower than the interval,
			// a node timing out, is still the freshest there is.)
			// A release announced meanwhile also makes it read again, so
			// that a resignation is not hidden behind the offered value;
			// but not twice in a row, so that a stream of announcements
			// cannot keep every value from being sent.
			stale := time.NewTimer(e.interval)
			offerWoken := woken
			if rewoken {
				offerWoken = nil
			}
			rewoken = false
			select {
			case ch <- cur:
				stale.Stop()
				first, last, highest = false, cur, max(highest, cur.Term)
			case <-stale.C:
				wait.Reset(0) // (since Go 1.23, Reset drops a pending tick)
			case <-offerWoken:
				stale.Stop()
				rewoken = true
				wait.Reset(0)
			case <-ctx.Done():
				stale.Stop()
				return
			case <-c.closing:
				stale.Stop()
				return
			}
		}
	}()
	return ch, nil
}

// A Leadership is one term as leader of an election, from Campaign. It is
// kept by extending its lock every ttl/3 until Resign, or until it is lost:
// its validity ran out before an extension succeeded, or a majority of
// nodes refused one. Then Done is closed and Err says why. Its methods are
// safe for concurrent use. The nil *Leadership of a failed Campaign leads
// nothing: Done is closed, and Resign returns an error wrapping ErrInvalid.
//
// When the leadership is lost, its release is sent at once to every node,
// to free those that still hold the key: the next leader need not wait for
// them to expire.
//
// Leading is exclusive only until Until, as for a Lock: a leader that may
// have been paused must check Until (or Done) before it acts, and should
// send its Term with every write so that a resource can refuse a deposed
// leader's (package fence).
type Leadership struct {
	election *Election
	lock     *Lock
	value    string // guarded by mu: Proclaim changes it

	ctx    context.Context // cancelled with the cause when the leadership ends
	cancel context.CancelCauseFunc
	stop   chan struct{} // closed by Resign: stop extending and publishing
	ended  chan struct{} // closed once run has returned
	lost   error         // how keep ended: nil, or wrapping ErrLockLost; set before ended is closed

	published atomic.Bool // a majority stored the leader record

	mu       sync.Mutex
	resigned bool // Resign has begun: the leadership has ended
	released bool // a Resign has released the lock, or found it lost
}

// errResigned is the cause of a resigned leadership's end.
var errResigned = fmt.Errorf("%w: resigned", ErrNotLeader)

// closeByClient is what Client.Close does to a leadership: it ends it as
// Resign does, with a cause wrapping ErrClosed and ErrLockLost, and
// releases the lock at once, without waiting for an extension in flight
// (the release overtakes it: Lock.unlock), so that Close keeps its bound.
func (ld *Leadership) closeByClient() {
	ld.mu.Lock()
	first := !ld.resigned
	ld.resigned = true
	ld.mu.Unlock()
	if !first {
		return // a Resign is under way, and releases
	}
	ld.cancel(errClosedWhileHeld)
	close(ld.stop)
	err := ld.lock.unlock(context.Background(), 0)
	if err == nil || errors.Is(err, ErrLockLost) || errors.Is(err, ErrExpired) || errors.Is(err, ErrReleased) {
		ld.mu.Lock()
		ld.released = true
		ld.mu.Unlock()
	}
}

// run keeps the leadership (do.go's keep) and publishes the leader record
// again: after each retry delay until a majority has it, then every ttl/3
// while it leads, so that the record is wherever the key is. Extend
// re-seeds the key on a node that restarted empty, but not the record;
// without the repeat, that node, and with enough of them a majority, could
// not name the leader (Unknown) for the whole term.
func (ld *Leadership) run() {
	defer close(ld.ended)
	c := ld.election.client
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			pause := time.NewTimer(ld.election.ttl / 3)
			if !ld.published.Load() {
				pause.Reset(c.retryDelay())
			}
			select {
			case <-ld.ctx.Done():
				pause.Stop()
				return
			case <-pause.C:
			}
			ld.publish(ld.ctx)
		}
	})
	ld.lost = c.keep(ld.lock, ld.election.ttl, ld.stop, ld.cancel).err
	ld.cancel(ld.lost) // keep has cancelled with the cause already, unless Resign did first
	wg.Wait()
}

// publish stores the leader record on every node that still holds the
// leader's key, and reports whether a majority did, with the round's tally
// (its causes, if it was lost). It takes at most one node timeout.
func (ld *Leadership) publish(ctx context.Context) (bool, tally) {
	c, l := ld.election.client, ld.lock
	ld.mu.Lock()
	value := any(ld.value)
	ld.mu.Unlock()
	token, term := any(l.token), any(int64(l.fence))
	key, record := l.args.key, any(ld.election.record) // the key on the nodes, with the prefix
	won, t := c.fanout(ctx, round{
		key: l.key, kind: observe.OpPublish, id: c.newID(),
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			reply, err := n.eval(ctx, deadline, l.args.lane, &electPublishScript, key, record, token, term, value)
			return reply == int64(1), err
		},
	})
	if won {
		ld.published.Store(true)
	}
	return won, t
}

// Proclaim changes the value the leader publishes, keeping its term, as
// etcd's Election.Proclaim does: Leader and Observe then read the new value
// with the same term. It writes the leader record on every node that holds
// the leader's key, within one node timeout, and returns nil once a
// majority has the new value.
//
// If fewer nodes took it in time (or ctx ended), it returns an error
// wrapping ErrNotObtained, and the new value is published again in the
// background until a majority has it; meanwhile Leader may report the old
// value or ErrNoLeader, never another leader. Once the leadership has
// ended it returns Err's error and sends nothing; for a nil context or the
// nil *Leadership, an error wrapping ErrInvalid. A publish round that was
// already in flight with the old value may land after the new one on a
// node; the next publish, within ttl/3, puts the new value back there.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if ld == nil {
		return errNilLeadership
	}
	if ctx == nil {
		return invalid("nil context")
	}
	if err := ld.Err(); err != nil {
		return err
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	ld.published.Store(false) // the background loop republishes at the retry pace until a majority has it
	if won, t := ld.publish(ctx); !won {
		// t's causes have ctx's error if ctx ended (fanout adds it).
		return aggregate(fmt.Errorf("%w: election %q: the new value reached fewer than a majority of nodes; it is published again in the background",
			ErrNotObtained, ld.election.name), t.causes)
	}
	return nil
}

// Term returns the leadership's term: its fencing token, greater than the
// term of every leadership of the election granted before it. Send it with
// every write the leader makes. It is 0 for the nil *Leadership.
func (ld *Leadership) Term() uint64 {
	if ld == nil || ld.lock == nil {
		return 0
	}
	return ld.lock.Token()
}

// Value returns the value this leader publishes: the one it campaigned
// with, or the latest given to Proclaim.
func (ld *Leadership) Value() string {
	if ld == nil || ld.lock == nil {
		return ""
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Until returns the end of the leadership's validity on the client's clock,
// as Lock.Until does: each extension moves it on. It is the zero Time once
// Resign has begun.
func (ld *Leadership) Until() time.Time {
	if ld == nil || ld.lock == nil {
		return time.Time{}
	}
	ld.mu.Lock()
	resigned := ld.resigned
	ld.mu.Unlock()
	if resigned { // Resign may still wait for an extension in flight
		return time.Time{}
	}
	return ld.lock.Until()
}

// Done returns a channel that is closed when the leadership ends: it was
// lost, or Resign began.
func (ld *Leadership) Done() <-chan struct{} {
	if ld == nil || ld.lock == nil {
		return closedChan
	}
	return ld.ctx.Done()
}

// Context returns a context that is cancelled when the leadership ends, with
// Err's error as its cause (context.Cause): the context to run the leader's
// work with.
func (ld *Leadership) Context() context.Context {
	if ld == nil || ld.lock == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errNilLeadership)
		return ctx
	}
	return ld.ctx
}

// Err returns nil while the leadership lasts. Once it has ended, it returns
// why: an error wrapping ErrLockLost if it was lost, or ErrNotLeader if it
// was resigned.
func (ld *Leadership) Err() error {
	if ld == nil || ld.lock == nil {
		return errNilLeadership
	}
	select {
	case <-ld.ctx.Done():
		return context.Cause(ld.ctx)
	default:
		return nil
	}
}

var errNilLeadership = invalid("nil *Leadership: the Campaign that returned it failed")

// Resign ends the leadership: Done is closed at once, extending stops, and
// the lock is released, so that another candidate can be elected without
// waiting for the ttl. It returns, on each path:
//   - nil: the leadership lasted until Resign and a majority released it.
//   - an error wrapping ErrLockLost: it had been lost before Resign (Err
//     said so already); the release, sent when it was lost, is sent again.
//   - Lock.Unlock's error otherwise: ErrExpired if validity ran out just
//     before Resign, ErrLockLost if the nodes show it was lost, or, if too
//     few nodes answered, the nodes' failures (and ctx.Err() if ctx ended
//     first). Only in that last case has the lock not been let go: Resign
//     may be called again to retry the release, or the key expires at its
//     ttl.
//   - an error wrapping ErrNotLeader once a Resign has released it, and
//     ErrInvalid for a nil context or the nil *Leadership; nothing is sent.
//
// Resign releases at once, overtaking an extension in flight (it waits
// neither for it nor for a re-seed it would make), and returns once the
// release and the background extender have ended: one node timeout, or
// two with one node, whose round in flight ends only at its node deadline.
// A Close that comes meanwhile leaves the release to Resign and waits for
// it.
func (ld *Leadership) Resign(ctx context.Context) error {
	if ld == nil || ld.lock == nil {
		return errNilLeadership
	}
	if ctx == nil {
		return invalid("nil context")
	}
	ld.mu.Lock()
	if ld.released {
		ld.mu.Unlock()
		return fmt.Errorf("%w: election %q: term %d was already resigned", ErrNotLeader, ld.election.name, ld.Term())
	}
	first := !ld.resigned
	ld.resigned = true
	// Counted among the calls that Close waits for, until the release has
	// been sent and answered: Close, finding resigned set, leaves the
	// release to this Resign (closeByClient), and must not return before it.
	c := ld.election.client
	c.calls.Add(1)
	ld.mu.Unlock()
	counted := true
	defer func() {
		if counted {
			c.calls.Done()
		}
	}()

	if first {
		ld.cancel(errResigned)
		close(ld.stop)
	}
	// The release goes out at once, as Close's does (closeByClient): it
	// overtakes an extension in flight (Lock.unlock). Waiting for the
	// keeper first would make a Close called from the keeper's own
	// Observer event wait for itself, through this Resign's count.
	err := ld.lock.unlockThen(ctx, func() { counted = false; c.calls.Done() })
	<-ld.ended // the keeper and the publisher have returned
	// A loss counts only if it came before this Resign: the keeper then
	// cancelled ld.ctx first, with the loss as its cause. One that the
	// keeper saw after (Close, or a refused extension, while it wound
	// down) came after the leadership had ended; the release's own result
	// says the rest.
	if cause := context.Cause(ld.ctx); errors.Is(cause, ErrLockLost) {
		err = cause
	}
	if err == nil || errors.Is(err, ErrLockLost) || errors.Is(err, ErrExpired) {
		ld.mu.Lock()
		ld.released = true
		ld.mu.Unlock()
	}
	return err
}

// A sight is the leader one node sees; the zero sight is none: the node
// has no lock key. unnamed is a node that has the key but no record naming
// its token, so that it cannot say who leads, only that someone holds the
// key there.
type sight struct {
	term    uint64
	value   string
	unnamed bool
}

// readLeader runs the read script: the leader this node sees, if any.
func (n *node) readLeader(ctx context.Context, deadline time.Time, lane int, key, record string) (sight, error) {
	reply, err := n.eval(ctx, deadline, lane, &electReadScript, key, record)
	if err != nil || reply == nil {
		return sight{}, err
	}
	if reply == int64(0) {
		return sight{unnamed: true}, nil
	}
	if arr, ok := reply.([]any); ok && len(arr) == 2 {
		termText, ok1 := replyText(arr[0])
		value, ok2 := replyText(arr[1])
		term, perr := strconv.ParseUint(termText, 10, 64)
		if ok1 && ok2 && perr == nil && term > 0 {
			return sight{term: term, value: value}, nil
		}
	}
	// A reply no Redis sends for this script fails the node, rather than
	// counting as a leader or as none.
	return sight{}, n.fail(fmt.Errorf("redlock: unexpected reply %v to the leader read", reply), deadline)
}

// replyText returns a bulk string inside an array reply as a string.
func replyText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	}
	return "", false
}

// agree sends op to every node at once and returns the answer that the
// quorum of them gave (need of them, if need > 0), which it believes; no
// other answer counts.
//
//   - Each node has until the deadline, now plus the node timeout or ctx's
//     deadline if sooner, as in fanout; one silent by then counts as failed
//     with ErrNodeTimeout.
//   - It returns ok as soon as one answer has the quorum, without waiting
//     for the other nodes.
//   - It returns not ok as soon as no answer can reach the quorum any more:
//     the nodes yet to answer are too few to lift the most common answer to
//     it. Failures are among causes, as NodeErrors.
//   - It returns not ok when ctx ends, with ctx.Err() among the causes.
//   - Node calls still running when it returns go on until the deadline,
//     detached from ctx's cancellation as in fanout; their answers are
//     dropped.
//
// Two answers that each have a majority would need a node that gave both, so
// at most one answer can be believed.
func agree[T comparable](ctx context.Context, c *Client, need int, op func(ctx context.Context, n *node, deadline time.Time) (T, error)) (answer T, ok bool, causes []error) {
	var zero T
	quorum := c.quorum
	if need > 0 {
		quorum = need
	}
	if err := ctx.Err(); err != nil {
		return zero, false, []error{err}
	}
	n := len(c.nodes)
	deadline := c.nodeDeadline(ctx)
	// Ended by the last op to return, or at the deadline (a field, so that
	// vet sees it is not lost: the node goroutines call it).
	var ops struct{ cancel context.CancelFunc }
	var opCtx context.Context
	opCtx, ops.cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
	type reply struct {
		node int
		v    T
		err  error
	}
	replies := make(chan reply, n)
	var running atomic.Int32
	running.Store(int32(n))
	c.calls.Add(n)
	for _, nd := range c.nodes {
		go func() {
			defer c.calls.Done()
			v, err := op(opCtx, nd, deadline)
			replies <- reply{node: nd.index, v: v, err: err}
			if running.Add(-1) == 0 {
				ops.cancel() // after the reply: the loop below drains it
			}
		}()
	}

	counts := make(map[T]int, n)
	answered := make([]bool, n)
	best, pending := 0, n
	count := func(r reply) bool {
		answered[r.node] = true
		pending--
		if r.err != nil {
			causes = append(causes, r.err)
			return false
		}
		counts[r.v]++
		best = max(best, counts[r.v])
		return counts[r.v] >= quorum
	}
	for pending > 0 && best+pending >= quorum {
		select {
		case r := <-replies:
			if count(r) {
				return r.v, true, causes
			}
		case <-opCtx.Done():
			// The deadline passed, or every node answered: count what was
			// sent, then the silent nodes as timed out.
			for len(replies) > 0 {
				if r := <-replies; count(r) {
					return r.v, true, causes
				}
			}
			for i, done := range answered {
				if !done {
					causes = append(causes, c.nodes[i].nodeError(ErrNodeTimeout))
				}
			}
			pending = 0
		case <-ctx.Done():
			causes = append(causes, ctx.Err())
			return zero, false, causes
		}
	}
	if err := ctxEnded(ctx); err != nil {
		causes = append(causes, err)
	}
	return zero, false, causes
}

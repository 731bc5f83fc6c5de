package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// The counting semaphore: holders whose weights add up to at most K at once,
// on N nodes.
//
// Each node keeps a sorted set of holders ("weight:token") scored by their
// expiry on the node's own clock, and admits a holder only while the live
// holders' weights and its own add up to at most K
// (scripts/semaphore_*.lua). A permit is granted when q nodes admitted it
// within the validity window, q being semQuorum(N, K), which for K > 1 is
// more than a majority. docs/semaphore.md has the derivation and the safety
// argument, which holds for weights as it does for unit permits.

var (
	//go:embed scripts/semaphore_acquire.lua
	semAcquireSource string
	semAcquireScript = newScript(semAcquireSource, 1)

	//go:embed scripts/semaphore_extend.lua
	semExtendSource string
	semExtendScript = newScript(semExtendSource, 1)

	//go:embed scripts/semaphore_release.lua
	semReleaseSource string
	semReleaseScript = newScript(semReleaseSource, 1)
)

// semQuorum is how many of n nodes must admit a token for a permit of a
// K-permit semaphore: ⌊K·n/(K+1)⌋ + 1. Each node admits at most K tokens, so
// K+1 holders of q nodes each would need (K+1)·q node slots; only K·n exist,
// and (K+1)·q > K·n is the least q that makes that impossible. For K = 1 it
// is the majority. For K ≥ n−1 it is n: every node, no fault tolerance.
//
// With weights the count is the same: a node admits holders weighing K in
// all, so permits weighing W in all, each on q nodes, use W·q ≤ K·n node
// slots, and W ≥ K+1 is again impossible (docs/semaphore.md).
func semQuorum(n, k int) int {
	if k >= n-1 {
		return n // also keeps k·n from overflowing
	}
	return k*n/(k+1) + 1
}

// SemaphoreKey returns the name of the sorted set that the semaphore on key
// keeps on every node, for operators' tools and clean-up scripts:
// "redlock:sem:{key}", or with key's own hash tag if it has one (the rule of
// RWNames). It never equals a mutex's key, an RWMutex's or an Election's,
// so a Lock, an RWMutex or an Election on the same name is a different lock
// on different keys: neither waits for the other, nor fails with WRONGTYPE.
func SemaphoreKey(key string) string { return slotName("redlock:sem:", key) }

// A Semaphore admits holders of its key whose weights add up to at most
// Permits at once, across the Client's nodes. Each of its permits weighs
// Weight (1 unless made WithWeight), as x/sync/semaphore's Acquire(ctx, n)
// takes n. Make it with Client.Semaphore. It holds no state of its own
// beyond its configuration: it is safe for concurrent use, and any number of
// Semaphore values for the same key and permits, in any process and of any
// weights, share the same permits. Every holder must use the same permit
// count for a key; a holder that uses a larger one may exceed the smaller.
// The nil or zero Semaphore is not usable: its calls return an error
// wrapping ErrInvalid.
type Semaphore struct {
	client  *Client
	key     string
	permits int
	weight  int // what each of its permits counts for, 1 to permits
	quorum  int // nodes that must admit a token (semQuorum)
}

// A SemaphoreOption configures a Semaphore.
type SemaphoreOption func(*semaphoreConfig)

type semaphoreConfig struct {
	noFaultTolerance bool
	weight           int
	weighted         bool // WithWeight was given; otherwise the weight is 1
}

// WithWeight makes every permit of the semaphore count for n of its K
// permits, as x/sync/semaphore's Acquire(ctx, n) does: Acquire waits until
// n are free, and the permit's Unlock gives the n back at once (there is no
// Release: a permit is a *Lock). n must be from 1 to K;
// Client.Semaphore refuses any other n with ErrInvalid. The default is 1.
//
// The weight belongs to the Semaphore value rather than to each call, so
// that Acquire, TryAcquire and Do have one form whatever the weight. A
// Semaphore makes no network call and holds no state, so a caller whose
// weights vary makes one per weight (or per call); Semaphores of different
// weights on the same key and permits share the same K. A holder of weight n
// waits while fewer than n permits are free, however long smaller holders
// keep coming: there is no queue (docs/semaphore.md).
func WithWeight(n int) SemaphoreOption {
	return func(c *semaphoreConfig) { c.weight, c.weighted = n, true }
}

// AllowNoFaultTolerance accepts a semaphore whose quorum is every node: K ≥
// N−1 permits on N > 1 nodes. Such a semaphore is safe, but one node that is
// down or slow stops every acquisition and extension. Without this option,
// Client.Semaphore refuses it with ErrInvalid.
func AllowNoFaultTolerance() SemaphoreOption {
	return func(c *semaphoreConfig) { c.noFaultTolerance = true }
}

// maxPermits is the most permits a semaphore may have: the acquire script
// adds weights in Lua numbers, doubles, which count exactly only to 2^53,
// and compares the permits in use plus a weight, up to twice K, with K.
const maxPermits = 1 << 52

// Semaphore returns the semaphore of key with the given number of permits
// on the Client's nodes. It makes no network call. It returns an error
// wrapping ErrInvalid, and no Semaphore, for a nil Client, an empty key,
// permits < 1 or above 2^52, a nil option, a weight outside 1 to permits, or a quorum of every one of N > 1 nodes (K ≥
// N−1: on 3 nodes every K ≥ 2, on 5 every K ≥ 4) without
// AllowNoFaultTolerance; the error says how many nodes would tolerate one
// failure.
//
// The semaphore keeps a sorted set named SemaphoreKey(key) on each node (with
// the Client's key prefix inside it), apart from the keys of a mutex, an
// RWMutex or an Election on the same key.
func (c *Client) Semaphore(key string, permits int, opts ...SemaphoreOption) (*Semaphore, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	var cfg semaphoreConfig
	for _, opt := range opts {
		if opt == nil {
			return nil, invalid("nil semaphore option")
		}
		opt(&cfg)
	}
	n := len(c.nodes)
	switch {
	case key == "":
		return nil, invalid("empty key")
	case permits < 1:
		return nil, invalid("semaphore permits %d must be at least 1", permits)
	case int64(permits) > maxPermits:
		return nil, invalid("semaphore permits %d exceed 2^52: the scripts add weights up to twice K in Lua numbers, doubles, exact only to 2^53", permits)
	case !cfg.weighted:
		cfg.weight = 1
	case cfg.weight < 1 || cfg.weight > permits:
		return nil, invalid("semaphore weight %d must be from 1 to the %d permits", cfg.weight, permits)
	}
	s := &Semaphore{client: c, key: key, permits: permits, weight: cfg.weight, quorum: semQuorum(n, permits)}
	if s.quorum == n && n > 1 && !cfg.noFaultTolerance {
		return nil, invalid("a semaphore of %d permits on %d nodes needs every node (quorum %d), so one failed node stops it; use more nodes (at least %d tolerate one failure) or AllowNoFaultTolerance",
			permits, n, s.quorum, permits+2)
	}
	return s, nil
}

// Key returns the semaphore's key, as given to Client.Semaphore.
func (s *Semaphore) Key() string {
	if s == nil {
		return ""
	}
	return s.key
}

// Permits returns K, the number of permits.
func (s *Semaphore) Permits() int {
	if s == nil {
		return 0
	}
	return s.permits
}

// Weight returns how many of the K permits each of its permits counts for,
// as set WithWeight (1 by default), or 0 for the nil Semaphore.
func (s *Semaphore) Weight() int {
	if s == nil {
		return 0
	}
	return s.weight
}

// Quorum returns how many nodes must admit a permit: ⌊K·N/(K+1)⌋ + 1 for K
// permits on N nodes, or 0 for the nil Semaphore.
func (s *Semaphore) Quorum() int {
	if s == nil {
		return 0
	}
	return s.quorum
}

// FaultTolerance returns how many nodes may fail while permits are still
// granted, N − Quorum, or 0 for the nil Semaphore.
//
// The failures it counts are crash-stop: a node that stops answering, or
// comes back with its data. A node that restarts empty is another fault,
// one that this number does not cover: it forgets the tokens it admitted,
// and may admit new holders in their slots while the old permits are still
// valid, so that even one such restart can break the bound of K at once
// (with K=2 on N=7, three valid permits after one restart), as it can break
// the mutex's exclusion. What keeps it safe is the restart rule of
// docs/safety.md: a node that lost its data stays out of service for at
// least the longest ttl in use (plus the drift allowance), or keeps its data
// across a crash (appendonly with appendfsync always).
func (s *Semaphore) FaultTolerance() int {
	if s == nil || s.client == nil {
		return 0
	}
	return len(s.client.nodes) - s.quorum
}

// Acquire takes a permit of the semaphore's Weight for ttl: it is admitted
// when the live permits' weights and its own add up to at most K. It
// retries after a pause as Client.Lock does (WithTries, WithRetryDelay, WithRetryStrategy) until it holds a
// permit, the tries run out, the strategy gives up, ctx ends, or the Client
// is closed (ErrClosed). While it waits, a release of a permit wakes it for
// an extra attempt at once, as for Lock (the engine: engine.go).
//
// The permit is a *Lock, as an RWMutex's holds are: its token admitted by
// a quorum of nodes. Until, Done, Held, Margin, Extend and Unlock act as
// they do for a mutex's lock, with the semaphore's quorum in place of the
// majority; Unlock gives the permit back, and ErrLockLost from it or from
// Extend means the permit may not have been one of at most K. Its Token is
// 0: permits are shared by up to K holders, so a token that orders them
// would not say which writes to refuse; a resource that needs exclusion
// uses a mutex WithFencing.
//
// On success the permit is valid until its Until. On failure it returns
// an error wrapping ErrNotObtained with the per-node causes, plus ctx.Err()
// if ctx ended; every attempt has removed its token from the nodes that may
// hold it. Bad arguments or an impossible configuration return an error
// wrapping ErrInvalid and make no network call. Each attempt takes at most
// one node timeout, or two when it fails and must be undone.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if s == nil || s.client == nil {
		return nil, errNilSemaphore
	}
	return s.acquire(ctx, ttl, s.client.tries)
}

// TryAcquire makes exactly one attempt to take a permit for ttl; see
// Acquire for what happens on each path.
//
// A permit of weight n > 1 is refused while fewer than n permits are free,
// even if holders of smaller weight are being admitted around it: TryAcquire
// does not queue, and Acquire's retries do not reserve (docs/semaphore.md).
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return s.acquire(ctx, ttl, 1)
}

func (s *Semaphore) acquire(ctx context.Context, ttl time.Duration, tries int) (*Lock, error) {
	if s == nil || s.client == nil {
		return nil, errNilSemaphore
	}
	c := s.client
	if err := c.usable(); err != nil {
		return nil, err
	}
	ttl, err := c.check(ctx, s.key, ttl)
	if err != nil {
		return nil, err
	}
	if err := c.closedErr(); err != nil {
		return nil, err
	}
	// The engine's loop (acquireLoop) with the semaphore's attempt and
	// quorum; a release of the key announces that a slot is free.
	var won *Lock
	_, err = c.acquireLoop(ctx, &acquisition{
		key: s.key, wake: []string{SemaphoreKey(c.keyPrefix + s.key)}, need: s.quorum, tries: tries,
		attempt: func(ctx context.Context, a attemptInfo) (*Lock, uint64, error) {
			p, held, err := s.attempt(ctx, ttl, a.id)
			if err != nil {
				return nil, held, err
			}
			won = p
			return p, 0, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return won, nil
}

// attempt is one acquisition: the mutex's steps 1 to 4 with the
// semaphore's script and quorum.
func (s *Semaphore) attempt(ctx context.Context, ttl time.Duration, id uint64) (*Lock, uint64, error) {
	c := s.client
	token, err := c.attemptToken()
	if err != nil {
		return nil, 0, err
	}
	// The set's member carries the weight, so that each node can add up
	// its holders' weights; the caller's token stays the permit's Value.
	member := strconv.Itoa(s.weight) + ":" + token
	p := &Lock{client: c, key: s.key, token: token, ops: &semHoldOps, need: s.quorum, permits: s.permits,
		args: newCmdArgs(SemaphoreKey(c.keyPrefix+s.key), member, ttl, c.channel)}
	args, permits := &p.args, int64(s.permits)
	start := c.clock.Now() // step 3: elapsed time counts from before the first send
	until := validUntil(start, ttl, c.driftFactor)
	args.unsent.Store(1<<len(c.nodes) - 1) // no command has entered a pipe yet
	if c.obs != nil {
		args.masks.report = func() { c.reportSettled(ctx, p, observe.OpAcquire, id, &args.masks) }
	}
	// The nodes on which the token was already a member: a token function
	// that repeats itself. Their member is another holder's, so the undo
	// leaves them alone, and the attempt is lost even if a quorum admitted
	// it, because its Unlock would remove the other holder's member too.
	// (A repeat that only a straggler reports, after the grant, is not
	// seen; a quorum admitted the token fresh, and any two quora share a
	// node, so the other holder had lost its own quorum by then.)
	var repeated atomic.Uint64
	undo := semRemoveOp(p)
	won, t := c.fanout(ctx, round{
		need: s.quorum,
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			reply, err := semAdmit(p, ctx, n, deadline, permits, int64(s.weight))
			switch {
			case err != nil || reply == int64(0) || reply == int64(1):
			case reply == int64(2):
				repeated.Or(1 << n.index)
			default:
				// A reply no Redis sends fails the node, so that a lost
				// round removes the token from it.
				return false, n.fail(fmt.Errorf("redlock: unexpected reply %v to the semaphore's acquire", reply), deadline)
			}
			return reply == int64(1), err
		},
		undo: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			if repeated.Load()&(1<<n.index) != 0 {
				return true, nil
			}
			return undo(ctx, n, deadline)
		},
		valid: func() bool { return repeated.Load() == 0 && c.clock.Now().Before(until) },
		// An Unlock that overtakes an admission in flight undoes it.
		overtaken: p,
		// Node events for an Observer; the engine reports the call's.
		kind: observe.OpAcquire, key: s.key, id: id, masks: &args.masks,
	})
	if !won {
		if r := repeated.Load(); r != 0 {
			return nil, 0, &tokenError{fmt.Errorf("token %q is already a holder's on %d of %d nodes: the token function must return a new token for every attempt (WithTokenFunc)",
				token, bits.OnesCount64(r), len(c.nodes))}
		}
		return nil, args.masks.agreed.Load(), t.err(ErrNotObtained)
	}
	p.held.Store(&args.masks)
	c.settleWon(&args.masks)
	if c.obs != nil {
		p.granted, p.id = time.Now(), id
	}
	p.until = until
	return p, 0, nil
}

// semAdmit sends the acquire script for permit p to n: by EVALSHA, and by EVAL if the node
// has not cached it. It keeps the bookkeeping of round.overtaken exact: the
// node's bit in unsent is cleared when the EVALSHA enters the pipe, set again
// when NOSCRIPT means the script must be resent, and cleared when the EVAL
// enters the pipe; and if the permit was let go before the resend, a
// removal may have gone ahead of it, so the node counts as overtaken. (With
// seq-cst atomics, either letGo reads the bit set again, or this reads
// letGone set.) Unlike evalMarking, a node whose script ran before any
// release is never undone on the strength of the fallback alone.
func semAdmit(p *Lock, ctx context.Context, n *node, deadline time.Time, permits, weight int64) (any, error) {
	a, s, bit := &p.args, &semAcquireScript, uint64(1)<<n.index
	reply, err := n.send(ctx, deadline, a.lane, &a.unsent, "EVALSHA", 2, s.keys, s.hashArg, s.keysArg, a.key, a.token, a.ttl, permits, weight)
	if replyCode(err) != "NOSCRIPT" {
		return reply, err
	}
	a.unsent.Or(bit)
	if p.letGone.Load() {
		p.overtaken.Or(bit)
	}
	return n.send(ctx, deadline, a.lane, &a.unsent, "EVAL", 2, s.keys, s.srcArg, s.keysArg, a.key, a.token, a.ttl, permits, weight)
}

// Do takes a permit for ttl as Acquire does, runs fn while holding it, and
// releases it when fn returns; fn finds the permit with HeldLock. While
// fn runs, the permit is extended every ttl/3, and fn's context is
// cancelled with a cause wrapping ErrLockLost the moment the permit can no
// longer be proven held. Every path is as for Client.Do, with the permit in
// place of the lock.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error) error {
	if s == nil || s.client == nil {
		return errNilSemaphore
	}
	return s.client.hold(ctx, s.key, ttl, func(ctx context.Context) (*Lock, error) { return s.Acquire(ctx, ttl) }, fn)
}

// semRemoveOp returns the node operation that removes permit p's token:
// the undo of a lost acquisition.
func semRemoveOp(p *Lock) nodeOp {
	args := &p.args
	return func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
		_, err := n.eval(ctx, deadline, args.lane, &semReleaseScript, args.key, args.token, args.channel)
		return err == nil, err
	}
}

// semHoldOps hold a permit's token in the semaphore's set: the engine's
// keep and release (Lock.extend, Lock.unlock) with the semaphore's scripts.
var semHoldOps = holdOps{
	extend: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		reply, err := n.eval(ctx, deadline, a.lane, &semExtendScript, a.key, a.token, a.ttl)
		return reply == int64(1), err
	},
	releaseOwned: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		reply, err := n.eval(ctx, deadline, a.lane, &semReleaseScript, a.key, a.token, a.channel)
		return reply == int64(1), err
	},
}

// errNilSemaphore is what a nil *Semaphore's calls return.
var errNilSemaphore = invalid("nil or zero *Semaphore: make one with Client.Semaphore")

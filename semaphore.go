package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// The counting semaphore: at most K holders of a key at once, on N nodes.
//
// Each node keeps a sorted set of holder tokens scored by their expiry on the
// node's own clock, and admits a token only while fewer than K live tokens
// are in it (scripts/semaphore_*.lua). A permit is granted when q nodes
// admitted its token within the validity window, q being semQuorum(N, K),
// which for K > 1 is more than a majority. docs/semaphore.md has the
// derivation and the safety argument.

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

// A Semaphore admits at most Permits holders of its key at once, across the
// Client's nodes. Make it with Client.Semaphore. It holds no state of its
// own beyond its configuration: it is safe for concurrent use, and any
// number of Semaphore values for the same key and permits, in any process,
// share the same permits. Every holder must use the same permit count for a
// key; a holder that uses a larger one may exceed the smaller. The nil or
// zero Semaphore is not usable: its calls return an error wrapping
// ErrInvalid.
type Semaphore struct {
	client  *Client
	key     string
	permits int
	quorum  int // nodes that must admit a token (semQuorum)
}

// A SemaphoreOption configures a Semaphore.
type SemaphoreOption func(*semaphoreConfig)

type semaphoreConfig struct{ noFaultTolerance bool }

// AllowNoFaultTolerance accepts a semaphore whose quorum is every node: K ≥
// N−1 permits on N > 1 nodes. Such a semaphore is safe, but one node that is
// down or slow stops every acquisition and extension. Without this option,
// Client.Semaphore refuses it with ErrInvalid.
func AllowNoFaultTolerance() SemaphoreOption {
	return func(c *semaphoreConfig) { c.noFaultTolerance = true }
}

// Semaphore returns the semaphore of key with the given number of permits
// on the Client's nodes. It makes no network call. It returns an error
// wrapping ErrInvalid, and no Semaphore, for a nil Client, an empty key,
// permits < 1, a nil option, or a quorum of every one of N > 1 nodes (K ≥
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
	}
	s := &Semaphore{client: c, key: key, permits: permits, quorum: semQuorum(n, permits)}
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

// Acquire takes one permit for ttl. It retries after a pause as Client.Lock
// does (WithTries, WithRetryDelay, WithRetryStrategy) until it holds a
// permit, the tries run out, the strategy gives up, ctx ends, or the Client
// is closed (ErrClosed). While it waits, a release of a permit wakes it for
// an extra attempt at once, as for Lock (the engine: engine.go).
//
// On success the permit is valid until Permit.Until. On failure it returns
// an error wrapping ErrNotObtained with the per-node causes, plus ctx.Err()
// if ctx ended; every attempt has removed its token from the nodes that may
// hold it. Bad arguments or an impossible configuration return an error
// wrapping ErrInvalid and make no network call. Each attempt takes at most
// one node timeout, or two when it fails and must be undone.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	if s == nil || s.client == nil {
		return nil, errNilSemaphore
	}
	return s.acquire(ctx, ttl, s.client.tries)
}

// TryAcquire makes exactly one attempt to take a permit for ttl; see
// Acquire for what happens on each path.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	return s.acquire(ctx, ttl, 1)
}

func (s *Semaphore) acquire(ctx context.Context, ttl time.Duration, tries int) (*Permit, error) {
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
	var won *Permit
	_, err = c.acquireLoop(ctx, &acquisition{
		key: s.key, wake: []string{SemaphoreKey(c.keyPrefix + s.key)}, need: s.quorum, tries: tries,
		attempt: func(ctx context.Context, a attemptInfo) (*Lock, uint64, error) {
			p, held, err := s.attempt(ctx, ttl, a.id)
			if err != nil {
				return nil, held, err
			}
			won = p
			return &p.state, 0, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return won, nil
}

// attempt is one acquisition: the mutex's steps 1 to 4 with the
// semaphore's script and quorum.
func (s *Semaphore) attempt(ctx context.Context, ttl time.Duration, id uint64) (*Permit, uint64, error) {
	c := s.client
	token, err := c.token()
	if err != nil {
		return nil, 0, err
	}
	p := &Permit{sem: s, state: Lock{client: c, key: s.key, token: token, ops: &semHoldOps, need: s.quorum, permits: s.permits,
		args: newCmdArgs(SemaphoreKey(c.keyPrefix+s.key), token, ttl, c.channel)}}
	args, permits := &p.state.args, int64(s.permits)
	start := c.clock.Now() // step 3: elapsed time counts from before the first send
	until := validUntil(start, ttl, c.driftFactor)
	args.unsent.Store(1<<len(c.nodes) - 1) // no command has entered a pipe yet
	// The nodes on which the token was already a member: a token function
	// that repeats itself. Their member is another holder's, so the undo
	// leaves them alone, and the attempt is lost even if a quorum admitted
	// it, because its Release would remove the other holder's member too.
	// (A repeat that only a straggler reports, after the grant, is not
	// seen; a quorum admitted the token fresh, and any two quora share a
	// node, so the other holder had lost its own quorum by then.)
	var repeated atomic.Uint64
	undo := p.removeOp()
	won, t := c.fanout(ctx, round{
		need: s.quorum,
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			reply, err := p.admit(ctx, n, deadline, permits)
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
		// A Release that overtakes an admission in flight undoes it.
		overtaken: &p.state,
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
	p.state.held.Store(&args.masks)
	args.masks.settle() // won
	p.state.until = until
	return p, 0, nil
}

// admit sends the acquire script to n: by EVALSHA, and by EVAL if the node
// has not cached it. It keeps the bookkeeping of round.overtaken exact: the
// node's bit in unsent is cleared when the EVALSHA enters the pipe, set again
// when NOSCRIPT means the script must be resent, and cleared when the EVAL
// enters the pipe; and if the permit was let go before the resend, a
// removal may have gone ahead of it, so the node counts as overtaken. (With
// seq-cst atomics, either letGo reads the bit set again, or this reads
// letGone set.) Unlike evalMarking, a node whose script ran before any
// release is never undone on the strength of the fallback alone.
func (p *Permit) admit(ctx context.Context, n *node, deadline time.Time, permits int64) (any, error) {
	a, s, bit := &p.state.args, &semAcquireScript, uint64(1)<<n.index
	reply, err := n.send(ctx, deadline, a.lane, &a.unsent, "EVALSHA", 2, s.keys, s.hashArg, s.keysArg, a.key, a.token, a.ttl, permits)
	if replyCode(err) != "NOSCRIPT" {
		return reply, err
	}
	a.unsent.Or(bit)
	if p.state.letGone.Load() {
		p.state.overtaken.Or(bit)
	}
	return n.send(ctx, deadline, a.lane, &a.unsent, "EVAL", 2, s.keys, s.srcArg, s.keysArg, a.key, a.token, a.ttl, permits)
}

// Do takes a permit for ttl as Acquire does, runs fn while holding it, and
// releases it when fn returns; fn finds the permit with HeldPermit. While
// fn runs, the permit is extended every ttl/3, and fn's context is
// cancelled with a cause wrapping ErrLockLost the moment the permit can no
// longer be proven held. Every path is as for Client.Do, with the permit in
// place of the lock.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error) error {
	if s == nil || s.client == nil {
		return errNilSemaphore
	}
	if fn == nil {
		return invalid("nil function")
	}
	p, err := s.Acquire(ctx, ttl)
	if err != nil {
		return err
	}
	return s.client.holdLease(ctx, context.WithValue(ctx, heldPermitKey{}, p), p, ttl, fn, p.Release, nil)
}

type heldPermitKey struct{}

// HeldPermit returns the permit that Semaphore.Do holds while it runs fn
// with ctx, or nil if ctx does not come from Semaphore.Do (or is nil). fn may read its
// Until before a step that needs the bound; it must not Extend or Release
// it, which Do does.
func HeldPermit(ctx context.Context) *Permit {
	if ctx == nil {
		return nil
	}
	p, _ := ctx.Value(heldPermitKey{}).(*Permit)
	return p
}

// A Permit is one held permit of a Semaphore: its token admitted by a
// quorum of nodes. Its methods are safe for concurrent use. The nil *Permit
// that a failed Acquire returns holds nothing: Until is zero, Done is
// closed, and Extend and Release return an error wrapping ErrInvalid. The
// permit counts only until Until; work that may outlast it must Extend
// first, and must stop if Extend fails.
type Permit struct {
	sem *Semaphore
	// state is the permit's validity window and release bookkeeping, kept
	// in a Lock value so that Until, Done and the overtaking rule of
	// round.overtaken are the mutex's own code. Its Lock methods that talk
	// to nodes (Extend, Unlock) are never called.
	state Lock
}

// Value returns the token that marks this permit on each node.
func (p *Permit) Value() string {
	if p == nil || p.sem == nil {
		return ""
	}
	return p.state.token
}

// Until returns the end of the validity window, on the client's clock: the
// permit counts as one of at most K before this instant and not after. It
// returns the zero Time once Release has begun.
func (p *Permit) Until() time.Time {
	if p == nil || p.sem == nil {
		return time.Time{}
	}
	return p.state.Until()
}

// Done returns a channel that is closed when the permit's validity ends, or
// when Release begins; as Lock.Done.
func (p *Permit) Done() <-chan struct{} {
	if p == nil || p.sem == nil {
		return closedChan
	}
	return p.state.Done()
}

// Held returns how many nodes admitted the permit's token in its
// acquisition or latest successful Extend, as far as the permit knows.
func (p *Permit) Held() int {
	if p == nil || p.sem == nil {
		return 0
	}
	return p.state.Held()
}

// Margin returns how many more nodes may fail before the permit no longer
// stands on the semaphore's quorum: the nodes that hold its token or have
// not answered yet, less the quorum, as Lock.Margin counts against the
// majority. 0 means one node failure from loss. It is 0 for the nil
// *Permit.
func (p *Permit) Margin() int {
	if p == nil || p.sem == nil {
		return 0
	}
	return p.state.Margin() // the Lock's need is the semaphore's quorum
}

// Key returns the semaphore's key.
func (p *Permit) Key() string {
	if p == nil || p.sem == nil {
		return ""
	}
	return p.sem.key
}

// Token returns 0: a permit has no fencing token. Permits are shared by up
// to K holders, so a token that orders them would not say which writes to
// refuse (docs/semaphore.md); a resource that needs exclusion uses a Lock
// with WithFencing. It is there so that a Permit and a Lock answer the same
// questions.
func (p *Permit) Token() uint64 { return 0 }

// removeOp returns the node operation that removes the permit's token:
// the undo of a lost acquisition.
func (p *Permit) removeOp() nodeOp {
	args := &p.state.args
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

// Extend makes the permit's token live at least ttl from now on every node
// that still holds it; it never shortens it. It succeeds when a quorum did
// so while both the old validity window and the new one were open; the new
// one runs to start+ttl−drift, start being when Extend began. The paths are
// those of Lock.Extend, with the semaphore's quorum in place of the
// majority: ErrExpired if the validity had passed, ErrReleased if the
// permit was released, ErrClosed on a closed Client, an error wrapping
// ErrNotObtained if no quorum extended in time
// (Until then becomes the earlier of the old and the new deadline), and
// ErrLockLost with it when so many nodes no longer hold the token that
// fewer than a quorum can. Extend takes at most one node timeout.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	if p == nil || p.sem == nil {
		return errNilPermit
	}
	return p.state.Extend(ctx, ttl)
}

// Release gives the permit back: it removes the permit's token on every
// node that still holds it, and never touches another holder's. It returns
// once a quorum of nodes removed it, as Unlock returns on a majority: the
// permit is then free on as many nodes as an acquisition needs, so that the
// caller's own next Acquire, whose commands queue behind these removals on
// each node, can take it. The other nodes are released in the background
// within one node timeout.
//
// From the moment Release begins, the permit no longer counts as held:
// Until returns the zero Time and Done is closed, even if Release fails. On
// each path, as for Lock.Unlock:
//   - Enough nodes removed the token: nil. A retry counts the nodes that
//     removed it the first time.
//   - So many nodes answered, before the validity ended, that the token was
//     gone (expired early, evicted, lost in a restart) that fewer than a
//     quorum can have held it: an error wrapping ErrLockLost, because the
//     permit may not have been one of at most K.
//   - Too few nodes answered: an error saying so, with the per-node causes
//     and ctx.Err() if ctx had ended; the token expires on the silent nodes
//     at its ttl, and Release may be called again.
//   - The validity had already passed: the removal is still sent, but
//     Release returns ErrExpired.
//   - An earlier Release was confirmed: ErrReleased; the removal is sent
//     again all the same.
//
// The removal is always sent, whatever ctx says, on a closed Client too.
// Release takes at most one node timeout.
func (p *Permit) Release(ctx context.Context) error {
	if p == nil || p.sem == nil {
		return errNilPermit
	}
	return p.state.Unlock(ctx)
}

// errNilSemaphore is what a nil *Semaphore's calls return.
var errNilSemaphore = invalid("nil or zero *Semaphore: make one with Client.Semaphore")

// errNilPermit is what Extend and Release return on the nil *Permit of a
// failed Acquire, instead of panicking.
var errNilPermit = invalid("nil *Permit: the Acquire call that returned it failed")

package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// The read-write lock: many readers or one writer, on a majority of nodes.
//
// Each node keeps five keys per lock key, in one Redis Cluster hash slot
// (rwNames, rwQueueNames):
//
//   - the writer key, set to the writer's token with PX ttl, as the mutex's
//     key is;
//   - the readers set, a sorted set of reader tokens, each scored by its
//     expiry in milliseconds of the node's TIME; the scripts prune expired
//     members before they look;
//   - the intent mark, left by a writer that is waiting, with a short PX;
//   - the waiting readers, a sorted set of the wait ids of readers that were
//     refused and will try again, and the entitled readers, those of them
//     that a writer's release let in first (phase fairness, below).
//
// A node grants a writer only if it has no writer, no live reader and no
// live entitled reader (scripts/rw_lock.lua), and a reader only if it has
// no writer and either no intent mark or an entitlement for the reader
// (scripts/rw_rlock.lua). Both sides need a majority: any two
// majorities share a node, and that node never holds a live writer together
// with any other live holder, so a writer's validity never overlaps another
// holder's (docs/rwlock.md). Readers need no bound among themselves.
//
// Phase fairness, as in Go's sync.RWMutex: a waiting writer's intent mark
// refuses new readers, and a writer's release (scripts/rw_unlock.lua) lets
// the readers waiting at that moment in before the next writer. So a reader
// waits for at most one writer's hold, besides the one that holds when it
// arrives; a writer waits for at most one reader phase (the readers holding,
// and those entitled by the last release) before each writer that goes
// ahead of it. Writers among themselves have no order, as for the mutex.
//
// The intent mark and the entitlements are for liveness only: they can make
// a writer's or reader's acquisition refuse, never make a writer be granted,
// and let a reader past nothing but an intent mark. The intent mark itself
// is for liveness only: it can make a reader's acquisition
// refuse, never make anything be granted, so it cannot break exclusion.

var (
	//go:embed scripts/rw_lock.lua
	rwLockSource string
	rwLockScript = newScript(rwLockSource, 5)

	//go:embed scripts/rw_rlock.lua
	rwRLockSource string
	rwRLockScript = newScript(rwRLockSource, 5)

	//go:embed scripts/rw_rextend.lua
	rwRExtendSource string
	rwRExtendScript = newScript(rwRExtendSource, 1)

	//go:embed scripts/rw_runlock.lua
	rwRUnlockSource string
	rwRUnlockScript = newScript(rwRUnlockSource, 1)

	//go:embed scripts/rw_unintent.lua
	rwUnintentSource string
	rwUnintentScript = newScript(rwUnintentSource, 1)

	//go:embed scripts/rw_unlock.lua
	rwUnlockSource string
	rwUnlockScript = newScript(rwUnlockSource, 3)

	//go:embed scripts/rw_unwait.lua
	rwUnwaitSource string
	rwUnwaitScript = newScript(rwUnwaitSource, 2)
)

// An RWMutex is a read-write lock on key over the Client's nodes. Made by
// Client.RWMutex, it holds no state of its own beyond the key's names, so
// any number of RWMutex values for the same key, in any processes, are the
// same lock. It is safe for concurrent use. The nil *RWMutex holds nothing:
// its methods return an error wrapping ErrInvalid.
//
// Lock and TryLock acquire it for writing, exclusive of every other holder;
// RLock and TryRLock for reading, shared with other readers and exclusive
// of writers. Each returns a *Lock whose Extend, Unlock, Until and Done work
// as for the mutex, on that holder's part of the lock. With WithFencing, a
// writer's Token is a fencing token; a reader's is 0.
//
// Fairness is phase-fair, as for sync.RWMutex: while a writer waits in
// Lock, new readers are refused; when a writer unlocks, the readers waiting
// in RLock at that moment go in before the next writer. A reader therefore
// waits for at most one writer's hold besides the current one, and a writer
// for at most one phase of readers before each writer that goes ahead of
// it, plus retry pauses (docs/rwlock.md has the bounds and measurements).
// A writer that loses its hold by expiry instead of Unlock entitles no one.
//
// There is no upgrade or downgrade: a holder of the read lock that calls
// Lock waits for every reader, itself included, so it waits until its own
// read lock ends (Unlock it first, then Lock: another writer may go between);
// a writer that calls RLock is refused while it holds the writer key, so
// RLock waits until the write lock ends (Unlock it, then RLock: another
// writer may go between). Each is a release and a
// new acquisition, never an atomic conversion.
//
// Both sides use majorities, so the lock tolerates what the mutex tolerates:
// N − (N/2+1) crash-stop failures, nodes that stop answering or come back
// with their data. A node that restarts empty forgets its writer key and
// readers at once, and can admit a writer beside a valid reader (or the
// reverse); the restart rule of docs/safety.md (stay out longer than the
// largest ttl, or keep data across a crash) keeps it safe (docs/rwlock.md).
type RWMutex struct {
	client *Client
	key    string

	writer, readers, intent any // the node keys, as command arguments (rwNames)
	waiting, entitled       any // phase fairness: waiting and entitled readers (rwQueueNames)

	noIntent bool // tests: writers leave no intent mark, to measure starvation
}

// RWMutex returns the read-write lock on key. It makes no network call; an
// empty key is reported by the first call that uses it. The lock's keys on
// the nodes are named apart from a mutex's and never clash with a mutex on the same
// key.
func (c *Client) RWMutex(key string) *RWMutex {
	var w, r, i, q, e string
	if c != nil {
		w, r, i = rwNames(c.keyPrefix + key)
		q, e = rwQueueNames(w)
	}
	return &RWMutex{client: c, key: key, writer: w, readers: r, intent: i, waiting: q, entitled: e}
}

// rwQueueNames names, from the writer key, the two sets of phase fairness:
// the readers waiting, and those a writer's release let in before the next
// writer. They share the writer key's slot.
func rwQueueNames(writer string) (waiting, entitled string) {
	base := strings.TrimSuffix(writer, ":w")
	return base + ":q", base + ":e"
}

// rwNames names the three keys of a read-write lock on key. Its scripts
// touch all three at once, so on a Redis Cluster member they must share a
// hash slot, or the node refuses them (CROSSSLOT). They share a prefix that
// holds a non-empty hash tag, and a suffix without braces:
//   - a key with a tag ("{...}") keeps it: "redlock:rw:" + key + ":w", in
//     the key's own slot, as FenceKey does;
//   - a key without a tag and without '}' becomes the tag:
//     "redlock:rw:{key}:w", in the key's slot too;
//   - any other key, without a tag but with a '}' (which would end the tag
//     early, or at once if it comes first), goes in a tag that cannot be
//     empty: "redlock:rw:{~key}:w". The slot is that of "~" and the key's
//     part before its first '}', the same for all three.
func rwNames(key string) (writer, readers, intent string) {
	base := slotName("redlock:rw:", key)
	return base + ":w", base + ":r", base + ":i"
}

// slotName is prefix + key with a non-empty hash tag in key's slot, by the
// rule of rwNames.
func slotName(prefix, key string) string {
	switch {
	case hasHashTag(key):
		return prefix + key
	case strings.IndexByte(key, '}') < 0:
		return prefix + "{" + key + "}"
	default:
		return prefix + "{~" + key + "}"
	}
}

// Key returns the locked key.
func (m *RWMutex) Key() string {
	if m == nil {
		return ""
	}
	return m.key
}

// Lock acquires the lock for writing, for ttl: exclusive of readers and of
// other writers. It retries as Client.Lock does, with the same options,
// results and bounds. While it waits it leaves a writer-intent mark on the
// nodes that refused it, renewed by each attempt and lasting until shortly
// after the next one, so that new readers are refused and those holding
// drain: a stream of readers cannot starve it. It removes the mark when it
// gives up, which takes at most one more node timeout, even if ctx has
// ended. The mark never admits anyone, so it cannot break exclusion
// (docs/rwlock.md).
func (m *RWMutex) Lock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if m == nil || m.client == nil {
		return nil, errNilRWMutex
	}
	return m.lock(ctx, ttl, true, m.client.tries)
}

// TryLock makes exactly one attempt to acquire the lock for writing, and
// leaves no intent mark; see Lock.
func (m *RWMutex) TryLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if m == nil || m.client == nil {
		return nil, errNilRWMutex
	}
	return m.lock(ctx, ttl, true, 1)
}

// RLock acquires the lock for reading, for ttl: shared with other readers,
// exclusive of writers. A node refuses a new reader while a writer holds it
// or a waiting writer has left its intent mark there. It retries as
// Client.Lock does, with the same options, results and bounds, plus one
// node timeout when it gives up after waiting: it then removes its
// registration as a waiting reader from the nodes (docs/rwlock.md).
func (m *RWMutex) RLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if m == nil || m.client == nil {
		return nil, errNilRWMutex
	}
	return m.lock(ctx, ttl, false, m.client.tries)
}

// TryRLock makes exactly one attempt to acquire the lock for reading; see
// RLock.
func (m *RWMutex) TryRLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if m == nil || m.client == nil {
		return nil, errNilRWMutex
	}
	return m.lock(ctx, ttl, false, 1)
}

// Do acquires the lock for writing, as Lock does, runs fn while holding it,
// extends it in the background and releases it when fn returns, exactly as
// Client.Do does for the mutex: fn's context is cancelled with a cause
// wrapping ErrLockLost if the lock is lost.
func (m *RWMutex) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error) error {
	if m == nil || m.client == nil {
		return errNilRWMutex
	}
	return m.client.hold(ctx, m.key, ttl, func(ctx context.Context) (*Lock, error) { return m.Lock(ctx, ttl) }, fn)
}

// RDo is Do for reading: it holds the lock as RLock acquires it.
func (m *RWMutex) RDo(ctx context.Context, ttl time.Duration, fn func(ctx context.Context) error) error {
	if m == nil || m.client == nil {
		return errNilRWMutex
	}
	return m.client.hold(ctx, m.key, ttl, func(ctx context.Context) (*Lock, error) { return m.RLock(ctx, ttl) }, fn)
}

var errNilRWMutex = invalid("nil *RWMutex: use Client.RWMutex")

// intentReach is how long a waiting writer's intent mark must outlive the
// moment a node stores it, beyond the pause before the next attempt: the
// rest of this attempt's round, its undo, and the next attempt's round until
// its script runs, each at most a node timeout.
const intentReach = 3

// lock is Lock, TryLock, RLock and TryRLock: the engine's loop
// (acquireLoop) with the read-write scripts and the writer's intent mark.
// A writer waits for the release of the writer key and of readers; a
// reader for the writer key's.
func (m *RWMutex) lock(ctx context.Context, ttl time.Duration, write bool, tries int) (*Lock, error) {
	c := m.client
	if err := c.usable(); err != nil {
		return nil, err
	}
	ttl, err := c.check(ctx, m.key, ttl)
	if err != nil {
		return nil, err
	}
	if err := c.closedErr(); err != nil {
		return nil, err
	}
	// The waiting writer's mark, or the waiting reader's registration, the
	// same across its attempts.
	var intent string
	if tries > 1 && (!write || !m.noIntent) {
		if intent, err = c.token(); err != nil {
			return nil, err
		}
	}
	marked := false // an attempt may have left the mark, or registered the reader
	wake := []string{m.writer.(string)}
	if write {
		wake = append(wake, m.readers.(string))
	}
	return c.acquireLoop(ctx, &acquisition{
		key: m.key, wake: wake, tries: tries,
		attempt: func(ctx context.Context, a attemptInfo) (*Lock, uint64, error) {
			var mark time.Duration
			wasMarked := marked
			// An attempt with ctx already ended sends nothing (fanout), so
			// it marks nothing, and giveUp has nothing to remove.
			if intent != "" && a.pause >= 0 && ctx.Err() == nil {
				mark = a.pause + intentReach*c.nodeTimeout
				marked = true
			}
			var settled func(agreed uint64)
			if marked {
				// The granting nodes drop this waiter's mark; a node that
				// refused this attempt (or failed) may keep it: a
				// reader's registration would entitle the reader at the
				// next writer's release, holding writers back there until
				// it lapses, and a writer's intent mark would refuse new
				// readers there for its ttl, the retry pause and more.
				// Once every node has answered a won attempt, those are
				// known: the mark is removed from them in the background,
				// so that the call returns with its majority. Close waits
				// for that round (c.calls).
				settled = func(agreed uint64) {
					if agreed == 1<<len(c.nodes)-1 {
						return
					}
					c.calls.Add(1)
					go func() {
						defer c.calls.Done()
						m.unmark(ctx, intent, write)
					}()
				}
			}
			l, held, err := m.acquire(ctx, ttl, write, intent, mark, a.id, settled)
			switch {
			case err == nil && settled != nil:
				marked = false // removed as settled says, not by giveUp
			case errors.Is(err, errClosedBeforeSend):
				marked = wasMarked // this attempt left nothing on the nodes
			}
			return l, held, err
		},
		giveUp: func(ctx context.Context) {
			if marked {
				m.unmark(ctx, intent, write)
			}
		},
	})
}

// lockName is the key a writer's or a reader's Lock is on, and so the
// lane of its attempts, their undo and its unmark. A writer's Lock is the
// mutex's on the writer key: Extend and Unlock use the mutex's scripts
// there. A reader's is on the readers set, with the reader scripts
// (rwReaderOps).
func (m *RWMutex) lockName(write bool) string {
	if write {
		return m.writer.(string)
	}
	return m.readers.(string)
}

// acquire is one attempt: the algorithm's steps 1 to 4 with the read-write
// scripts. A writer's attempt leaves the intent mark for mark (none if 0)
// on each node that refuses it.
//
// settled, if set, is called with the nodes that granted a won attempt
// once every node has answered it (on the goroutine of the last answer, or
// the caller's: nodeMasks.after).
func (m *RWMutex) acquire(ctx context.Context, ttl time.Duration, write bool, intent string, mark time.Duration, id uint64,
	settled func(agreed uint64)) (*Lock, uint64, error) {
	c := m.client
	token, err := c.token()
	if err != nil {
		return nil, 0, err
	}
	name := m.lockName(write)
	l := &Lock{client: c, key: m.key, token: token, args: newCmdArgs(name, token, ttl, c.channel)}
	args := &l.args
	// The nodes whose script was resent by EVAL after NOSCRIPT; see
	// rwScript. Kept apart from args.fellBack, which Lock.overtakenAt reads
	// at any time, whereas only a resend that returns after the lock was let
	// go may have been overtaken.
	fellBack := new(atomic.Uint64)
	// The nodes on which a reader's token was already a member: a token
	// function that repeats itself, as for the semaphore (Semaphore's
	// attempt). Their member is another reader's: the undo leaves it, and
	// the attempt is lost even if a quorum admitted it.
	var repeated atomic.Uint64
	var set, release nodeOp
	markMs := int64(0)
	if mark > 0 {
		markMs = max(mark.Milliseconds(), 1)
	}
	if write {
		fenced := any("0")
		if c.fencing {
			fenced = "1"
		}
		args.fenceKey = fenceKeyWith(c.fencePrefix, name) // declared always, read with fencing
		set = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.rwScript(ctx, deadline, l, fellBack, &rwLockScript, "write lock", &l.highest, nil,
				m.writer, m.readers, m.intent, args.fenceKey, m.entitled, args.token, args.ttl, intent, markMs, fenced)
		}
		release = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			_, err := n.rwUnlock(ctx, deadline, args)
			return err == nil, err
		}
		l.ops = &rwWriterOps
	} else {
		l.ops = &rwReaderOps
		set = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.rwScript(ctx, deadline, l, fellBack, &rwRLockScript, "read lock", nil, &repeated,
				m.writer, m.readers, m.intent, m.waiting, m.entitled, args.token, args.ttl, intent, markMs)
		}
		release = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			if repeated.Load()&(1<<n.index) != 0 {
				return true, nil // another reader's member
			}
			_, err := n.eval(ctx, deadline, args.lane, &rwRUnlockScript, args.key, args.token, args.channel)
			return err == nil, err
		}
	}
	start := c.clock.Now() // step 3: validity counts from before the first send
	until := validUntil(start, ttl, c.driftFactor)
	args.unsent.Store(1<<len(c.nodes) - 1)
	if settled != nil {
		args.masks.after = func() { settled(args.masks.agreed.Load()) }
	}
	if c.obs != nil {
		args.masks.report = func() { c.reportSettled(ctx, l, observe.OpAcquire, id, &args.masks) }
	}
	won, t := c.fanout(ctx, round{op: set, undo: release, overtaken: l,
		valid: func() bool { return repeated.Load() == 0 && c.clock.Now().Before(until) },
		kind:  observe.OpAcquire, key: m.key, id: id, masks: &args.masks})
	if !won {
		if r := repeated.Load(); r != 0 {
			return nil, 0, &tokenError{fmt.Errorf("token %q is already a reader's on %d of %d nodes: the token function must return a new token for every attempt (WithTokenFunc)",
				token, bits.OnesCount64(r), len(c.nodes))}
		}
		return nil, args.masks.agreed.Load(), t.err(ErrNotObtained)
	}
	l.held.Store(&args.masks)
	c.settleWon(&args.masks)
	if write && c.fencing {
		if c.closedBetweenRounds(ctx, l, release) {
			return nil, 0, errClosedBetweenRounds
		}
		if err := m.fence(ctx, l, release, until, id); err != nil {
			return nil, args.masks.agreed.Load(), err
		}
	}
	if c.obs != nil {
		l.granted, l.id = time.Now(), id
	}
	l.until = until
	return l, 0, nil
}

// fence is fencing's round 2 for a writer granted with WithFencing, as
// Client.acquire runs it for the mutex (docs/fencing.md): the token exceeds
// every counter the granting nodes reported, and counts once a majority
// stored it while still holding the writer key, within the validity
// window. The counter is the writer key's (FenceKey of its name), so a
// writer's tokens grow in the order writers are granted. If the round is
// lost, the writer is let go and released on every node.
func (m *RWMutex) fence(ctx context.Context, l *Lock, release nodeOp, until time.Time, id uint64) error {
	c, args := m.client, &l.args
	l.fence = l.highest.load() + 1
	won, t := c.fanout(ctx, round{
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.raiseFence(ctx, deadline, args, l.fence)
		},
		undo:    release,
		undoAll: true,
		lost:    l.letGo,
		valid:   func() bool { return c.clock.Now().Before(until) },
		kind:    observe.OpFence, key: m.key, id: id, masks: &l.fenced,
	})
	if !won {
		return t.err(ErrNotObtained)
	}
	l.held.Store(&l.fenced)
	c.settleWon(&l.fenced)
	return nil
}

// unmark removes a writer's intent mark, or a reader's registration among
// the waiting and entitled readers, from every node, once it has given up:
// best effort, within a node timeout, even if ctx has ended. A node it
// misses drops the mark at its ttl.
//
// It goes on the lane of the acquisitions it follows (the writer key's,
// or the readers set's), so that on each node it comes after an attempt
// still in the node's pipe: on another lane it could overtake a
// straggler, whose script then left the mark or registration behind
// after the unmark. A reader's registration left so was entitled at the
// next writer's release and, with one such reader on each of two nodes,
// held every writer back there, while the writers' intent marks held the
// readers back, until the entitlements lapsed, seconds later. An attempt
// not yet in the pipe, or resent by EVAL after NOSCRIPT (which enters the
// pipe again), can still come after the unmark; what it leaves lapses at
// its ttl (docs/rwlock.md, "A stall, found and fixed").
func (m *RWMutex) unmark(ctx context.Context, intent string, write bool) {
	lane := laneOf(m.lockName(write))
	m.client.fanout(context.WithoutCancel(ctx), round{
		detached: true, // ctx is WithoutCancel's already
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			var err error
			if write {
				_, err = n.eval(ctx, deadline, lane, &rwUnintentScript, m.intent, intent)
			} else {
				_, err = n.eval(ctx, deadline, lane, &rwUnwaitScript, m.waiting, m.entitled, intent)
			}
			return err == nil, err
		},
	})
}

// rwUnlock runs a writer's release (rw_unlock.lua) on the writer key a.key:
// true if the node deleted it, false if it was gone or another token's.
func (n *node) rwUnlock(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	q, e := rwQueueNames(a.key.(string))
	reply, err := n.eval(ctx, deadline, a.lane, &rwUnlockScript, a.key, q, e, a.token, a.channel)
	return reply == int64(1), err
}

// rwScript runs an acquisition script for l, clearing the node's bit in
// l.args.unsent when it takes its place in the pipe, as setNX does. It
// reports true for the reply 1, false for 0; any other reply fails the node,
// so that a lost round undoes it, as for SET NX.
//
// A script resent by EVAL after NOSCRIPT enters the pipe later than its bit
// in unsent says, so a release may have gone ahead of it: if the lock was
// let go before the resend returned, the node is marked overtaken, and
// fanout undoes it once the op returns. A resend that returned before the
// lock was let go entered the pipe before any release did.
//
// With counter set (a fenced writer), a grant replies the node's fencing
// counter plus 1, which counter keeps the highest of. With repeated set (a
// reader), the reply 2 (the token is already a member) sets the node's bit
// in it and counts as a refusal.
func (n *node) rwScript(ctx context.Context, deadline time.Time, l *Lock, fellBack *atomic.Uint64, s *script, what string, counter *maxCounter, repeated *atomic.Uint64, keysAndArgs ...any) (bool, error) {
	a := &l.args
	reply, err := n.evalScript(ctx, deadline, a.lane, &a.unsent, fellBack, s, keysAndArgs)
	if bit := uint64(1) << n.index; fellBack.Load()&bit != 0 && l.letGone.Load() {
		l.overtaken.Or(bit)
	}
	switch {
	case err != nil:
		return false, err
	case reply == int64(0):
		return false, nil
	case counter == nil && reply == int64(1):
		return true, nil
	case repeated != nil && reply == int64(2):
		repeated.Or(uint64(1) << n.index)
		return false, nil
	case counter != nil:
		if r, ok := reply.(int64); ok && r >= 1 {
			counter.raise(uint64(r - 1))
			return true, nil
		}
	}
	return false, n.fail(fmt.Errorf("redlock: unexpected reply %v to the %s script", reply, what), deadline)
}

// holdOps are the node operations with which a Lock extends and releases
// its hold; a Lock whose ops is nil is the mutex's (or a writer's), held by a
// key set to its token.
type holdOps struct {
	extend       func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error)
	releaseOwned func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error)
}

// rwReaderOps hold a reader's place in the readers set (a.key).
var rwReaderOps = holdOps{
	extend: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		reply, err := n.eval(ctx, deadline, a.lane, &rwRExtendScript, a.key, a.token, a.ttl)
		return reply == int64(1), err
	},
	releaseOwned: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		reply, err := n.eval(ctx, deadline, a.lane, &rwRUnlockScript, a.key, a.token, a.channel)
		return reply == int64(1), err
	},
}

// rwWriterOps hold a writer's key: the mutex's extend script, and
// rw_unlock.lua, which also lets waiting readers in first. A writer is
// never re-seeded (Lock.Extend): a SET NX of the writer key would
// not check the readers set, as rw_lock.lua does.
var rwWriterOps = holdOps{
	extend: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		ok, _, err := n.extend(ctx, deadline, a)
		return ok, err
	},
	releaseOwned: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		return n.rwUnlock(ctx, deadline, a)
	},
}

// extendOn is the node's part of Extend (step 5); gone reports a node that
// has no key at all, which Extend may re-seed (the mutex only).
func (l *Lock) extendOn(ctx context.Context, n *node, deadline time.Time, a *cmdArgs) (ok, gone bool, err error) {
	if l.ops != nil {
		ok, err := l.ops.extend(n, ctx, deadline, a)
		return ok, false, err
	}
	return n.extend(ctx, deadline, a)
}

// releaseOn is the node's part of Unlock: true if it removed the lock's
// hold, false if the hold was gone.
func (l *Lock) releaseOn(ctx context.Context, n *node, deadline time.Time, a *cmdArgs) (bool, error) {
	if l.ops != nil {
		return l.ops.releaseOwned(n, ctx, deadline, a)
	}
	return n.releaseOwned(ctx, deadline, a)
}

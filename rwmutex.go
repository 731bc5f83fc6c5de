package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// The read-write lock: many readers or one writer, on a majority of nodes.
//
// Each node keeps three keys per lock key, in one Redis Cluster hash slot
// (rwNames):
//
//   - the writer key, set to the writer's token with PX ttl, as the mutex's
//     key is;
//   - the readers set, a sorted set of reader tokens, each scored by its
//     expiry in milliseconds of the node's TIME; the scripts prune expired
//     members before they look;
//   - the intent mark, left by a writer that is waiting, with a short PX.
//
// A node grants a writer only if it has no writer and no live reader
// (scripts/rw_lock.lua), and a reader only if it has no writer and no intent
// mark (scripts/rw_rlock.lua). Both sides need a majority: any two
// majorities share a node, and that node never holds a live writer together
// with any other live holder, so a writer's validity never overlaps another
// holder's (docs/rwlock.md). Readers need no bound among themselves.
//
// The intent mark is for liveness only: it can make a reader's acquisition
// refuse, never make anything be granted, so it cannot break exclusion.

var (
	//go:embed scripts/rw_lock.lua
	rwLockSource string
	rwLockScript = newScript(rwLockSource, 3)

	//go:embed scripts/rw_rlock.lua
	rwRLockSource string
	rwRLockScript = newScript(rwRLockSource, 3)

	//go:embed scripts/rw_rextend.lua
	rwRExtendSource string
	rwRExtendScript = newScript(rwRExtendSource, 1)

	//go:embed scripts/rw_runlock.lua
	rwRUnlockSource string
	rwRUnlockScript = newScript(rwRUnlockSource, 1)

	//go:embed scripts/rw_unintent.lua
	rwUnintentSource string
	rwUnintentScript = newScript(rwUnintentSource, 1)
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
// as for the mutex, on that holder's part of the lock.
type RWMutex struct {
	client *Client
	key    string

	writer, readers, intent any // the node keys, as command arguments (rwNames)

	noIntent bool // tests: writers leave no intent mark, to measure starvation
}

// RWMutex returns the read-write lock on key. It makes no network call; an
// empty key is reported by the first call that uses it. The lock's keys on
// the nodes are named apart from a mutex's and never clash with a mutex on the same
// key.
func (c *Client) RWMutex(key string) *RWMutex {
	var w, r, i string
	if c != nil {
		w, r, i = rwNames(c.keyPrefix + key)
	}
	return &RWMutex{client: c, key: key, writer: w, readers: r, intent: i}
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
	var base string
	switch {
	case hasHashTag(key):
		base = "redlock:rw:" + key
	case strings.IndexByte(key, '}') < 0:
		base = "redlock:rw:{" + key + "}"
	default:
		base = "redlock:rw:{~" + key + "}"
	}
	return base + ":w", base + ":r", base + ":i"
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
// Client.Lock does, with the same options, results and bounds.
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
	var intent string // the waiting writer's mark, the same across its attempts
	if write && tries > 1 && !m.noIntent {
		if intent, err = c.newToken(); err == nil && intent == "" {
			err = errors.New("empty token")
		}
		if err != nil {
			return nil, &tokenError{err}
		}
	}
	marked := false // an attempt may have left the mark
	wake := []string{m.writer.(string)}
	if write {
		wake = append(wake, m.readers.(string))
	}
	return c.acquireLoop(ctx, &acquisition{
		key: m.key, wake: wake, tries: tries,
		attempt: func(ctx context.Context, a attemptInfo) (*Lock, uint64, error) {
			var mark time.Duration
			if intent != "" && a.pause >= 0 {
				mark = a.pause + intentReach*c.nodeTimeout
				marked = true
			}
			return m.acquire(ctx, ttl, write, intent, mark, a.id)
		},
		giveUp: func(ctx context.Context) {
			if marked {
				m.unmark(ctx, intent)
			}
		},
	})
}

// acquire is one attempt: the algorithm's steps 1 to 4 with the read-write
// scripts. A writer's attempt leaves the intent mark for mark (none if 0)
// on each node that refuses it.
func (m *RWMutex) acquire(ctx context.Context, ttl time.Duration, write bool, intent string, mark time.Duration, id uint64) (*Lock, uint64, error) {
	c := m.client
	token, err := c.newToken()
	if err == nil && token == "" {
		err = errors.New("empty token")
	}
	if err != nil {
		return nil, 0, &tokenError{err}
	}
	// A writer's Lock is the mutex's on the writer key: Extend and Unlock
	// use the mutex's scripts there. A reader's is on the readers set, with
	// the reader scripts (rwReaderOps).
	name := m.writer
	if !write {
		name = m.readers
	}
	l := &Lock{client: c, key: m.key, token: token, args: newCmdArgs(name.(string), token, ttl, c.channel)}
	args := &l.args
	// The nodes whose script was resent by EVAL after NOSCRIPT; see
	// rwScript. Kept apart from args.fellBack, which Lock.overtakenAt reads
	// at any time, whereas only a resend that returns after the lock was let
	// go may have been overtaken.
	fellBack := new(atomic.Uint64)
	var set, release nodeOp
	if write {
		markMs := int64(0)
		if mark > 0 {
			markMs = max(mark.Milliseconds(), 1)
		}
		set = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.rwScript(ctx, deadline, l, fellBack, &rwLockScript, "write lock",
				m.writer, m.readers, m.intent, args.token, args.ttl, intent, markMs)
		}
		release = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.release(ctx, deadline, args)
		}
		l.ops = &rwWriterOps
	} else {
		l.ops = &rwReaderOps
		set = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			return n.rwScript(ctx, deadline, l, fellBack, &rwRLockScript, "read lock",
				m.writer, m.readers, m.intent, args.token, args.ttl)
		}
		release = func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			_, err := n.eval(ctx, deadline, args.lane, &rwRUnlockScript, args.key, args.token, args.channel)
			return err == nil, err
		}
	}
	start := c.clock.Now() // step 3: validity counts from before the first send
	until := validUntil(start, ttl, c.driftFactor)
	args.unsent.Store(1<<len(c.nodes) - 1)
	if c.obs != nil {
		args.masks.report = func() { c.reportSettled(ctx, l, observe.OpAcquire, id, &args.masks) }
	}
	won, t := c.fanout(ctx, round{op: set, undo: release, overtaken: l,
		valid: func() bool { return c.clock.Now().Before(until) },
		kind:  observe.OpAcquire, key: m.key, id: id, masks: &args.masks})
	if !won {
		return nil, args.masks.agreed.Load(), t.err(ErrNotObtained)
	}
	l.held.Store(&args.masks)
	args.masks.settle() // won
	if c.obs != nil {
		l.granted, l.id = time.Now(), id
	}
	l.until = until
	return l, 0, nil
}

// unmark removes a writer's intent mark from every node, once it has given
// up: best effort, within a node timeout, even if ctx has ended. A node it
// misses drops the mark at its ttl.
func (m *RWMutex) unmark(ctx context.Context, intent string) {
	m.client.fanout(context.WithoutCancel(ctx), round{
		op: func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
			_, err := n.eval(ctx, deadline, laneOf(m.intent.(string)), &rwUnintentScript, m.intent, intent)
			return err == nil, err
		},
	})
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
func (n *node) rwScript(ctx context.Context, deadline time.Time, l *Lock, fellBack *atomic.Uint64, s *script, what string, keysAndArgs ...any) (bool, error) {
	a := &l.args
	reply, err := n.evalScript(ctx, deadline, a.lane, &a.unsent, fellBack, s, keysAndArgs)
	if bit := uint64(1) << n.index; fellBack.Load()&bit != 0 && l.letGone.Load() {
		l.overtaken.Or(bit)
	}
	switch {
	case err != nil:
		return false, err
	case reply == int64(1):
		return true, nil
	case reply == int64(0):
		return false, nil
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

// rwWriterOps hold a writer's key. They are the mutex's scripts, but a
// writer is never re-seeded (Lock.Extend): a SET NX of the writer key would
// not check the readers set, as rw_lock.lua does.
var rwWriterOps = holdOps{
	extend: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		ok, _, err := n.extend(ctx, deadline, a)
		return ok, err
	},
	releaseOwned: func(n *node, ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
		return n.releaseOwned(ctx, deadline, a)
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

package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// The engine: one acquire loop, one release and one keep loop for every
// primitive.
//
// The mutex, the RW lock's readers and writers, the semaphore and election
// differ only in their scripts and their quorum. What a caller counts on,
// which docs/engine.md states as the engine's promises, is written here once:
//
//   - acquire (acquireLoop): attempts, the RetryStrategy's pauses, wake-up
//     on release (wake.go) with its first slot, stagger and cap, and Close. A
//     primitive supplies one attempt (its steps 1 to 4), the node keys whose
//     release may free it, and its quorum.
//   - keep (Lock.extend, Client.keep): Extend with the primitive's script and
//     quorum; Do's extension loop; re-seeding for the mutex.
//   - release (Lock.unlock): always sent, whatever the caller's ctx, within
//     one node timeout; the error tells the truth.
//
// A holder of any primitive is a *Lock (a mutex's, an RWMutex's, a
// Semaphore's permit), so that validity, Done and the overtaking rules are
// the same code for all.

// An acquisition is what a primitive gives acquireLoop.
type acquisition struct {
	key   string   // the key as the caller gave it: events and errors
	wake  []string // node keys whose release announcements may free it
	need  int      // nodes an attempt needs; 0: the Client's majority
	tries int
	// holders: the attempt can tell the key's holder (attemptInfo.holder);
	// the mutex's can.
	holders bool

	// attempt makes one attempt. pause is how long the next timed attempt
	// is away if this one fails (negative: none follows), so that a
	// writer's intent mark can last until then. It returns the nodes that
	// agreed before a failed attempt let them go (wake.go).
	attempt func(ctx context.Context, a attemptInfo) (*Lock, uint64, error)

	// giveUp, if set, runs once the loop has given up (the RW writer's
	// intent mark).
	giveUp func(ctx context.Context)
}

// attemptInfo is what one attempt learns from the loop.
type attemptInfo struct {
	id    uint64
	woken bool
	pause time.Duration

	// holder, if set, asks a contended attempt for the token that refused
	// it on a quorum ("" if none did, or the primitive cannot tell): the
	// loop's evidence of a hand-over, which the cap does not count.
	holder *string
}

// ErrClosed reports a call on a Client that Close has closed, or a call
// that Close ended while it waited.
var ErrClosed = errors.New("redlock: client closed")

// errNilClient is what every method of a nil or zero *Client returns.
var errNilClient = invalid("nil or zero *Client: make one with New")

// usable reports whether c can be used at all: not nil, made by New.
func (c *Client) usable() error {
	if c == nil || c.closing == nil {
		return errNilClient
	}
	return nil
}

// closedErr is what a call begun after Close returns.
func (c *Client) closedErr() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// acquireLoop runs a's attempts until one wins, as Client.Lock documents:
//   - a timed attempt, then a pause drawn from the RetryStrategy before the
//     attempt (so that an attempt knows how long it must mark its wait);
//     a negative draw, or the last of a.tries, ends the loop when the
//     attempt fails;
//   - during a pause, a wake-up (a release announced on enough nodes; see
//     wake.go) starts a woken attempt, at once for the Client's leader on
//     the key after no split vote, after wakeDelay's pause otherwise (the
//     first slot and the stagger); woken attempts do not count as tries,
//     and in one pause each starts at least rtt×2^k
//     after the one before (k the woken attempts so far in the pause), so
//     that announcements that are not ours (forged, or from another
//     database) add at most 1+log2(pause/rtt) attempts per pause; k does
//     not count a woken attempt that lost to a new holder on a quorum
//     (attemptInfo.holder), which only a real hand-over makes, so that a
//     pause holds at most 1+log2(pause/rtt)+h woken attempts, h the new
//     tokens seen holding the key on a quorum during it;
//   - a failure that is not contention (a token that cannot be made, or so
//     many nodes refusing the command itself that no quorum is possible)
//     ends it at once;
//   - ctx's end, or Close, ends the pause at once, and the loop returns
//     the last attempt's error with ctx.Err() or ErrClosed;
//   - an attempt that wins after Close was called is released and reported
//     as ErrClosed: a closed Client hands out nothing. fanout undoes one
//     whose majority came after Close began while Close still waits for
//     it (wonAfterClose); one won just before, which this loop finds
//     closed when fanout returns, is let go here.
func (c *Client) acquireLoop(ctx context.Context, a *acquisition) (*Lock, error) {
	need := a.need
	if need == 0 {
		need = c.quorum
	}
	var began time.Time
	id := c.newID()
	if c.obs != nil {
		began = time.Now()
	}
	var (
		wt      *waiter       // set once the loop waits, if the nodes can announce releases
		next    time.Time     // when the next timed attempt is due
		delay   time.Duration // the pause after the current timed attempt
		woken   bool          // this attempt was started by a wake-up
		splits  int           // woken attempts in a row that divided the vote
		inPause int           // woken attempts since the last timed one
		gapEnd  time.Time     // no woken attempt starts before this (the cap)
		waiting time.Time     // when the first attempt was sent
		last    error         // the last attempt's error
		holder  string        // the last token seen holding the key on a quorum
	)
	// The loop is counted among the calls that Close waits for, from here
	// until it returns (or giveUp has run). Otherwise Close, finding no
	// node call running, could return while an attempt won just before it
	// began was still on its way to the check of closed below, which lets
	// it go, or while an RWMutex's waiter slept in its pause, before it
	// woke and removed its wait mark: a program exiting then left the key
	// or the mark for its ttl. The count is let go while the loop runs
	// the program's code: its reports to the Observer (report, and
	// settleWon in an attempt), so that Close called from those events
	// does not wait for itself, and, but for an RWMutex's waiter, a token
	// function or RetryStrategy of the program's own (attemptToken,
	// retryDelayFor). Close wakes the pause at once (c.closing), so its
	// bound is kept.
	counted := true
	c.calls.Add(1)
	defer func() {
		if counted {
			c.calls.Done()
		}
		if wt != nil {
			c.wake.unregister(wt)
		}
	}()
	report := func(e observe.Event) {
		if counted {
			c.calls.Done()
			defer c.calls.Add(1)
		}
		c.obs.Observe(ctx, e)
	}
	giveUp := func(try int, err error) (*Lock, error) {
		if a.giveUp != nil {
			a.giveUp(ctx)
		}
		counted = false
		c.calls.Done()
		return nil, c.notAcquired(ctx, id, a.key, try, began, err)
	}
	for try := 1; ; {
		label := try // a woken attempt counts as part of the timed one before it
		if woken {
			label--
		}
		if c.closed.Load() {
			if last == nil {
				return giveUp(label, ErrClosed)
			}
			return giveUp(label, withCause(last, ErrClosed))
		}
		info := attemptInfo{id: id, woken: woken}
		probe := false // a woken attempt that confirmations woke (wake.go, "Channels per key")
		if wt != nil {
			probe = wt.arm() && woken
			if a.holders {
				info.holder = new(string) // contended: learn who holds the key
			}
		}
		if woken {
			info.pause = time.Until(next)
		} else {
			delay = -1
			if try < a.tries {
				delay = c.retryDelayFor(try, a.giveUp == nil)
			}
			info.pause = delay
		}
		if c.obs != nil {
			report(observe.Event{Kind: observe.KindAttempt, ID: id, Key: a.key, Try: label, Woken: woken})
		}
		sent := time.Now()
		if waiting.IsZero() {
			waiting = sent
		}
		l, held, err := a.attempt(ctx, info)
		if hook := testHookAttempted.Load(); hook != nil {
			(*hook)(c)
		}
		rtt := time.Since(sent)
		_, tokenFailed := err.(*tokenError) // as attempts return it; errors.As would allocate
		switch {
		case err == errClosedBetweenRounds:
			return giveUp(label, err)
		case err == nil && c.closed.Load():
			// Won, but Close has begun (after the round, or during it on a
			// path that does not undo it): let it go again, so that Close
			// leaves nothing held. Close waits for this release: the loop
			// is still counted (within the bound Close states).
			_ = l.unlock(ctx, 0)
			return giveUp(label, fmt.Errorf("%w: the acquisition won after Close and was released", ErrClosed))
		case err == nil:
			if c.obs != nil {
				report(observe.Event{Kind: observe.KindAcquired, ID: id, Key: a.key, Try: label, Woken: woken, Wait: time.Since(began),
					Held: l.Held(), Margin: l.Margin(), Quorum: need, Token: l.fence})
			}
			if h, _ := ctx.Value(handOffKey{}).(*handOff); h != nil && h.take() {
				counted = false // the caller lets it go
			}
			return l, nil
		case tokenFailed:
			return giveUp(label, err) // not contention: no retry
		case ctx.Err() != nil || c.closed.Load():
			// ctx ended, or Close began, during the attempt (an
			// acquisition won then was undone before fanout returned; see
			// wonAfterClose): no retry, and no report of one. The error
			// wraps each.
			if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
				err = withCause(err, cerr)
			}
			if c.closed.Load() && !errors.Is(err, ErrClosed) {
				err = withCause(err, ErrClosed)
			}
			return giveUp(label, err)
		case !woken && delay < 0:
			return giveUp(label, err)
		}
		last = err
		if hopeless, n := c.hopeless(err, need); hopeless {
			return giveUp(label, fmt.Errorf("%w (not retried: %d of %d nodes refuse the command itself, so no quorum of %d is possible)",
				err, n, len(c.nodes), need))
		}
		// A hand-over: a quorum refused this attempt for another holder
		// than the last one seen, so the key changed hands in between.
		var refused string // the token that refused this attempt on a quorum
		if info.holder != nil {
			refused = *info.holder
		}
		handedOver := refused != "" && holder != "" && refused != holder
		if refused != "" {
			holder = refused
		}
		switch {
		case !woken:
			next = time.Now().Add(delay)
			if c.obs != nil {
				report(observe.Event{Kind: observe.KindRetry, ID: id, Key: a.key, Try: try, Delay: delay, Held: bits.OnesCount64(held), Err: err})
			}
			try++
			inPause, gapEnd = 0, time.Time{}
			if wt == nil && c.wake != nil && len(a.wake) > 0 {
				wt = c.wake.register(a.wake, need, true)
			}
		case probe:
			// It looked for a release that came before the subscription:
			// nodes it held had been freed by its own undo, not by a split
			// vote, so the splits stay as they were.
		case held != 0:
			splits++ // this woken attempt held some nodes and still lost
		default:
			splits = 0
		}
		if woken {
			// The cap: the next woken attempt of this pause waits twice as
			// long as the last one did after the attempt before it, unless
			// this one lost to a new holder: then the announcement that
			// woke it was a real release, and the gap stays as it was.
			// A probe (wake.go, "Channels per key") neither counts nor
			// holds back the next woken attempt: the release it looked for
			// may come at any moment.
			if !handedOver && !probe {
				inPause++
			}
			if !probe {
				gapEnd = sent.Add(max(rtt, time.Microsecond) << min(max(inPause, 1), 30))
			}
			if c.obs != nil {
				report(observe.Event{Kind: observe.KindRetry, ID: id, Key: a.key, Try: label, Woken: true, Delay: time.Until(next),
					Held: bits.OnesCount64(held), Err: err})
			}
		}
		if wt != nil {
			wt.settle(held)
		}
		var cause error
		woken, cause = c.pause(ctx, wt, next, wakeState{rtt: rtt, waited: time.Since(waiting), splits: splits}, gapEnd)
		if cause != nil {
			return giveUp(try-1, withCause(err, cause))
		}
	}
}

// A handOff is how a caller that registers the lock it acquires with Close
// (Do, Campaign: onClose) closes the gap between the acquisition's return
// and that registration. Its ctx, from withHandOff, asks acquireLoop to
// return a won lock with the loop's count among Close's calls still held
// (take); the caller lets it go (done) once it has registered the lock, or
// released it because Close had begun. Otherwise a Close that began in
// that gap returned at once, and the caller's release of the lock came
// after it.
//
// The ctx may outlive the acquisition (an Observer is given it), and a
// Lock called with it later must not hand over a count that no one lets
// go: a handOff is taken at most once, and not after done.
type handOff struct {
	state atomic.Int32 // handOffOpen, handOffTaken or handOffDone
}

const (
	handOffOpen int32 = iota
	handOffTaken
	handOffDone
)

type handOffKey struct{}

// withHandOff returns ctx marked for a hand-off, and the handOff. A nil
// ctx stays nil, for the acquisition to refuse.
func withHandOff(ctx context.Context) (context.Context, *handOff) {
	h := &handOff{}
	if ctx == nil {
		return ctx, h
	}
	return context.WithValue(ctx, handOffKey{}, h), h
}

// take reports whether the acquisition may hand its count over.
func (h *handOff) take() bool { return h.state.CompareAndSwap(handOffOpen, handOffTaken) }

// won is called by the caller once the acquisition has returned its lock,
// before it registers the lock with Close (a hook for tests).
func (h *handOff) won(c *Client) {
	if hook := testHookHandOff.Load(); hook != nil {
		(*hook)(c)
	}
}

// done ends the hand-off, and lets go of the count the acquisition handed
// over, if it did. The caller calls it once, on every path.
func (h *handOff) done(c *Client) {
	if h.state.Swap(handOffDone) == handOffTaken {
		c.calls.Done()
	}
}

// retryDelayFor is the RetryStrategy's pause after attempt try, asked
// from acquireLoop, which holds a count among Close's calls. A strategy
// of the program's own (WithRetryStrategy) is its code, which may be slow
// or call Close: with uncounted, the count is let go while it runs, as
// the loop's reports let it go. The attempt that follows checks closed
// again before it sends anything (fanout), so a Close that returns
// meanwhile leaves nothing behind; a loop with a giveUp (an RWMutex's
// waiter, whose wait mark giveUp removes) keeps its count.
func (c *Client) retryDelayFor(try int, uncounted bool) time.Duration {
	if !c.retrySet || !uncounted {
		return c.retry.Delay(try)
	}
	c.calls.Done()
	defer c.calls.Add(1)
	return c.retry.Delay(try)
}

// testHookAttempted, if set, runs in acquireLoop each time an attempt has
// returned, before the loop looks at its outcome; testHookHandOff when a
// caller with a handOff (Do, Campaign) has the lock, before it registers
// it with Close. Tests only.
var testHookAttempted, testHookHandOff atomic.Pointer[func(c *Client)]

// wakeState is what a woken waiter's pause depends on (wakeDelay): its last
// attempt's duration, how long the call has waited, and its split votes in
// a row.
type wakeState struct {
	rtt, waited time.Duration
	splits      int
}

// pause waits, after a failed attempt, until next (the next timed attempt),
// ctx's end, Close, or a wake-up followed by wakeDelay's pause (none for a
// leader after no split vote) and, if later, until gapEnd (the cap on woken
// attempts). It reports whether a wake-up ended it; err is ctx.Err() or
// ErrClosed.
func (c *Client) pause(ctx context.Context, wt *waiter, next time.Time, st wakeState, gapEnd time.Time) (woken bool, err error) {
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	var wake <-chan struct{}
	if wt != nil {
		wake = wt.wake
	}
	for {
		select {
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-c.closing:
			return false, ErrClosed
		case <-wake:
			after, window := wakeDelay(c.wake.leads(wt), st.rtt, st.waited, st.splits)
			if window > 0 {
				after += rand.N(window)
			}
			d := max(after, time.Until(gapEnd))
			if d >= time.Until(next) {
				wake = nil // the timed attempt comes first
				continue
			}
			if d > 0 {
				timer.Reset(d) // Go 1.23 timers: no stale value to drain
				select {
				case <-timer.C:
				case <-ctx.Done():
					return false, ctx.Err()
				case <-c.closing:
					return false, ErrClosed
				}
			}
			return true, nil
		}
	}
}

// errClosedBetweenRounds is the error of a fenced attempt that Close
// overtook between its two rounds (closedBetweenRounds).
var errClosedBetweenRounds = fmt.Errorf("%w: the acquisition was let go between its fencing rounds", ErrClosed)

// closedBetweenRounds reports whether Close has begun once a fenced
// attempt's first round is won, and if so lets the attempt go on every node
// (release), as a lost second round would: a closed Client hands out
// nothing, and running the second round first would keep Close waiting for
// two more rounds, past its bound.
func (c *Client) closedBetweenRounds(ctx context.Context, l *Lock, release nodeOp) bool {
	if !c.closed.Load() {
		return false
	}
	c.undoEvery(ctx, round{undo: release, lost: l.letGo})
	return true
}

// releaseRound sends a release round (r) whatever ctx says: detached from
// ctx's cancellation and deadline, each node within one node timeout from
// now, as fanout bounds it. A release skipped because the caller's ctx had
// ended would leave the key for a whole ttl on every node while the
// holder believes it let go. If the round is lost and ctx has ended, ctx's
// error joins the causes, so that the caller learns both.
func (c *Client) releaseRound(ctx context.Context, r round) (bool, tally) {
	r.detached = true
	won, t := c.fanout(context.WithoutCancel(ctx), r)
	if err := ctxEnded(ctx); !won && err != nil {
		t.causes = append(t.causes, err)
	}
	return won, t
}

// A closers is the set of holders that Close must end: leaderships and Do
// loops, each with the function that ends it (stop keeping, release).
type closers struct {
	mu    sync.Mutex
	next  int
	funcs map[int]func()
}

// onClose registers f to run when Close is called, and returns the function
// that removes it. If Close has begun, it registers nothing and returns
// ok false: the caller must end its holder itself.
func (c *Client) onClose(f func()) (remove func(), ok bool) {
	r := &c.closers
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.closed.Load() {
		return nil, false
	}
	if r.funcs == nil {
		r.funcs = make(map[int]func())
	}
	id := r.next
	r.next++
	r.funcs[id] = f
	return func() {
		r.mu.Lock()
		delete(r.funcs, id)
		r.mu.Unlock()
	}, true
}

// startClose marks c closed, wakes every waiting call, and starts every
// registered closer, counted among the node calls that Close waits for. It
// reports whether this was the first Close.
func (c *Client) startClose() bool {
	r := &c.closers
	r.mu.Lock()
	first := !c.closed.Load()
	c.closed.Store(true)
	funcs := r.funcs
	r.funcs = nil
	if first {
		close(c.closing)
	}
	r.mu.Unlock()
	for _, f := range funcs {
		c.calls.Add(1)
		go func() {
			defer c.calls.Done()
			f()
		}()
	}
	return first
}

// A causeErr is an error with a message of its own that wraps several
// sentinels, so that errors.Is finds each while the message says it once.
type causeErr struct {
	msg  string
	errs []error
}

func (e *causeErr) Error() string   { return e.msg }
func (e *causeErr) Unwrap() []error { return e.errs }

// errClosedWhileHeld is the cause of a hold (Do's fn context, a
// Leadership) that Close ended: the lock was released, so the holder is no
// longer protected (ErrLockLost) because the client closed (ErrClosed).
var errClosedWhileHeld error = &causeErr{
	msg:  "redlock: lock lost: the client was closed, and released it",
	errs: []error{ErrLockLost, ErrClosed},
}

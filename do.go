package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// ErrLockLost reports that a lock could no longer be proven held: in Do,
// its validity ran out before an extension succeeded, or a majority of
// nodes refused to extend it because they no longer hold its key; from
// Extend and Unlock, the nodes' answers show that fewer than a majority
// still held its key. The critical section may not have been exclusive. In
// Do it is the cause of fn's context (context.Cause) and part of Do's
// error.
var ErrLockLost = errors.New("redlock: lock lost")

// extendEvery is the fraction of the ttl after which Do extends a held lock:
// at a third, a failed extension leaves two thirds of the validity for
// retries before the lock is lost.
const extendEvery = 3

// Do acquires the lock on key for ttl, as Lock does, runs fn while holding it,
// and releases it when fn returns.
//
// While fn runs, Do extends the lock in the background every ttl/3 (step 5).
// Each Extend takes at most one node timeout and never runs past the lock's
// validity. A failed Extend is retried after a random retry delay
// (WithRetryDelay) for as long as the lock is still valid.
//
// fn's context is derived from ctx. It is cancelled, with a cause wrapping
// ErrLockLost that says why, the moment the lock can no longer be proven
// held: when its validity runs out (Lock.Done), or as soon as a majority of
// nodes refuse an extension, which proves the key has gone from them. fn
// should stop promptly then; the lock is not protecting it any more. If ctx
// is cancelled, fn's context is cancelled too, but the lock is kept and
// extended until fn returns.
//
// The rule that ties the two together: Do's error wraps ErrLockLost exactly
// when the lock was lost before fn returned, and context.Cause of fn's
// context is the first reason fn was asked to stop. So the cause wraps
// ErrLockLost exactly when Do's error does, with one exception: if ctx was
// cancelled first, the cause stays ctx's, and a loss that follows while fn
// winds down shows in Do's error only. A loss after fn returned shows in
// neither.
//
// On each path:
//   - If the lock cannot be acquired, Do returns Lock's error and fn does not
//     run.
//   - If the lock was held until fn returned, Do returns fn's error. The
//     release is best effort and not part of the error (an observe.Observer is told
//     of its failure): if it fails, the key expires on the nodes it could
//     not reach within ttl.
//   - If the lock was lost before fn returned, Do returns fn's error joined
//     with the loss cause, so errors.Is(err, ErrLockLost) holds even for an
//     fn that ignored its context and returned nil.
//
// If the Client is closed while fn runs, Do stops extending, cancels fn's
// context with a cause wrapping ErrClosed and ErrLockLost, and releases the
// lock at once; Do's error then wraps both. If it is closed as the lock is won, Do
// releases it and returns an error wrapping ErrClosed, and fn does not run.
//
// If fn panics, Do stops extending, releases the lock and re-panics.
// Do starts no goroutine that outlives it, beyond the node calls that Lock
// and Unlock leave in the background for slow nodes, each ending within a
// node timeout or two.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error) (err error) {
	if err := c.usable(); err != nil {
		return err
	}
	return c.hold(ctx, key, ttl, func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, key, ttl) }, fn)
}

// hold is Do with the acquisition as a parameter, so that other primitives
// whose holders are Locks (RWMutex.Do and RDo) hold them the same way.
func (c *Client) hold(ctx context.Context, key string, ttl time.Duration, acquire func(context.Context) (*Lock, error), fn func(ctx context.Context) error) (err error) {
	if fn == nil {
		return invalid("nil function")
	}
	// The acquisition stays counted among Close's calls until holdLease
	// has registered the lock with Close (or released it): handOff.
	hctx, h := withHandOff(ctx)
	l, err := acquire(hctx)
	if err != nil {
		h.done(c)
		return err
	}
	var lost func(error)
	if c.obs != nil {
		lost = func(err error) {
			c.obs.Observe(ctx, observe.Event{Kind: observe.KindLost, ID: l.id, Key: key, HeldFor: time.Since(l.granted), Err: err})
		}
	}
	return c.holdLease(ctx, context.WithValue(ctx, heldKey{}, l), l, ttl, fn, l.unlockThen, lost, h)
}

// A lease is what holdLease keeps alive while fn runs: a *Lock.
type lease interface {
	Until() time.Time
	Done() <-chan struct{}
	Extend(ctx context.Context, ttl time.Duration) error
}

// holdLease runs fn with a context derived from parent while keeping l,
// which was acquired for ttl, as Do describes; then it releases l with
// release, which runs then (if set) between its round and its event for
// the Observer (Lock.unlockThen). lost, if set, is told of a loss before
// fn returned. h is the acquisition's hand-off: its count ends once l is
// registered with Close, or released (before the release's event, so
// that Close called from it returns at once).
func (c *Client) holdLease(ctx, parent context.Context, l lease, ttl time.Duration, fn func(ctx context.Context) error,
	release func(ctx context.Context, then func()) error, lost func(error), h *handOff) (err error) {
	fnCtx, cancel := context.WithCancelCause(parent)
	stop := make(chan struct{})
	kept := make(chan loss, 1)
	// Close ends the hold at once: fn is told why, and the lock is
	// released, within Close's bound, even if fn goes on.
	closeHold := func(then func()) {
		cancel(errClosedWhileHeld)
		_ = release(context.WithoutCancel(ctx), then)
	}
	h.won(c)
	remove, ok := c.onClose(func() { closeHold(nil) })
	if !ok {
		// Closed between the acquisition and here: release, and do not run
		// fn, which the lock no longer protects. Close waits for this
		// release: the acquisition's count ends after its round.
		closeHold(func() { h.done(c) })
		return errClosedBeforeFn
	}
	h.done(c)
	defer remove()
	go func() { kept <- c.keep(l, ttl, stop, cancel) }()

	defer func() {
		// Runs even if fn panicked: judge validity at fn's return, settle
		// fn's context with that verdict, stop extending, then release. A
		// loss that keep has already given fn as its cause counts, even if
		// the clock has not quite reached Until (l.Done's timer may fire a
		// little early on a loaded machine): Do's error and fn's cause must
		// agree.
		held := c.clock.Now().Before(l.Until()) && !errors.Is(context.Cause(fnCtx), ErrLockLost)
		if held {
			// fn returned in time: a loss that keep sees from now on came
			// after fn, and must not become fn's cause.
			cancel(context.Canceled)
		} else {
			cancel(lostCause("validity ran out before fn returned", nil))
		}
		close(stop)
		ended := <-kept
		switch {
		case held && ended.expired:
			// Validity ran out after fn returned, before stop was seen.
			ended.err = nil
		case held && errors.Is(ended.err, ErrClosed):
			// Close came after fn returned, before stop was seen: fn ran
			// under the lock, and Close's release is no loss.
			ended.err = nil
		case !held && errors.Is(context.Cause(fnCtx), ErrClosed):
			ended.err = errClosedWhileHeld // Close released it before fn returned
		case !held && ended.err == nil:
			ended.err = lostCause("validity ran out before fn returned", nil)
		}
		_ = release(context.WithoutCancel(ctx), nil) // always sent; a failure reaches the observe.Observer
		if ended.err != nil {
			if lost != nil {
				lost(ended.err)
			}
			err = joinErrors(err, ended.err)
		}
	}()
	return fn(fnCtx)
}

// errClosedBeforeFn is Do's error when Close released the lock it had
// just acquired, before fn could run.
var errClosedBeforeFn = fmt.Errorf("%w: the lock was won as the client closed, and released; fn did not run", ErrClosed)

// A loss is how keep ended: err is nil if fn returned first; expired tells a
// loss by running out of validity from one proven by refusals.
type loss struct {
	err     error
	expired bool
}

// keep extends l every ttl/3 until stop is closed or the lock is lost. On loss
// it cancels fn's context with the cause and returns it.
func (c *Client) keep(l lease, ttl time.Duration, stop <-chan struct{}, cancel context.CancelCauseFunc) loss {
	timer := time.NewTimer(ttl / extendEvery)
	defer timer.Stop()
	var last error // the latest failed Extend, if none has succeeded since
	for {
		select {
		case <-stop:
			return loss{}
		case <-c.closing:
			// Close: stop extending; whoever registered with onClose
			// releases the lock.
			cancel(errClosedWhileHeld)
			return loss{err: errClosedWhileHeld}
		case <-l.Done():
			err := lostCause("validity ran out before an extension succeeded", last)
			cancel(err)
			return loss{err: err, expired: true}
		case <-timer.C:
		}
		// Bounded by the node timeout inside Extend, and by validity here: an
		// extension that ends after it proves nothing for the time between.
		// stop (fn returned, Resign) and Close end it at once, so that the
		// release that follows does not wait for it or for its re-seed: the
		// release's bound is then the caller's.
		ctx, done := context.WithDeadline(context.Background(), l.Until())
		go func() {
			select {
			case <-stop:
			case <-c.closing:
			case <-ctx.Done():
			}
			done()
		}()
		err := l.Extend(ctx, ttl)
		done()
		switch {
		case err == nil:
			last = nil
			timer.Reset(ttl / extendEvery)
		case errors.Is(err, ErrLockLost): // Extend proved it, and cut Until short
			cancel(err)
			return loss{err: err}
		case refused(err) && c.clock.Now().Before(l.Until()):
			err = lostCause("a majority of nodes refused the extension", err)
			cancel(err)
			return loss{err: err}
		default:
			// Keep the failure that explains best why the extensions
			// failed: a retry that starts after validity ran out, or one
			// that validity's deadline ended before any node answered,
			// says less than an earlier one that names the nodes' errors.
			if explains(err) >= explains(last) {
				last = err
			}
			timer.Reset(c.retryDelay())
		}
	}
}

// explains ranks a failed extension's error by what it tells of the
// failure: 2 if it names nodes' errors, 1 for any other error but
// ErrExpired, 0 for ErrExpired or none.
func explains(err error) int {
	var ne *NodeError
	switch {
	case errors.As(err, &ne):
		return 2
	case err == nil || errors.Is(err, ErrExpired):
		return 0
	}
	return 1
}

// refused reports whether an Extend failed only because nodes answered that
// they no longer hold the key: no node failed or timed out, so more than
// N − quorum of them refused, and no majority can still hold it.
func refused(err error) bool {
	if !errors.Is(err, ErrNotObtained) {
		return false
	}
	var ne *NodeError
	return !errors.As(err, &ne) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

func lostCause(why string, last error) error {
	if last == nil {
		return fmt.Errorf("%w: %s", ErrLockLost, why)
	}
	return wrapf("%w: %s: %w", ErrLockLost, why, last)
}

type heldKey struct{}

// HeldLock returns the lock that Do (Client.Do, RWMutex.Do and RDo,
// Semaphore.Do: its permit) holds while it runs fn with ctx, or nil if ctx
// does not come from one of them (or is nil). fn may read its Until before a step that needs
// exclusion, its Value, or its fencing Token (with WithFencing) to send with
// each write; it must not Unlock or Extend it, which Do does.
func HeldLock(ctx context.Context) *Lock {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(heldKey{}).(*Lock)
	return l
}

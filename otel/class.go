package redlockotel

import (
	"context"
	"errors"

	"github.com/quorumlock/redlock"
)

// The error.type values of a whole call (Lock, Extend, Unlock, a retry, a
// loss), besides the node classes of observe.Event.Class ("timeout", "io",
// "READONLY"...), which a call takes from its failed nodes.
const (
	classRefused  = "refused"  // nodes answered no: the key is held by another token, or gone
	classLost     = "lost"     // ErrLockLost from Extend or Unlock: refusals prove the lock gone
	classExpired  = "expired"  // the lock's validity had passed (ErrExpired, or a loss by running out)
	classCanceled = "canceled" // the caller's context was cancelled
	classDeadline = "deadline" // the caller's context's deadline passed
	classInvalid  = "invalid"  // ErrInvalid
	classOther    = "other"    // anything else (a failing token function)
)

// callClass sorts the error of a whole call. ErrLockLost comes first: that
// the critical section may not have been exclusive matters more than what
// else went wrong. Node failures are detached from the caller's context
// (quorum.go), so a context error in a call's error is the caller's. A call
// that failed with no node error failed by refusals; for Lock, whose error
// may also come from the token function, a failure that is neither is
// "other".
func callClass(err error, class string) string {
	var ne *redlock.NodeError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, redlock.ErrLockLost):
		return classLost
	case errors.Is(err, context.Canceled):
		return classCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return classDeadline
	case errors.Is(err, redlock.ErrExpired):
		return classExpired
	case errors.Is(err, redlock.ErrInvalid):
		return classInvalid
	case errors.As(err, &ne):
		return class // "timeout" if any node timed out, else the first reply code, else "io"
	case errors.Is(err, redlock.ErrNotObtained):
		return classRefused
	}
	return classOther
}

// releaseClass is callClass for Unlock, whose failure without a node error
// (its sentinel is not exported) can only be refusals: the key was gone.
func releaseClass(err error, class string) string {
	if c := callClass(err, class); c != classOther {
		return c
	}
	return classRefused
}

// lossClass says why Do lost its lock (EventLost): "refused" when a majority
// refused an extension, which proves the key gone from them; "expired" when
// the validity ran out first.
func lossClass(err error) string {
	var ne *redlock.NodeError
	if errors.Is(err, redlock.ErrNotObtained) && !errors.As(err, &ne) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return classRefused
	}
	return classExpired
}

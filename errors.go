package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-multierror"
)

var (
	// ErrNotObtained reports that an acquisition or extension did not reach a
	// majority of nodes within its validity window: the key is held by another
	// client, or too many nodes failed, or the answers came too late.
	ErrNotObtained = errors.New("redlock: lock not obtained")

	// ErrExpired reports an Extend or Unlock of a lock whose validity had
	// already passed on the local clock, or an Extend that an Unlock
	// overtook. The holder must assume that its critical section may not
	// have been exclusive.
	ErrExpired = errors.New("redlock: lock expired")

	// ErrReleased reports an Unlock (Release, Resign) or Extend of a lock
	// that an earlier Unlock already released, as confirmed by a quorum of
	// nodes. It is not ErrExpired: the lock was held until that release,
	// so the critical section was not cut short. A second Unlock still
	// sends its release, which frees any node the first one missed.
	ErrReleased = errors.New("redlock: lock already released")

	// ErrInvalid reports a bad argument or option. It is returned before any
	// network call is made.
	ErrInvalid = errors.New("redlock: invalid argument")

	// ErrNodeTimeout is the cause in a NodeError when a node did not answer
	// within the node timeout (see WithNodeTimeout).
	ErrNodeTimeout = errors.New("redlock: node timeout")
)

// A NodeError is the failure of one Redis node during one operation.
// Errors returned by this package hold one NodeError per failed node;
// reach them with errors.As.
type NodeError struct {
	Node int    // index of the node's pool in the slice passed to New
	Addr string // the node's address, if its Pool is a driver.Namer; else ""
	Err  error  // the cause: a dial or I/O error, a driver.ReplyError, or ErrNodeTimeout
}

func (e *NodeError) Error() string {
	cause := strings.TrimPrefix(e.Err.Error(), "redlock: ")
	if e.Addr == "" {
		return fmt.Sprintf("redlock: node %d: %s", e.Node, cause)
	}
	return fmt.Sprintf("redlock: node %d (%s): %s", e.Node, e.Addr, cause)
}

func (e *NodeError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// aggregate joins a summary error with the per-node causes behind it. Each one
// stays reachable through errors.Is and errors.As, and so does a context error
// appended to causes.
func aggregate(summary error, causes []error) error {
	if len(causes) == 0 {
		return summary
	}
	return &multierror.Error{
		Errors:      append([]error{summary}, causes...),
		ErrorFormat: formatCauses,
	}
}

// withCause adds one more cause to an error made by aggregate.
func withCause(err, cause error) error {
	if m, ok := err.(*multierror.Error); ok {
		return aggregate(m.Errors[0], append(m.Errors[1:len(m.Errors):len(m.Errors)], cause))
	}
	return aggregate(err, []error{cause})
}

// formatCauses prints an aggregate on one line: the summary, then each cause
// without repeating the package prefix.
func formatCauses(errs []error) string {
	var b strings.Builder
	for i, err := range errs {
		msg := err.Error()
		if i > 0 {
			b.WriteString("; ")
			msg = strings.TrimPrefix(msg, "redlock: ")
		}
		b.WriteString(msg)
	}
	return b.String()
}

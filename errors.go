package redlock

import (
	"errors"
	"fmt"
	"strings"
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

	// ErrReplicaAcks is the cause in a NodeError when a node stored a
	// write but fewer of its replicas than WithReplicaAcks asks for
	// acknowledged it within the node timeout: the node's vote does not
	// count, and a lost round releases it.
	ErrReplicaAcks = errors.New("redlock: too few replicas acknowledged the write")
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
	if e == nil || e.Err == nil {
		return "redlock: node error without a cause"
	}
	cause := strings.TrimPrefix(e.Err.Error(), "redlock: ")
	if e.Addr == "" {
		return fmt.Sprintf("redlock: node %d: %s", e.Node, cause)
	}
	return fmt.Sprintf("redlock: node %d (%s): %s", e.Node, e.Addr, cause)
}

func (e *NodeError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// An opError is the error of one operation: a summary, which wraps the
// sentinel that says what happened, and the causes behind it (one NodeError
// per failed node, the caller's context error). It reads as one line, with
// the package prefix once, and Unwrap returns the summary and every cause,
// so that errors.Is and errors.As reach each of them and a walk of the tree
// by Unwrap() []error finds every NodeError.
type opError struct {
	summary error
	causes  []error
}

func (e *opError) Error() string {
	var b strings.Builder
	summary := oneLine(e.summary.Error())
	b.WriteString(summary)
	// The prefix once: a cause drops it if the text before has it. Do's
	// error begins with fn's own, which has none; the loss after it keeps
	// its prefix then.
	prefixed := strings.Contains(summary, prefix)
	for _, c := range e.causes {
		b.WriteString("; ")
		text := oneLine(c.Error())
		if prefixed {
			text = strings.TrimPrefix(text, prefix)
		}
		prefixed = prefixed || strings.Contains(text, prefix)
		b.WriteString(text)
	}
	return b.String()
}

func (e *opError) Unwrap() []error { return append([]error{e.summary}, e.causes...) }

const prefix = "redlock: "

// oneLine keeps the package prefix of msg once, where msg joins the texts
// of several of this package's errors, and puts what errors.Join puts on
// separate lines on one.
func oneLine(msg string) string {
	if strings.Contains(msg, "\n") {
		msg = strings.ReplaceAll(msg, "\n", "; ")
	}
	if i := strings.Index(msg, prefix); i >= 0 && strings.Contains(msg[i+len(prefix):], prefix) {
		msg = msg[:i+len(prefix)] + strings.ReplaceAll(msg[i+len(prefix):], prefix, "")
	}
	return msg
}

// wrapf is fmt.Errorf for errors that wrap several of this package's:
// errors.Is and errors.As reach each %w operand, and the text has the
// package prefix once.
func wrapf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &opError{summary: err}
}

// aggregate joins a summary error with the per-node causes behind it. Each one
// stays reachable through errors.Is and errors.As, and so does a context error
// appended to causes.
func aggregate(summary error, causes []error) error {
	return &opError{summary: summary, causes: causes}
}

// withCause adds one more cause to an error made by aggregate, or makes one.
func withCause(err, cause error) error {
	if e, ok := err.(*opError); ok {
		return aggregate(e.summary, append(e.causes[:len(e.causes):len(e.causes)], cause))
	}
	return aggregate(err, []error{cause})
}

// A tagged error reads as its text and unwraps to sentinels that the text
// does not need to spell out one after another: Extend's refusal is both
// ErrNotObtained and ErrLockLost, and says "lock lost" once.
type tagged struct {
	text string
	is   []error
}

func (e *tagged) Error() string   { return e.text }
func (e *tagged) Unwrap() []error { return e.is }

// joinErrors returns err and also, both reachable through errors.Is and
// errors.As, on one line: Do's fn's error and the loss of its lock. When
// err already is or wraps also (fn returned context.Cause of its context),
// err alone says it all, and also is not repeated.
func joinErrors(err, also error) error {
	switch {
	case err == nil:
		return also
	case errors.Is(err, also):
		return err
	}
	return &opError{summary: err, causes: []error{also}}
}

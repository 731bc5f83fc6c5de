package redlock

import (
	"context"
	"errors"
	"math/bits"
	"time"
)

// An Observer is told what a Client does, for metrics, traces and logs: each
// acquisition attempt, each node's answer, retries, acquisitions with their
// wait, extensions, losses and releases. Set one with WithObserver; the
// otel module (github.com/quorumlock/redlock/otel) turns events into
// OpenTelemetry metrics and spans, and SlogObserver into log records.
//
// Observe is called synchronously, on the goroutine doing the work, often
// concurrently: it must be safe for concurrent use and return quickly. ctx
// is the context of the call the event belongs to (for a node's answer, a
// context with the same values: trace spans and the like), and the Event
// is passed by value; Observe may keep it. A Client without an Observer
// builds no events at all.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// An EventKind says what an Event reports.
type EventKind uint8

// The kinds of Event, and the fields each one sets besides Kind and Key.
const (
	// EventAttempt: an acquisition attempt begins. Try (from 1).
	EventAttempt EventKind = iota + 1
	// EventNode: one node answered one operation, or failed to. Op, Node,
	// Addr, Outcome, Class (for failures), Latency (since the operation
	// began), Err. Nodes that answer after the caller stopped waiting are
	// reported too.
	EventNode
	// EventRetry: an attempt failed and Lock will try again after Delay.
	// Try (the attempt that failed), Delay, Err.
	EventRetry
	// EventAcquired: Lock or TryLock holds the lock. Try (attempts made),
	// Wait (since the call began), Held, Margin, Quorum, Token.
	EventAcquired
	// EventNotAcquired: Lock or TryLock gave up. Try, Wait, Err.
	EventNotAcquired
	// EventExtended: Extend succeeded. Latency, Held, Margin, Quorum.
	EventExtended
	// EventExtendFailed: Extend failed. Latency, Err.
	EventExtendFailed
	// EventReleased: Unlock reached a majority. Latency, HeldFor (since the
	// lock was granted).
	EventReleased
	// EventReleaseFailed: Unlock failed, including the best-effort release
	// that Do makes when fn returns. Latency, Err.
	EventReleaseFailed
	// EventLost: Do lost its lock while fn ran. HeldFor, Err (wrapping
	// ErrLockLost, with the cause).
	EventLost
	// EventSettled: every node has answered a won acquisition or Extend
	// (Op), stragglers included, so its count is final: Held, Margin,
	// Quorum. Margin 0 means the lock stands on a bare majority: the
	// deployment is degraded. It comes after EventAcquired or EventExtended,
	// up to a node timeout later (or when a silent node's driver gives up).
	EventSettled
)

var eventKindNames = [...]string{
	EventAttempt: "attempt", EventNode: "node", EventRetry: "retry",
	EventAcquired: "acquired", EventNotAcquired: "not_acquired",
	EventExtended: "extended", EventExtendFailed: "extend_failed",
	EventReleased: "released", EventReleaseFailed: "release_failed",
	EventLost: "lost", EventSettled: "settled",
}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "unknown"
}

// An Op is the operation a node answered.
type Op uint8

const (
	OpAcquire Op = iota + 1 // SET NX, or fencing's round 1
	OpFence                 // fencing's round 2
	OpExtend
	OpRelease
)

var opNames = [...]string{OpAcquire: "acquire", OpFence: "fence", OpExtend: "extend", OpRelease: "release"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown"
}

// An Outcome is what one node answered.
type Outcome uint8

const (
	Agreed  Outcome = iota + 1 // the node did what was asked
	Refused                    // the node answered no: the key is held by another token, or gone
	Failed                     // no usable answer: an error reply, a broken connection, a timeout
)

var outcomeNames = [...]string{Agreed: "agreed", Refused: "refused", Failed: "failed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// An Event is one thing a Client did; see EventKind for which fields each
// kind sets. The zero value of a field means "not set".
type Event struct {
	Kind EventKind
	Key  string
	Op   Op

	// ID is the call the event belongs to: every event of one Lock or
	// TryLock call, one Extend or one Unlock, node answers included, has the
	// same ID, unique within the Client. EventLost has the ID of the call
	// that acquired the lock. Calls that report only when they end (Extend,
	// Unlock) give their Latency, so that a tracer can place their start.
	ID uint64

	Node    int     // node index, for EventNode
	Addr    string  // node address, if its Pool is a driver.Namer
	Outcome Outcome // for EventNode
	Class   string  // for a failed node: ErrorClass(Err)

	Try     int
	Woken   bool // EventAttempt, EventRetry, EventAcquired: the attempt was started by a release announcement (wake.go)
	Latency time.Duration
	Wait    time.Duration
	HeldFor time.Duration
	Delay   time.Duration

	// For EventAcquired and EventExtended: the nodes holding the key when
	// the call returned, Lock.Margin then, and the quorum; for
	// EventSettled, the final counts. For EventRetry, Held is the number of
	// nodes the failed attempt held before it let them go: more than zero
	// with refusals too means the vote was split.
	Held, Margin, Quorum int
	Token                uint64
	Err                  error
}

// ErrorClass sorts a node's failure into a small fixed set, for metric
// labels: "timeout" (ErrNodeTimeout), "canceled" and "deadline" (the
// caller's context), the error reply's code ("NOPERM", "READONLY", "OOM",
// "LOADING", "MOVED"...), "fence_ahead" (fencing's round 2 met a higher
// counter), "io" for anything else (a refused or broken connection), and ""
// for nil.
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNodeTimeout):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, errFenceAhead):
		return "fence_ahead"
	}
	if code := replyCode(err); code != "" {
		return code
	}
	return "io"
}

// WithObserver sets the Observer told of every attempt, node answer and lock
// event. The default is none, which costs nothing. A nil Observer is
// rejected.
func WithObserver(o Observer) Option {
	return func(c *Client) { c.obs, c.obsSet = o, true }
}

// observeNode reports one node's answer to a round.
func (c *Client) observeNode(ctx context.Context, id uint64, key string, kind Op, nd *node, yes bool, err error, latency time.Duration) {
	e := Event{Kind: EventNode, ID: id, Key: key, Op: kind, Node: nd.index, Addr: nd.name, Latency: latency, Err: err}
	switch {
	case yes:
		e.Outcome = Agreed
	case err == nil:
		e.Outcome = Refused
	default:
		e.Outcome, e.Class = Failed, ErrorClass(err)
	}
	c.obs.Observe(ctx, e)
}

// reportSettled tells the Observer that the won round behind m has heard
// from every node.
func (c *Client) reportSettled(ctx context.Context, l *Lock, op Op, id uint64, m *nodeMasks) {
	held := bits.OnesCount64(m.agreed.Load())
	c.obs.Observe(ctx, Event{Kind: EventSettled, ID: id, Key: l.key, Op: op,
		Held: held, Margin: held - c.quorum, Quorum: c.quorum})
}

// newID returns the ID of a new call, for its events.
func (c *Client) newID() uint64 {
	if c.obs == nil {
		return 0
	}
	return c.ids.Add(1)
}

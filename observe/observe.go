// Package observe is what a redlock Client tells the program about its work,
// for metrics, traces and logs: each acquisition attempt, each node's answer,
// retries, acquisitions with their wait, extensions, losses and releases.
//
// Give a Client an Observer with redlock.WithObserver; several stack. Slog
// writes events to a log/slog logger, and the module
// github.com/quorumlock/redlock/otel turns them into OpenTelemetry metrics
// and spans. A Client without an Observer builds no events at all.
package observe

import (
	"context"
	"log/slog"
	"time"
)

// An Observer is told what a Client does (see the package documentation).
//
// Observe is called synchronously, on the goroutine doing the work, often
// concurrently: it must be safe for concurrent use and return quickly. ctx
// is the context of the call the event belongs to (for a node's answer, a
// context with the same values: trace spans and the like), and the Event
// is passed by value; Observe may keep it. A Client without an Observer
// builds no events at all.
//
// Observe may call the Client's Close, but KindNode is reported from
// inside the node call that it describes, and so is KindSettled when the
// last node answers after the acquisition or extension was won; Close
// waits for node calls. Called from such an event, Close waits out its
// bound (three node timeouts) and returns an error wrapping
// ErrNodeTimeout, and the node's answer counts as a timeout if its round's
// deadline passes meanwhile. From every other kind (KindAttempt,
// KindRetry, KindAcquired, KindNotAcquired, KindExtended,
// KindExtendFailed, KindReleased, KindReleaseFailed, KindLost) it returns
// at once.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// A Kind says what an Event reports.
type Kind uint8

// The kinds of Event, and the fields each one sets besides Kind and Key.
const (
	// KindAttempt: an acquisition attempt begins. Try (from 1).
	KindAttempt Kind = iota + 1
	// KindNode: one node answered one operation, or failed to. Op, Node,
	// Addr, Outcome, Class (for failures), Latency (since the operation
	// began), Err. Nodes that answer after the caller stopped waiting are
	// reported too.
	KindNode
	// KindRetry: an attempt failed and Lock will try again after Delay.
	// Try (the attempt that failed), Delay, Err.
	KindRetry
	// KindAcquired: Lock or TryLock holds the lock. Try (attempts made),
	// Wait (since the call began), Held, Margin, Quorum, Token.
	KindAcquired
	// KindNotAcquired: Lock or TryLock gave up. Try, Wait, Err.
	KindNotAcquired
	// KindExtended: Extend succeeded. Latency, Held, Margin, Quorum.
	KindExtended
	// KindExtendFailed: Extend failed. Latency, Err.
	KindExtendFailed
	// KindReleased: Unlock reached a majority. Latency, HeldFor (since the
	// lock was granted).
	KindReleased
	// KindReleaseFailed: Unlock failed, including the best-effort release
	// that Do makes when fn returns. Latency, Err.
	KindReleaseFailed
	// KindLost: Do lost its lock while fn ran. HeldFor, Err (wrapping
	// ErrLockLost, with the cause).
	KindLost
	// KindSettled: every node has answered a won acquisition or Extend
	// (Op), stragglers included, so its count is final: Held, Margin,
	// Quorum. Margin 0 means the lock stands on a bare majority: the
	// deployment is degraded. It comes once the round is won and every
	// node has answered: just before KindAcquired or KindExtended when the
	// last answer decided the round, otherwise after it, up to a node
	// timeout later (or when a silent node's driver gives up).
	KindSettled
)

var eventKindNames = [...]string{
	KindAttempt: "attempt", KindNode: "node", KindRetry: "retry",
	KindAcquired: "acquired", KindNotAcquired: "not_acquired",
	KindExtended: "extended", KindExtendFailed: "extend_failed",
	KindReleased: "released", KindReleaseFailed: "release_failed",
	KindLost: "lost", KindSettled: "settled",
}

func (k Kind) String() string {
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
	OpPublish // an election's leader record, written while the leader holds the key
)

var opNames = [...]string{OpAcquire: "acquire", OpFence: "fence", OpExtend: "extend", OpRelease: "release", OpPublish: "publish"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "unknown"
}

// An Outcome is what one node answered.
type Outcome uint8

const (
	OutcomeAgreed  Outcome = iota + 1 // the node did what was asked
	OutcomeRefused                    // the node answered no: the key is held by another token, or gone
	OutcomeFailed                     // no usable answer: an error reply, a broken connection, a timeout
)

var outcomeNames = [...]string{OutcomeAgreed: "agreed", OutcomeRefused: "refused", OutcomeFailed: "failed"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// An Event is one thing a Client did; see Kind for which fields each
// kind sets. The zero value of a field means "not set".
type Event struct {
	Kind Kind
	Key  string
	Op   Op

	// ID is the call the event belongs to: every event of one Lock or
	// TryLock call, one Extend or one Unlock, node answers included, has the
	// same ID, unique within the Client. KindLost has the ID of the call
	// that acquired the lock. Calls that report only when they end (Extend,
	// Unlock) give their Latency, so that a tracer can place their start.
	ID uint64

	Node    int     // node index, for KindNode
	Addr    string  // node address, if its Pool is a driver.Namer
	Outcome Outcome // for KindNode
	// Class sorts Err into a small fixed set, for metric labels: "timeout"
	// (a node did not answer within the node timeout), "canceled" and
	// "deadline" (the caller's context), an error reply's code ("NOPERM",
	// "READONLY", "OOM", "LOADING", "MOVED"...), "fence_ahead" (fencing's
	// second round met a higher counter), and "io" for anything else (a
	// refused or broken connection). "" when Err is nil.
	Class string

	Try     int
	Woken   bool // KindAttempt, KindRetry, KindAcquired: the attempt was started by a release announcement (wake.go)
	Latency time.Duration
	Wait    time.Duration
	HeldFor time.Duration
	Delay   time.Duration

	// For KindAcquired and KindExtended: the nodes holding the key when
	// the call returned, Lock.Margin then, and the quorum; for
	// KindSettled, the final counts. For KindRetry, Held is the number of
	// nodes the failed attempt held before it let them go: more than zero
	// with refusals too means the vote was split.
	Held, Margin, Quorum int
	Token                uint64
	Err                  error
}

// Slog returns an Observer that writes events to logger:
//   - WARN: a lock lost while Do's function ran; a lock acquired or extended
//     on a bare majority (once every node has answered, Margin 0: one more
//     node failure loses it); a release that failed;
//   - INFO: an Extend that failed;
//   - DEBUG: acquisitions, retries, releases, and each node's failure with
//     its class;
//
// and nothing for attempts or nodes that agreed or refused. A nil logger
// means slog.Default().
func Slog(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	key := slog.String("key", e.Key)
	switch e.Kind {
	case KindLost:
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock lost while held", key,
			slog.Duration("held_for", e.HeldFor), slog.Any("error", e.Err))
	case KindAcquired:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock acquired", key,
			slog.Duration("wait", e.Wait), slog.Int("tries", e.Try))
	case KindSettled:
		if e.Margin <= 0 && e.Quorum > 1 {
			o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: lock held on a bare majority: one more node failure loses it",
				key, slog.String("op", e.Op.String()), slog.Int("held", e.Held), slog.Int("quorum", e.Quorum))
		}
	case KindReleaseFailed:
		o.l.LogAttrs(ctx, slog.LevelWarn, "redlock: release failed", key, slog.Any("error", e.Err))
	case KindExtendFailed:
		o.l.LogAttrs(ctx, slog.LevelInfo, "redlock: extend failed", key, slog.Any("error", e.Err))
	case KindNotAcquired:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock not acquired", key,
			slog.Int("tries", e.Try), slog.Duration("wait", e.Wait), slog.Any("error", e.Err))
	case KindRetry:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: retrying", key, slog.Int("try", e.Try), slog.Duration("delay", e.Delay))
	case KindReleased:
		o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: lock released", key, slog.Duration("held_for", e.HeldFor))
	case KindNode:
		if e.Outcome == OutcomeFailed {
			o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: node failed", key, slog.String("op", e.Op.String()),
				slog.Int("node", e.Node), slog.String("addr", e.Addr), slog.String("class", e.Class), slog.Any("error", e.Err))
		}
	}
}

// Package redlockotel turns what a redlock Client does into OpenTelemetry
// metrics and spans. Its import path is github.com/quorumlock/redlock/otel;
// the package is called redlockotel so that it does not clash with
// go.opentelemetry.io/otel in the same file.
//
// It is a module of its own: a program that does not import it does not
// depend on OpenTelemetry, and a Client without an Observer builds no events
// at all.
//
// # Wiring
//
// Make one Observer per Client and pass it to redlock.WithObserver:
//
//	obs, err := redlockotel.NewObserver() // the global MeterProvider and TracerProvider
//	if err != nil {
//		return err
//	}
//	locker, err := redlock.New(pools, redlock.WithObserver(obs))
//
// WithMeterProvider and WithTracerProvider choose other providers; a
// TracerProvider from go.opentelemetry.io/otel/trace/noop turns spans off.
// One Observer must not serve two Clients: event IDs are unique only within
// a Client.
//
// # Metrics
//
// Durations are in seconds, as the semantic conventions ask.
//
//	name                           instrument     unit     attributes                           recorded at
//	redlock.lock.acquire.duration  histogram      s        outcome, error.type                  EventAcquired, EventNotAcquired (Wait: the whole Lock call)
//	redlock.lock.attempt.duration  histogram      s        outcome, error.type                  each attempt's end (retry, acquired, not_acquired)
//	redlock.lock.extend.duration   histogram      s        outcome, error.type                  EventExtended, EventExtendFailed (Latency)
//	redlock.lock.release.duration  histogram      s        outcome, error.type                  EventReleased, EventReleaseFailed (Latency)
//	redlock.lock.hold.duration     histogram      s        outcome (released, lost)             EventReleased, EventLost (HeldFor)
//	redlock.node.duration          histogram      s        node, op, server.*, outcome,         every EventNode (Latency), late ones included
//	                                                       error.type
//	redlock.lock.outcomes          counter        {call}   outcome, error.type                  every call's end, and EventLost
//	redlock.lock.retries           counter        {retry}  error.type                           EventRetry
//	redlock.node.errors            counter        {error}  node, op, server.*, error.type       EventNode with Outcome Failed
//	redlock.lock.held              updowncounter  {lock}   none                                 see Gauges
//	redlock.lock.degraded          updowncounter  {lock}   none                                 see Gauges
//
// The attributes:
//   - redlock.outcome: for calls, acquired, not_acquired, retry (an attempt
//     that Lock retried), extended, extend_failed, released, release_failed
//     or lost; for a node, agreed, refused or failed.
//   - error.type (the semantic conventions' attribute), only on failures:
//     for a node, observe.Event.Class ("timeout", "io", "canceled",
//     "deadline", "fence_ahead", or the error reply's code, such as
//     "READONLY" or "NOPERM"). For a call: "refused" (nodes answered no: the
//     key is held by another token, or gone), "lost" (ErrLockLost from
//     Extend or Unlock: the critical section may not have been exclusive),
//     "expired" (ErrExpired), "canceled" or "deadline" (the caller's
//     context), "invalid", "other", or else the class of its failed nodes:
//     "timeout" if one timed out, or the first reply code, or "io". For a
//     loss (outcome lost): "refused" when a majority refused an extension,
//     "expired" when the validity ran out first.
//   - redlock.node (the node's index), redlock.op (acquire, fence, extend,
//     release), and server.address and server.port when the node's Pool is a
//     driver.Namer (the whole name goes to server.address if it is not
//     host:port).
//   - redlock.key, on the lock-level metrics only, and only with
//     WithKeyAttribute.
//
// Cardinality: with the defaults every attribute takes a small, fixed set of
// values, nodes included (at most 64). Lock keys are usually unbounded
// (one per invoice, per tenant, per job): redlock.key would make a time
// series per key in every lock-level metric, which is why it is off unless
// asked for. Spans carry the key always; spans are not aggregated.
//
// # Gauges
//
// redlock.lock.held counts the locks this process holds as far as the
// Observer can tell; redlock.lock.degraded counts those of them whose latest
// acquisition or extension stood on a bare majority: Margin 0 with a quorum
// above 1, one node failure from loss (with two nodes, every lock). Both are
// counted, at each collection, from a table of held locks by key: made at
// EventAcquired, updated at EventExtended and at EventSettled (the final
// margin, once every node has answered), removed at EventReleased and
// EventReleaseFailed (a lock counts as released once Unlock begins), at an
// EventExtendFailed that found the lock expired or lost, at EventLost, and
// once WithMaxTTL has passed since the lock's latest acquisition or
// extension. Counting from a table rather than adding and subtracting means
// the gauges cannot drift: a lock is counted once at most, and not after the
// max ttl. What the events cannot tell, and the gauges therefore do not
// show (held.go has the details):
//   - a lock whose holder lets it run out without Unlock stays counted until
//     the key is locked again or the max ttl passes;
//   - Margin is final once EventSettled comes; a node that fails after it
//     answered (a later restart, say) degrades the lock without an event,
//     until the next Extend settles.
//
// # Spans
//
//	span            starts at                 ends at                               events
//	redlock.lock    EventAttempt, Try 1       EventAcquired or EventNotAcquired     redlock.node per node answer, redlock.retry per retry
//	redlock.extend  Latency before its end    EventExtended or EventExtendFailed    redlock.node per node answer
//	redlock.unlock  Latency before its end    EventReleased or EventReleaseFailed   redlock.node per node answer
//
// Each span is a child of the span in the caller's context (the ctx passed
// to Lock, Extend or Unlock), has the attribute redlock.key, and at its end
// redlock.outcome, and redlock.tries, redlock.held, redlock.margin,
// redlock.quorum and redlock.fencing_token where they apply. A failed call
// records its error, sets error.type, and ends with status Error. A node
// answer's event has redlock.node, redlock.op, redlock.outcome,
// redlock.duration (seconds), server.address and server.port, and for a
// failure error.type and error.message; it is timed when the answer came.
// Extend and Unlock report only their end, so their node answers are kept
// until then.
//
// A Lock, Extend or Unlock returns once a majority answered. The nodes that
// answer later (stragglers) are in the metrics but not in the span, which
// has ended. A loss in Do (EventLost) comes when no call of the Client's is
// running: it becomes a redlock.lock.lost event on the caller's span, if
// that span is recording.
//
// The state that spans need is kept per call and cannot leak: a call's end
// removes it, and a sweep drops whatever a call left behind when its end
// never came (a Lock whose token function panicked), ending its span with
// status Error.
//
// # Cost
//
// Observe runs on the Client's goroutines, and returns quickly. Measurements
// reuse attribute sets made once per combination of values, so that with
// spans off a Lock and its Unlock cost the Observer one allocation (the
// Lock call's state); spans cost what the SDK's spans and events cost.
// BenchmarkObserve keeps the numbers in view.
package redlockotel

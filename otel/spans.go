package redlockotel

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span and span event names.
const (
	spanLock   = "redlock.lock"
	spanExtend = "redlock.extend"
	spanUnlock = "redlock.unlock"
	eventNode  = "redlock.node"
	eventRetry = "redlock.retry"
	eventLost  = "redlock.lock.lost"
)

// Span attribute keys, besides those of metrics.go.
const (
	attrTries        = attribute.Key("redlock.tries")
	attrTry          = attribute.Key("redlock.try")
	attrHeld         = attribute.Key("redlock.held")
	attrMargin       = attribute.Key("redlock.margin")
	attrQuorum       = attribute.Key("redlock.quorum")
	attrFencingToken = attribute.Key("redlock.fencing_token")
	attrDelay        = attribute.Key("redlock.retry.delay") // seconds
	attrDuration     = attribute.Key("redlock.duration")    // seconds
	attrHeldFor      = attribute.Key("redlock.held_for")    // seconds
	attrErrorMessage = attribute.Key("error.message")
)

// The per-call state of spans, keyed by Event.ID.
//
// A Lock or TryLock call reports its start (EventAttempt, Try 1) and always
// its end (EventAcquired or EventNotAcquired), on the calling goroutine; its
// span is opened at the first and ended at the second, and the state goes
// with it. Its nodes' answers join the open span; those that come later
// (stragglers, which a lock call never waits for) find no state and go to
// the metrics only.
//
// Extend and Unlock report only their end, with their Latency. Their nodes'
// answers come first, and are kept (buffered) until the end event makes the
// span, starting Latency before it. The state then stays, ended, for
// stragglerWindow, so that answers arriving after the end (the nodes an
// Unlock did not wait for: usually N − quorum of them) are known as
// stragglers and not buffered again.
//
// Nothing here can grow without bound: every call ends (the Client reports
// the end on every path that made a node call, short of a panic in a token
// function or a Pool), ended entries go after stragglerWindow, and a sweep
// drops whatever is older than maxCallAge: the state of a call whose end
// never came, whose span is then ended with an error, and (after
// maxBufferedAge) answers that straggled in after their call's entry was
// gone.
const (
	// Stragglers answer within one node timeout of their call's start, and
	// the node timeout should be a small fraction of a lock's ttl.
	stragglerWindow = 5 * time.Second
	// Longer than any Lock call that does not wait on a context of its own:
	// the default 32 tries take seconds.
	maxCallAge = 10 * time.Minute
	// An Extend or Unlock takes at most one node timeout: answers kept
	// longer than this with no end belong to a call whose entry was gone.
	maxBufferedAge = time.Minute
	// How often, at most, a call's end sweeps the state.
	sweepEvery = time.Second
)

type callKind uint8

const (
	lockCall     callKind = iota + 1 // Lock or TryLock
	bufferedCall                     // Extend or Unlock
)

type call struct {
	kind callKind
	at   time.Time  // when it began; for an ended bufferedCall, when it ended
	span trace.Span // lockCall with tracing; set before the call is published

	// lockCall: written and read only by the Lock call's goroutine, whose
	// events come in order.
	attemptAt   time.Time
	attemptOpen bool

	// bufferedCall: under Observer.mu.
	ended   bool
	answers []answer
}

// An answer is a node's answer kept for a span not made yet.
type answer struct {
	at time.Time
	e  observe.Event
}

func (o *Observer) attempt(ctx context.Context, e observe.Event) {
	now := o.now()
	if e.Try > 1 {
		if c := o.lockCall(e.ID); c != nil {
			c.attemptAt, c.attemptOpen = now, true
		}
		return
	}
	c := &call{kind: lockCall, at: now, attemptAt: now, attemptOpen: true}
	if o.tracer != nil {
		_, c.span = o.tracer.Start(ctx, spanLock, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(now), trace.WithAttributes(attrKey.String(e.Key)))
	}
	o.mu.Lock()
	closed := o.closed
	if !closed {
		o.calls[e.ID] = c
	}
	o.mu.Unlock()
	if closed {
		c.abandon("redlockotel: Observer closed before the call ended")
	}
}

// lockCall returns the state of the Lock call id, or nil.
func (o *Observer) lockCall(id uint64) *call {
	o.mu.Lock()
	c := o.calls[id]
	o.mu.Unlock()
	if c == nil || c.kind != lockCall {
		return nil
	}
	return c
}

// nodeSpanEvent gives a node's answer to its call's span: at once to an open
// Lock span, or kept for an Extend or Unlock span.
func (o *Observer) nodeSpanEvent(e observe.Event) {
	now := o.now()
	switch e.Op {
	case observe.OpExtend, observe.OpRelease:
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.closed {
			return
		}
		c := o.calls[e.ID]
		if c == nil {
			c = &call{kind: bufferedCall, at: now}
			o.calls[e.ID] = c
		}
		if c.kind == bufferedCall && !c.ended {
			c.answers = append(c.answers, answer{at: now, e: e})
		}
	default: // OpAcquire, OpFence
		c := o.lockCall(e.ID)
		if c != nil && c.span != nil && c.span.IsRecording() {
			c.span.AddEvent(eventNode, trace.WithTimestamp(now), trace.WithAttributes(nodeAttrs(e)...))
		}
	}
}

// endBufferedLocked marks the Extend or Unlock id ended and returns the
// answers kept for its span, and whether to make the span.
func (o *Observer) endBufferedLocked(id uint64, now time.Time) ([]answer, bool) {
	if o.tracer == nil || o.closed {
		return nil, false
	}
	c := o.calls[id]
	switch {
	case c == nil: // no answer came before the end: stragglers may follow
		c = &call{kind: bufferedCall}
		o.calls[id] = c
	case c.kind != bufferedCall || c.ended:
		return nil, false
	}
	answers := c.answers
	c.answers, c.ended, c.at = nil, true, now
	return answers, true
}

// sweepLocked drops the state of calls past their time, at most once per
// sweepEvery, and returns the Lock calls whose spans must be ended, outside
// the lock.
func (o *Observer) sweepLocked(now time.Time) []*call {
	if now.Sub(o.lastSweep) < sweepEvery {
		return nil
	}
	o.lastSweep = now
	var abandoned []*call
	for id, c := range o.calls {
		age := now.Sub(c.at)
		switch {
		case c.kind == bufferedCall && (c.ended && age > stragglerWindow || age > maxBufferedAge):
			delete(o.calls, id)
		case c.kind == lockCall && age > maxCallAge:
			delete(o.calls, id)
			abandoned = append(abandoned, c)
		}
	}
	o.sweepHeldLocked(now)
	return abandoned
}

func endAll(abandoned []*call) {
	for _, c := range abandoned {
		c.abandon("redlockotel: the call reported no end within " + maxCallAge.String())
	}
}

// abandon ends the span of a call whose end will not be seen.
func (c *call) abandon(why string) {
	if c.span != nil {
		c.span.SetStatus(codes.Error, why)
		c.span.End()
	}
}

func (c *call) retried(now time.Time, e observe.Event, class string) {
	if c.span == nil || !c.span.IsRecording() {
		return
	}
	c.span.AddEvent(eventRetry, trace.WithTimestamp(now), trace.WithAttributes(
		attrTry.Int(e.Try), attrDelay.Float64(e.Delay.Seconds()), attrErrorType.String(class)))
}

func (c *call) endLock(now time.Time, e observe.Event, outcome, class string) {
	if c.span == nil {
		return
	}
	if c.span.IsRecording() {
		attrs := []attribute.KeyValue{attrOutcome.String(outcome), attrTries.Int(e.Try)}
		if e.Kind == observe.KindAcquired {
			attrs = append(attrs, attrHeld.Int(e.Held), attrMargin.Int(e.Margin), attrQuorum.Int(e.Quorum))
			if e.Token != 0 {
				attrs = append(attrs, attrFencingToken.Int64(int64(e.Token)))
			}
		}
		c.span.SetAttributes(attrs...)
		setError(c.span, e.Err, class)
	}
	c.span.End(trace.WithTimestamp(now))
}

// bufferedSpan makes the span of an Extend or Unlock that has ended, from
// began to now, with the node answers that came before the end.
func (o *Observer) bufferedSpan(ctx context.Context, name string, e observe.Event, began, now time.Time, answers []answer, outcome, class string) {
	_, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(began), trace.WithAttributes(attrKey.String(e.Key)))
	if span.IsRecording() {
		for _, a := range answers {
			span.AddEvent(eventNode, trace.WithTimestamp(a.at), trace.WithAttributes(nodeAttrs(a.e)...))
		}
		attrs := []attribute.KeyValue{attrOutcome.String(outcome)}
		switch e.Kind {
		case observe.KindExtended:
			attrs = append(attrs, attrHeld.Int(e.Held), attrMargin.Int(e.Margin), attrQuorum.Int(e.Quorum))
		case observe.KindReleased:
			attrs = append(attrs, attrHeldFor.Float64(e.HeldFor.Seconds()))
		}
		span.SetAttributes(attrs...)
		setError(span, e.Err, class)
	}
	span.End(trace.WithTimestamp(now))
}

// nodeAttrs describes one node's answer, for a span event.
func nodeAttrs(e observe.Event) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attrNode.Int(e.Node), attrOp.String(e.Op.String()), attrOutcome.String(e.Outcome.String()),
		attrDuration.Float64(e.Latency.Seconds()))
	attrs = appendAddr(attrs, e.Addr)
	if e.Class != "" {
		attrs = append(attrs, attrErrorType.String(e.Class))
	}
	if e.Err != nil && e.Outcome == observe.OutcomeFailed {
		attrs = append(attrs, attrErrorMessage.String(e.Err.Error()))
	}
	return attrs
}

func setError(span trace.Span, err error, class string) {
	if err == nil {
		return
	}
	span.SetAttributes(attrErrorType.String(class))
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// lostSpanEvent marks a loss on the caller's span.
func lostSpanEvent(ctx context.Context, e observe.Event, class string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attrKey.String(e.Key), attrErrorType.String(class), attrHeldFor.Float64(e.HeldFor.Seconds())}
	if e.Err != nil {
		attrs = append(attrs, attrErrorMessage.String(e.Err.Error()))
	}
	span.AddEvent(eventLost, trace.WithAttributes(attrs...))
}

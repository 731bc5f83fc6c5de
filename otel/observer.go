package redlockotel

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/redlock/observe"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/quorumlock/redlock/otel"

// An Observer turns a redlock Client's events into OpenTelemetry metrics and
// spans; pass it to redlock.WithObserver. Make one with NewObserver, one per
// Client: the events' IDs are unique only within a Client, so an Observer
// shared by two Clients could mix up their calls' spans and locks. An
// Observer is safe for concurrent use.
type Observer struct {
	inst   instruments
	reg    metric.Registration
	tracer trace.Tracer // nil: no spans, and no per-call state for them
	keys   bool         // redlock.key on lock-level metrics
	maxTTL time.Duration
	attrs  attrCache
	now    func() time.Time // time.Now; tests move it

	mu        sync.Mutex
	calls     map[uint64]*call    // by Event.ID; see spans.go
	held      map[string]heldLock // by key; see held.go
	lastSweep time.Time
	closed    bool
}

var _ observe.Observer = (*Observer)(nil)

// NewObserver returns an Observer that records redlock's metrics and spans
// with the providers in opts, by default the global ones. It returns an
// error for a bad option, or if the meter refuses an instrument.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg := config{maxTTL: DefaultMaxTTL}
	for _, opt := range opts {
		if opt == nil {
			cfg.fail("nil option")
			continue
		}
		opt(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	o := &Observer{
		keys:   cfg.keys,
		maxTTL: cfg.maxTTL,
		now:    time.Now,
		calls:  make(map[uint64]*call),
		held:   make(map[string]heldLock),
	}
	meter := cfg.mp.Meter(ScopeName)
	var err error
	if o.inst, err = newInstruments(meter); err != nil {
		return nil, err
	}
	o.reg, err = meter.RegisterCallback(o.observeGauges, o.inst.held, o.inst.degraded)
	if err != nil {
		return nil, err
	}
	switch cfg.tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
	default:
		o.tracer = cfg.tp.Tracer(ScopeName)
	}
	return o, nil
}

// Observe records one event, as the package documentation describes. The
// Client calls it; it returns without blocking on anything but the
// Observer's own short critical sections and the SDK's.
func (o *Observer) Observe(ctx context.Context, e observe.Event) {
	switch e.Kind {
	case observe.KindAttempt:
		o.attempt(ctx, e)
	case observe.KindNode:
		o.node(ctx, e)
	case observe.KindRetry:
		o.retry(ctx, e)
	case observe.KindAcquired, observe.KindNotAcquired:
		o.lockEnded(ctx, e)
	case observe.KindExtended, observe.KindExtendFailed:
		o.extendEnded(ctx, e)
	case observe.KindReleased, observe.KindReleaseFailed:
		o.unlockEnded(ctx, e)
	case observe.KindLost:
		o.lost(ctx, e)
	case observe.KindSettled:
		o.mu.Lock()
		o.settledLocked(e)
		o.mu.Unlock()
	}
}

// Close unregisters the gauges' callback from the MeterProvider and ends the
// spans of calls still open, with status Error. Events that come after
// Close still reach the counters and histograms (but for attempt
// durations, which need per-call state), and make no span.
// Close is needed only to let go of an Observer before its MeterProvider.
// It is safe to call more than once.
func (o *Observer) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	open := o.calls
	o.calls = make(map[uint64]*call)
	clear(o.held)
	o.mu.Unlock()
	for _, c := range open {
		c.abandon("redlockotel: Observer closed before the call ended")
	}
	return o.reg.Unregister()
}

func (o *Observer) node(ctx context.Context, e observe.Event) {
	s := attrSet{node: e.Node, addr: e.Addr, op: e.Op, outcome: e.Outcome.String(), class: e.Class}
	o.inst.node.Record(ctx, e.Latency.Seconds(), o.attrs.get(s).rec...)
	if e.Outcome == observe.OutcomeFailed {
		s.outcome = ""
		o.inst.nodeErrors.Add(ctx, 1, o.attrs.get(s).add...)
	}
	if o.tracer != nil {
		o.nodeSpanEvent(e)
	}
}

func (o *Observer) retry(ctx context.Context, e observe.Event) {
	now := o.now()
	class := callClass(e.Err, e.Class)
	o.inst.retries.Add(ctx, 1, o.lockOpts(e.Key, "", class).add...)
	if c := o.lockCall(e.ID); c != nil {
		if c.attemptOpen {
			c.attemptOpen = false
			o.inst.attempt.Record(ctx, now.Sub(c.attemptAt).Seconds(), o.lockOpts(e.Key, outcomeRetry, class).rec...)
		}
		c.retried(now, e, class)
	}
}

func (o *Observer) lockEnded(ctx context.Context, e observe.Event) {
	now := o.now()
	outcome, class := outcomeAcquired, ""
	if e.Kind == observe.KindNotAcquired {
		outcome, class = outcomeNotAcquired, callClass(e.Err, e.Class)
	}
	o.mu.Lock()
	c := o.calls[e.ID]
	if c != nil && c.kind == lockCall {
		delete(o.calls, e.ID)
	} else {
		c = nil
	}
	if e.Kind == observe.KindAcquired {
		o.acquiredLocked(e, now)
	}
	abandoned := o.sweepLocked(now)
	o.mu.Unlock()

	opts := o.lockOpts(e.Key, outcome, class)
	if c != nil && c.attemptOpen {
		o.inst.attempt.Record(ctx, now.Sub(c.attemptAt).Seconds(), opts.rec...)
	}
	o.inst.acquire.Record(ctx, e.Wait.Seconds(), opts.rec...)
	o.inst.outcomes.Add(ctx, 1, opts.add...)
	if c != nil {
		c.endLock(now, e, outcome, class)
	}
	endAll(abandoned)
}

func (o *Observer) extendEnded(ctx context.Context, e observe.Event) {
	now := o.now()
	began := now.Add(-e.Latency)
	outcome, class := outcomeExtended, ""
	if e.Kind == observe.KindExtendFailed {
		outcome, class = outcomeExtendFailed, callClass(e.Err, e.Class)
	}
	o.mu.Lock()
	switch {
	case e.Kind == observe.KindExtended:
		o.extendedLocked(e, now)
	case class == classExpired || class == classLost:
		// The lock's validity had passed, it was released, or the nodes
		// proved it gone: no longer held.
		o.endedLocked(e.Key, began)
	}
	answers, traced := o.endBufferedLocked(e.ID, now)
	abandoned := o.sweepLocked(now)
	o.mu.Unlock()

	opts := o.lockOpts(e.Key, outcome, class)
	o.inst.extend.Record(ctx, e.Latency.Seconds(), opts.rec...)
	o.inst.outcomes.Add(ctx, 1, opts.add...)
	if traced {
		o.bufferedSpan(ctx, spanExtend, e, began, now, answers, outcome, class)
	}
	endAll(abandoned)
}

func (o *Observer) unlockEnded(ctx context.Context, e observe.Event) {
	now := o.now()
	began := now.Add(-e.Latency)
	outcome, class := outcomeReleased, ""
	if e.Kind == observe.KindReleaseFailed {
		outcome, class = outcomeReleaseFailed, releaseClass(e.Err, e.Class)
	}
	o.mu.Lock()
	// A lock counts as released from the moment Unlock begins, whatever the
	// nodes answer (redlock.Lock.Unlock).
	o.endedLocked(e.Key, began)
	answers, traced := o.endBufferedLocked(e.ID, now)
	abandoned := o.sweepLocked(now)
	o.mu.Unlock()

	opts := o.lockOpts(e.Key, outcome, class)
	o.inst.release.Record(ctx, e.Latency.Seconds(), opts.rec...)
	o.inst.outcomes.Add(ctx, 1, opts.add...)
	if e.Kind == observe.KindReleased {
		o.inst.hold.Record(ctx, e.HeldFor.Seconds(), opts.rec...)
	}
	if traced {
		o.bufferedSpan(ctx, spanUnlock, e, began, now, answers, outcome, class)
	}
	endAll(abandoned)
}

// lost records a lock that Do lost while its function ran. No call of the
// Client's is running then, so there is no span of ours: the loss becomes an
// event on the caller's span, the one in ctx, if it is recording.
func (o *Observer) lost(ctx context.Context, e observe.Event) {
	class := lossClass(e.Err)
	o.mu.Lock()
	o.lostLocked(e)
	o.mu.Unlock()
	opts := o.lockOpts(e.Key, outcomeLost, class)
	o.inst.outcomes.Add(ctx, 1, opts.add...)
	o.inst.hold.Record(ctx, e.HeldFor.Seconds(), opts.rec...)
	if o.tracer != nil {
		lostSpanEvent(ctx, e, class)
	}
}

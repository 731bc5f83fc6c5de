package redlock

import (
	"context"
	"errors"
	"math/bits"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// errorClass sorts a node's failure into a small fixed set, for metric
// labels: "timeout" (ErrNodeTimeout), "canceled" and "deadline" (the
// caller's context), the error reply's code ("NOPERM", "READONLY", "OOM",
// "LOADING", "MOVED"...), "fence_ahead" (fencing's round 2 met a higher
// counter), "io" for anything else (a refused or broken connection), and ""
// for nil.
func errorClass(err error) string {
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

// WithObserver adds an Observer, told of every attempt, node answer and lock
// event (package observe). Observers stack: each one given is told of every
// event, in the order they were given, so that logs (observe.Slog) and
// OpenTelemetry (the otel module) can watch one Client together. The
// default is none, which costs nothing. A nil Observer is rejected.
func WithObserver(o observe.Observer) Option {
	return func(c *Client) {
		if isNil(o) {
			c.obsNil = true
			return
		}
		c.observers = append(c.observers, o)
	}
}

// tee tells each of several Observers of every event.
type tee []observe.Observer

func (t tee) Observe(ctx context.Context, e observe.Event) {
	for _, o := range t {
		o.Observe(ctx, e)
	}
}

// classed sets an event's Class from its Err where the event has an error
// but no class yet, so that every Observer sees the same classes.
type classed struct{ observe.Observer }

func (c classed) Observe(ctx context.Context, e observe.Event) {
	if e.Err != nil && e.Class == "" {
		e.Class = errorClass(e.Err)
	}
	c.Observer.Observe(ctx, e)
}

// joinObservers returns nil for none, and otherwise the Observers, one after
// the other, behind classed.
func joinObservers(obs []observe.Observer) observe.Observer {
	switch len(obs) {
	case 0:
		return nil
	case 1:
		return classed{obs[0]}
	}
	return classed{tee(obs)}
}

// observeNode reports one node's answer to a round.
func (c *Client) observeNode(ctx context.Context, id uint64, key string, kind observe.Op, nd *node, yes bool, err error, latency time.Duration) {
	e := observe.Event{Kind: observe.KindNode, ID: id, Key: key, Op: kind, Node: nd.index, Addr: nd.name, Latency: latency, Err: err}
	switch {
	case yes:
		e.Outcome = observe.OutcomeAgreed
	case err == nil:
		e.Outcome = observe.OutcomeRefused
	default:
		e.Outcome, e.Class = observe.OutcomeFailed, errorClass(err)
	}
	c.obs.Observe(ctx, e)
}

// reportSettled tells the observe.Observer that the won round behind m has heard
// from every node.
func (c *Client) reportSettled(ctx context.Context, l *Lock, op observe.Op, id uint64, m *nodeMasks) {
	held, quorum := bits.OnesCount64(m.agreed.Load()), c.quorum
	if l.need > 0 {
		quorum = l.need // a permit's: the semaphore's quorum
	}
	c.obs.Observe(ctx, observe.Event{Kind: observe.KindSettled, ID: id, Key: l.key, Op: op,
		Held: held, Margin: held - quorum, Quorum: quorum})
}

// newID returns the ID of a new call, for its events.
func (c *Client) newID() uint64 {
	if c.obs == nil {
		return 0
	}
	return c.ids.Add(1)
}

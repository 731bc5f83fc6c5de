package redlockotel

import (
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// DefaultMaxTTL is the default of WithMaxTTL.
const DefaultMaxTTL = 10 * time.Minute

// An Option configures an Observer. Options are checked by NewObserver.
type Option func(*config)

type config struct {
	mp     metric.MeterProvider
	tp     trace.TracerProvider
	keys   bool
	maxTTL time.Duration
	err    error // the first bad option
}

func (c *config) fail(msg string) {
	if c.err == nil {
		c.err = errors.New("redlockotel: " + msg)
	}
}

// WithMeterProvider sets the MeterProvider the metrics are made with. The
// default is the global one (otel.GetMeterProvider) at the time NewObserver
// runs. A nil provider is rejected.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail("nil MeterProvider")
		}
		c.mp = mp
	}
}

// WithTracerProvider sets the TracerProvider the spans are made with. The
// default is the global one (otel.GetTracerProvider) at the time NewObserver
// runs. A provider from go.opentelemetry.io/otel/trace/noop turns spans off,
// and with them the per-call state they need. A nil provider is rejected.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail("nil TracerProvider")
		}
		c.tp = tp
	}
}

// WithKeyAttribute adds the lock's key, as redlock.key, to the attributes of
// the lock-level metrics (not the node-level ones). The default is off: each
// distinct key makes a time series of its own in every such metric, which
// most backends charge for and some refuse. Turn it on only for a small,
// fixed set of keys. Spans carry the key either way.
func WithKeyAttribute() Option {
	return func(c *config) { c.keys = true }
}

// WithMaxTTL sets the longest ttl the Client's locks are taken or extended
// for. The held and degraded gauges stop counting a lock that was neither
// acquired nor extended for longer than this: its validity has certainly
// ended, even if no Unlock reported it. The default is DefaultMaxTTL (10
// minutes); a lock taken for longer, and not extended, leaves the gauges
// early. d must be positive.
func WithMaxTTL(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("max ttl " + d.String() + " must be positive")
		}
		c.maxTTL = d
	}
}

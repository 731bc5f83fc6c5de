package redlockotel

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/quorumlock/redlock/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names; doc.go has the table.
const (
	metricAcquire    = "redlock.lock.acquire.duration"
	metricAttempt    = "redlock.lock.attempt.duration"
	metricExtend     = "redlock.lock.extend.duration"
	metricRelease    = "redlock.lock.release.duration"
	metricHold       = "redlock.lock.hold.duration"
	metricNode       = "redlock.node.duration"
	metricOutcomes   = "redlock.lock.outcomes"
	metricRetries    = "redlock.lock.retries"
	metricNodeErrors = "redlock.node.errors"
	metricHeld       = "redlock.lock.held"
	metricDegraded   = "redlock.lock.degraded"
)

// Attribute keys. server.address, server.port and error.type are the
// OpenTelemetry semantic conventions' own.
const (
	attrKey       = attribute.Key("redlock.key")
	attrOutcome   = attribute.Key("redlock.outcome")
	attrOp        = attribute.Key("redlock.op")
	attrNode      = attribute.Key("redlock.node")
	attrErrorType = attribute.Key("error.type")
	attrAddress   = attribute.Key("server.address")
	attrPort      = attribute.Key("server.port")
)

// Outcomes of a whole call, for redlock.outcome; a node's answer uses
// observe.Outcome's names (agreed, refused, failed).
const (
	outcomeAcquired      = "acquired"
	outcomeNotAcquired   = "not_acquired"
	outcomeRetry         = "retry"
	outcomeExtended      = "extended"
	outcomeExtendFailed  = "extend_failed"
	outcomeReleased      = "released"
	outcomeReleaseFailed = "release_failed"
	outcomeLost          = "lost"
)

// Bucket boundaries, in seconds. The SDK's default ones suit milliseconds.
var (
	// A node answers in well under a millisecond on loopback, a few on a
	// LAN; a timeout is the node timeout, 50ms by default.
	nodeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	// A call is one node round or two; Lock waits for contended locks.
	callBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// Locks are held for as long as the work takes.
	holdBuckets = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
)

type instruments struct {
	acquire, attempt, extend, release, hold, node metric.Float64Histogram
	outcomes, retries, nodeErrors                 metric.Int64Counter
	held, degraded                                metric.Int64ObservableUpDownCounter
}

func newInstruments(m metric.Meter) (instruments, error) {
	var in instruments
	var errs [11]error
	hist := func(name, desc string, buckets []float64, i int) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs[i] = err
		return h
	}
	in.acquire = hist(metricAcquire, "Duration of Lock and TryLock calls, from the call to its return, retries included.", callBuckets, 0)
	in.attempt = hist(metricAttempt, "Duration of each acquisition attempt, without the pauses between attempts.", callBuckets, 1)
	in.extend = hist(metricExtend, "Duration of Extend calls.", callBuckets, 2)
	in.release = hist(metricRelease, "Duration of Unlock calls, until a majority answered.", callBuckets, 3)
	in.hold = hist(metricHold, "How long locks were held, from acquisition to release or loss.", holdBuckets, 4)
	in.node = hist(metricNode, "Duration of one node's part of an operation, from sending to its answer or failure.", nodeBuckets, 5)
	in.outcomes, errs[6] = m.Int64Counter(metricOutcomes, metric.WithUnit("{call}"),
		metric.WithDescription("Lock, Extend and Unlock calls and losses, by outcome and error type."))
	in.retries, errs[7] = m.Int64Counter(metricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Failed acquisition attempts that Lock retried, by error type."))
	in.nodeErrors, errs[8] = m.Int64Counter(metricNodeErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Node answers that failed (no usable answer), by node, operation and error type."))
	in.held, errs[9] = m.Int64ObservableUpDownCounter(metricHeld, metric.WithUnit("{lock}"),
		metric.WithDescription("Locks this process holds, as far as the Observer has seen."))
	in.degraded, errs[10] = m.Int64ObservableUpDownCounter(metricDegraded, metric.WithUnit("{lock}"),
		metric.WithDescription("Held locks whose latest acquisition or extension stood on a bare majority (margin 0)."))
	for _, err := range errs {
		if err != nil {
			return in, err
		}
	}
	return in, nil
}

// measureOpts holds the options of one attribute set, made once, so that
// recording passes a ready slice instead of building one per measurement.
type measureOpts struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

func newMeasureOpts(attrs ...attribute.KeyValue) *measureOpts {
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	return &measureOpts{rec: []metric.RecordOption{opt}, add: []metric.AddOption{opt}}
}

// attrSet names a combination of attribute values. node < 0 marks a
// lock-level set.
type attrSet struct {
	node    int
	addr    string
	op      observe.Op
	outcome string
	class   string
}

// maxCachedSets bounds the cache: nodes × ops × outcomes × error types is a
// few hundred, but reply codes come from servers.
const maxCachedSets = 1024

// attrCache keeps the measureOpts of each attrSet seen. Safe for
// concurrent use.
type attrCache struct {
	m sync.Map // attrSet → *measureOpts
	n atomic.Int32
}

func (c *attrCache) get(s attrSet) *measureOpts {
	if v, ok := c.m.Load(s); ok {
		return v.(*measureOpts)
	}
	mo := newMeasureOpts(s.attrs()...)
	if c.n.Load() < maxCachedSets {
		if v, loaded := c.m.LoadOrStore(s, mo); loaded {
			return v.(*measureOpts)
		}
		c.n.Add(1)
	}
	return mo
}

func (s attrSet) attrs() []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	if s.node >= 0 {
		attrs = append(attrs, attrNode.Int(s.node), attrOp.String(s.op.String()))
		attrs = appendAddr(attrs, s.addr)
	}
	if s.outcome != "" {
		attrs = append(attrs, attrOutcome.String(s.outcome))
	}
	if s.class != "" {
		attrs = append(attrs, attrErrorType.String(s.class))
	}
	return attrs
}

// appendAddr adds a node's address as server.address and server.port when
// it is host:port, as a Namer usually gives it, or whole as server.address.
func appendAddr(attrs []attribute.KeyValue, addr string) []attribute.KeyValue {
	if addr == "" {
		return attrs
	}
	if host, p, err := net.SplitHostPort(addr); err == nil {
		if port, err := strconv.Atoi(p); err == nil {
			return append(attrs, attrAddress.String(host), attrPort.Int(port))
		}
	}
	return append(attrs, attrAddress.String(addr))
}

// lockOpts returns the options of a lock-level measurement: with the key if
// WithKeyAttribute asked for it (then never cached: keys are unbounded).
func (o *Observer) lockOpts(key, outcome, class string) *measureOpts {
	s := attrSet{node: -1, outcome: outcome, class: class}
	if o.keys {
		return newMeasureOpts(append(s.attrs(), attrKey.String(key))...)
	}
	return o.attrs.get(s)
}

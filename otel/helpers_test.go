package redlockotel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
	redlockotel "github.com/quorumlock/redlock/otel"
	"github.com/quorumlock/redlock/redigo"
)

// TestMain fails the run if a test leaves a goroutine behind. The Observer
// starts none; the Clients' node calls end by Client.Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A harness is an Observer wired to the SDK's in-memory metric reader and
// span recorder.
type harness struct {
	obs    *redlockotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newHarness(t testing.TB, opts ...redlockotel.Option) *harness {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	obs, err := redlockotel.NewObserver(append([]redlockotel.Option{
		redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := obs.Close(); err != nil {
			t.Error(err)
		}
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	return &harness{obs: obs, reader: reader, spans: spans, tp: tp}
}

func (h *harness) metric(t testing.TB, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has every one of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sum adds up the points of the counter or gauge name whose attributes
// include want.
func (h *harness) sum(t testing.TB, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := h.metric(t, name)
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an int64 sum", name, m.Data)
	}
	var n int64
	for _, p := range data.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// count returns how many measurements the histogram name took with
// attributes that include want.
func (h *harness) count(t testing.TB, name string, want ...attribute.KeyValue) uint64 {
	t.Helper()
	m, ok := h.metric(t, name)
	if !ok {
		return 0
	}
	data, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, not a float64 histogram", name, m.Data)
	}
	var n uint64
	for _, p := range data.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Count
		}
	}
	return n
}

// attrSets returns the attribute sets of every point of the metric name.
func (h *harness) attrSets(t testing.TB, name string) []attribute.Set {
	t.Helper()
	m, ok := h.metric(t, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	var sets []attribute.Set
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range data.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range data.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

// ended returns the ended spans called name.
func (h *harness) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// oneSpan returns the only ended span called name.
func (h *harness) oneSpan(t testing.TB, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := h.ended(name)
	if len(spans) != 1 {
		t.Fatalf("%d %s spans ended, want 1", len(spans), name)
	}
	return spans[0]
}

// events returns the events called name of span.
func events(span sdktrace.ReadOnlySpan, name string) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range span.Events() {
		if e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// attr returns the value of key among attrs.
func attr(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func attrString(attrs []attribute.KeyValue, key string) string {
	v, _ := attr(attrs, key)
	return v.AsString()
}

func attrFloat(attrs []attribute.KeyValue, key string) float64 {
	v, _ := attr(attrs, key)
	return v.AsFloat64()
}

func attrInt(attrs []attribute.KeyValue, key string) int64 {
	v, ok := attr(attrs, key)
	if !ok {
		return -1
	}
	return v.AsInt64()
}

// A faultPool is a real node's pool with faults switched on and off by the
// test: a wait before each batch, or a reply lost after the batch ran (the
// command took effect on the node, the client saw a broken connection).
type faultPool struct {
	*redigo.Pool
	wait      atomic.Pointer[gate] // if set, each batch waits for it to open
	dropReply atomic.Bool
}

var errReplyLost = errors.New("connection reset by peer after the command was sent")

func (p *faultPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if g := p.wait.Load(); g != nil {
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := p.Pool.Exec(ctx, cmds, replies)
	if err == nil && p.dropReply.Load() {
		return errReplyLost
	}
	return err
}

// A gate opens once it has been passed n times.
type gate struct {
	left atomic.Int32
	open chan struct{}
}

func newGate(n int) *gate {
	g := &gate{open: make(chan struct{})}
	g.left.Store(int32(n))
	return g
}

func (g *gate) pass() {
	if g.left.Add(-1) == 0 {
		close(g.open)
	}
}

// A gatedObserver passes its gate, if one is set, each time it has
// observed a node's failure. Pools that wait on the same gate then answer
// only after the failures are known to the Client and the Observer, so
// that a lock is acquired knowing it stands on a bare majority, whatever
// the machine's load.
type gatedObserver struct {
	observe.Observer
	gate atomic.Pointer[gate]
}

func (o *gatedObserver) Observe(ctx context.Context, e observe.Event) {
	o.Observer.Observe(ctx, e)
	if e.Kind == observe.KindNode && e.Outcome == observe.OutcomeFailed {
		if g := o.gate.Load(); g != nil {
			g.pass()
		}
	}
}

// failuresFirst makes the pools at healthy answer the next round only after
// obs has seen failures node failures.
func (c *cluster) failuresFirst(obs *gatedObserver, failures int, healthy ...int) {
	g := newGate(failures)
	obs.gate.Store(g)
	for _, i := range healthy {
		c.pools[i].wait.Store(g)
	}
}

// A cluster is n real redis-server nodes, each reached through a faultPool.
type cluster struct {
	servers []*redistest.Server
	pools   []*faultPool
}

func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{servers: redistest.StartN(t, n)}
	for _, s := range c.servers {
		c.pools = append(c.pools, poolFor(t, s.Addr))
	}
	return c
}

func poolFor(t testing.TB, addr string) *faultPool {
	p := &faultPool{Pool: redigo.NewPool(addr)}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// testNodeTimeout is generous: tests run packages in parallel on small
// machines, where a fresh dial can outlast the 50ms default by far.
const testNodeTimeout = 5 * time.Second

// client returns a Client for pools observed by h, closed when t ends, so
// that its node calls have ended before the leak check.
func client(t testing.TB, h *harness, pools []*faultPool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return observedClient(t, h.obs, pools, opts...)
}

// gatedClient is client with h's Observer behind a gatedObserver.
func gatedClient(t testing.TB, h *harness, pools []*faultPool, opts ...redlock.Option) (*redlock.Client, *gatedObserver) {
	t.Helper()
	obs := &gatedObserver{Observer: h.obs}
	return observedClient(t, obs, pools, opts...), obs
}

func observedClient(t testing.TB, obs observe.Observer, pools []*faultPool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	ports := make([]redlock.Pool, len(pools))
	for i, p := range pools {
		ports[i] = p
	}
	opts = append([]redlock.Option{redlock.WithObserver(obs), redlock.WithNodeTimeout(testNodeTimeout)}, opts...)
	c, err := redlock.New(ports, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", limit, what)
		}
	}
}

package redlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/observe"
	redlockotel "github.com/quorumlock/redlock/otel"
)

// BenchmarkObserve feeds the events of one Lock and one Unlock on five nodes
// (two of them failing) to an Observer with the SDK's MeterProvider, without
// spans and with sampled ones, to keep its allocations in view.
func BenchmarkObserve(b *testing.B) {
	b.Run("metrics", func(b *testing.B) {
		benchObserve(b, noop.NewTracerProvider())
	})
	b.Run("metrics+spans", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider() // samples every span, exports none
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		benchObserve(b, tp)
	})
}

func benchObserve(b *testing.B, tp trace.TracerProvider) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = obs.Close() })
	ctx := context.Background()
	down := &redlock.NodeError{Node: 3, Addr: "10.0.0.4:6379", Err: errors.New("connection refused")}
	nodes := func(id uint64, o observe.Op) {
		for i := range 5 {
			e := observe.Event{Kind: observe.KindNode, ID: id, Key: "bench", Op: o, Node: i,
				Addr: "10.0.0.1:6379", Outcome: observe.OutcomeAgreed, Latency: 300 * time.Microsecond}
			if i >= 3 {
				e.Outcome, e.Class, e.Err = observe.OutcomeFailed, "io", down
			}
			obs.Observe(ctx, e)
		}
	}
	b.ReportAllocs()
	var id uint64
	for b.Loop() {
		id += 2
		obs.Observe(ctx, observe.Event{Kind: observe.KindAttempt, ID: id, Key: "bench", Try: 1})
		nodes(id, observe.OpAcquire)
		obs.Observe(ctx, observe.Event{Kind: observe.KindAcquired, ID: id, Key: "bench", Try: 1,
			Wait: time.Millisecond, Held: 3, Margin: 0, Quorum: 3})
		nodes(id+1, observe.OpRelease)
		obs.Observe(ctx, observe.Event{Kind: observe.KindReleased, ID: id + 1, Key: "bench",
			Latency: time.Millisecond, HeldFor: time.Millisecond})
	}
}

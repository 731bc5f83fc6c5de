package redlockotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quorumlock/redlock"
	redlockotel "github.com/quorumlock/redlock/otel"
	"github.com/quorumlock/redlock/redigo"
)

// Wire the Observer into a Client. With no options it uses the global
// MeterProvider and TracerProvider, as set by otel.SetMeterProvider and
// otel.SetTracerProvider when the program starts.
func ExampleNewObserver() {
	obs, err := redlockotel.NewObserver()
	if err != nil {
		log.Fatal(err)
	}
	pools := []redlock.Pool{
		redigo.NewPool("redis-a:6379"),
		redigo.NewPool("redis-b:6379"),
		redigo.NewPool("redis-c:6379"),
	}
	locker, err := redlock.New(pools, redlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
}

// Lock and unlock over three masters, and read the outcome counter back
// from an in-memory reader. The masters here are in-process (miniredis).
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := redlockotel.NewObserver(redlockotel.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}

	var pools []redlock.Pool
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		p := redigo.NewPool(m.Addr())
		defer p.Close()
		pools = append(pools, p)
	}
	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50 ms).
	locker, err := redlock.New(pools, redlock.WithObserver(obs), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.Lock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redlock.lock.outcomes" {
				for _, p := range sum.DataPoints {
					outcome, _ := p.Attributes.Value("redlock.outcome")
					lines = append(lines, fmt.Sprintf("%s %s=%s: %d", m.Name, "redlock.outcome", outcome.Emit(), p.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// redlock.lock.outcomes redlock.outcome=acquired: 1
	// redlock.lock.outcomes redlock.outcome=released: 1
}

// Package benchkit is the measuring harness shared by the root benchmarks
// and the peer comparison in bench/: the same loops and latency metrics for
// every implementation, so that only the implementations differ.
package benchkit

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An Op is one measured operation on key: a Lock+Unlock, or its floor.
type Op func(ctx context.Context, key string) error

// Serial runs op b.N times from one goroutine, each on a fresh key.
func Serial(b *testing.B, op Op) {
	ctx := context.Background()
	ks := keys(b)
	rec := newRecorder(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rec.observe(start, op(ctx, ks[i]))
	}
	rec.report(b)
}

// Parallel runs op over distinct keys with b.SetParallelism(p), that is
// p×GOMAXPROCS goroutines, and reports ops/s besides the latencies.
func Parallel(b *testing.B, op Op, p int) {
	ctx := context.Background()
	ks := keys(b)
	rec := newRecorder(b.N)
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(p)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := ks[next.Add(1)-1]
			t := time.Now()
			rec.observe(t, op(ctx, key))
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	rec.report(b)
}

// Callers runs op b.N times in all from exactly k goroutines, over
// distinct keys, whatever GOMAXPROCS is, and reports ops/s besides the
// latencies: the sweep of throughput against callers (docs/benchmarks.md).
func Callers(b *testing.B, op Op, k int) {
	ctx := context.Background()
	ks := keys(b)
	rec := newRecorder(b.N)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t := time.Now()
				rec.observe(t, op(ctx, ks[i]))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	rec.report(b)
}

// Contention runs handoff b.N times in all from k goroutines, on one key, and
// reports handoffs/s: how often the lock changes hands. handoff must retry
// until it holds the key; the whole run is bounded by a minute.
func Contention(b *testing.B, handoff Op, k int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := keyPrefix(b) + "shared"
	rec := newRecorder(b.N)
	var (
		wg   sync.WaitGroup
		left atomic.Int64
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 { // claims one of the b.N handoffs
				t := time.Now()
				rec.observe(t, handoff(ctx, key))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handoffs/s")
	rec.report(b)
}

// A recorder keeps every operation's latency in a slice sized before the
// timer starts, so recording allocates nothing inside the measured loop.
type recorder struct {
	lat  []time.Duration
	next atomic.Int64
	errs atomic.Int64
	last atomic.Value // error
}

func newRecorder(n int) *recorder { return &recorder{lat: make([]time.Duration, n)} }

// observe records one operation that started at start and returned err.
func (r *recorder) observe(start time.Time, err error) {
	d := time.Since(start)
	if i := r.next.Add(1) - 1; int(i) < len(r.lat) {
		r.lat[i] = d
	}
	if err != nil {
		r.errs.Add(1)
		r.last.Store(err)
	}
}

// report adds p50, p99 and max latency to b's results, and the fraction of
// operations that failed, which also count in the latencies. A failure is a
// result, not a harness error: a node timeout under overload is the library
// doing its job.
func (r *recorder) report(b *testing.B) {
	b.StopTimer()
	n := min(int(r.next.Load()), len(r.lat))
	if n == 0 {
		return
	}
	lat := r.lat[:n]
	slices.Sort(lat)
	b.ReportMetric(us(lat[n/2]), "p50-µs")
	b.ReportMetric(us(lat[(n*99)/100]), "p99-µs")
	b.ReportMetric(us(lat[n-1]), "max-µs")
	b.ReportMetric(float64(r.errs.Load())/float64(n), "fails/op")
	if e := r.errs.Load(); e > 0 {
		b.Logf("%d of %d operations failed; last: %v", e, n, r.last.Load())
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// keys returns b.N distinct keys, made before the timer starts.
func keys(b *testing.B) []string {
	prefix := keyPrefix(b)
	ks := make([]string, b.N)
	for i := range ks {
		ks[i] = prefix + strconv.Itoa(i)
	}
	return ks
}

// runID makes keys unique across the repeated runs of one benchmark.
var runID atomic.Int64

func keyPrefix(b *testing.B) string {
	return "bench:" + b.Name() + ":" + strconv.FormatInt(runID.Add(1), 10) + ":"
}

// Paired measures ops alternately, in short slices, so that each round's
// ops see nearly the same machine: b.N rounds, in each of which every op
// runs alone for one slice, in an order that rotates from round to round,
// from k goroutines over distinct keys. It reports each op's successful
// operations per second over all rounds ("okops/s-<name>"), and for each
// later op the median and the lowest of its per-round ratios to the first
// ("x<name>-p50", "x<name>-min"). ns/op is the length of a round; B/op
// and allocs/op, which would count every op of a round together, are not
// reported.
//
// A shared machine changes speed from one second to the next, by more than
// the ratios this suite measures: on a 2-vCPU machine, consecutive
// half-second runs of one case ranged over nearly 2× (docs/benchmarks.md).
// Cases run one after the other compare different moments; a round here
// compares its ops within about a second. A single round is still one
// short slice of each, and noisy; the median of b.N rounds is the figure.
//
// Each slice counts the operations that succeed between warm and warm+run
// after its goroutines start: not the first operations, which start
// together, nor those in flight at its end, whose latency would count
// against the slower op. Each slice starts after a collection, so that one
// op's garbage is not collected in the other's time; what an op leaves
// running once its calls have returned (a release still on its way to the
// last nodes) still overlaps the next slice's start. The goroutines finish
// their operations before the next slice starts, so an op that never
// returns stops the benchmark. A round in which the first op succeeded not
// once gives no ratio.
func Paired(b *testing.B, names []string, ops []Op, k int, warm, run time.Duration) {
	if len(ops) < 2 || len(names) != len(ops) || k < 1 {
		b.Fatalf("benchkit.Paired: %d names, %d ops, %d goroutines", len(names), len(ops), k)
	}
	b.ResetTimer()
	res := pairedRounds(b.N, keyPrefix(b), ops, k, warm, run, runSlice)
	b.StopTimer()
	for i, name := range names {
		b.ReportMetric(res.okPerSec[i], "okops/s-"+name)
		if i > 0 && len(res.ratios[i]) > 0 {
			b.ReportMetric(median(res.ratios[i]), "x"+name+"-p50")
			b.ReportMetric(slices.Min(res.ratios[i]), "x"+name+"-min")
		}
	}
}

// pairedResult is what pairedRounds measured: each op's successes per
// second over all rounds, and each later op's per-round ratios to the
// first, in round order.
type pairedResult struct {
	okPerSec []float64
	ratios   [][]float64
}

// A slicer runs one slice of op and returns its successes (runSlice).
type slicer func(op Op, prefix string, k int, warm, run time.Duration) int64

// pairedRounds runs the rounds of Paired, each slice by slice.
func pairedRounds(rounds int, prefix string, ops []Op, k int, warm, run time.Duration, slice slicer) pairedResult {
	counts := make([]int64, len(ops))
	res := pairedResult{okPerSec: make([]float64, len(ops)), ratios: make([][]float64, len(ops))}
	for round := range rounds {
		perSec := make([]float64, len(ops))
		for j := range ops {
			i := (round + j) % len(ops)
			runtime.GC() // the last slice's garbage is not this one's to collect
			n := slice(ops[i], prefix+strconv.Itoa(round)+":"+strconv.Itoa(i)+":", k, warm, run)
			counts[i] += n
			perSec[i] = float64(n) / run.Seconds()
		}
		for i := 1; i < len(ops); i++ {
			if perSec[0] > 0 {
				res.ratios[i] = append(res.ratios[i], perSec[i]/perSec[0])
			}
		}
	}
	for i, n := range counts {
		res.okPerSec[i] = float64(n) / (float64(max(rounds, 1)) * run.Seconds())
	}
	return res
}

// median returns the median of vs (the mean of the middle two for an even
// count), without reordering vs.
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// runSlice runs op from k goroutines on keys under prefix for warm+run,
// and returns how many calls succeeded in the last run of it; see Paired.
func runSlice(op Op, prefix string, k int, warm, run time.Duration) int64 {
	ctx := context.Background()
	var (
		wg         sync.WaitGroup
		next, good atomic.Int64
		counting   atomic.Bool
		stop       atomic.Bool
	)
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				err := op(ctx, prefix+strconv.FormatInt(next.Add(1), 10))
				if err == nil && counting.Load() && !stop.Load() {
					good.Add(1)
				}
			}
		}()
	}
	time.Sleep(warm)
	counting.Store(true)
	time.Sleep(run)
	stop.Store(true)
	n := good.Load()
	wg.Wait()
	return n
}

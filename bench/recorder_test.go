package bench

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

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
// doing its job. Call report after the measured loop.
func (r *recorder) report(b *testing.B) {
	b.StopTimer()
	n := min(int(r.next.Load()), len(r.lat))
	lat := r.lat[:n]
	slices.Sort(lat)
	if n > 0 {
		b.ReportMetric(us(lat[n/2]), "p50-µs")
		b.ReportMetric(us(lat[(n*99)/100]), "p99-µs")
		b.ReportMetric(us(lat[n-1]), "max-µs")
	}
	if n > 0 {
		b.ReportMetric(float64(r.errs.Load())/float64(n), "fails/op")
	}
	if e := r.errs.Load(); e > 0 {
		b.Logf("%d of %d operations failed; last: %v", e, n, r.last.Load())
	}
}

// keys returns n distinct keys, made before the timer starts.
func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = prefix + strconv.Itoa(i)
	}
	return ks
}

// runID makes keys unique across the repeated runs of one benchmark.
var runID atomic.Int64

func keyPrefix(name string) string {
	return "bench:" + name + ":" + strconv.FormatInt(runID.Add(1), 10) + ":"
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

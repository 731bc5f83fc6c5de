package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/observe"
	"github.com/quorumlock/redlock/redigo"
)

// The hand-over cases of docs/benchmarks.md ("Contention: hand-over"): W
// workers, each a process of its own (its own Client, or its own redsync
// instance), want one key again and again. Each holds it for hold, lets it
// go, and works for work before it wants it again. Both libraries run with
// their defaults, as a user who changed nothing would: for redlock the
// 50-250ms timed retries with wake-up on release, for redsync its 50-250ms
// retries.
//
// The cases: eight workers holding 200 µs, the contended one; and two
// workers holding 3 ms, so that the other worker is always waiting when one
// releases (it came back from its 2 ms of work during the hold) and the
// releaser is still working when the next grant comes: one lone waiter
// per release, the hand-over path with nothing else in it.
var handoverCases = []struct {
	workers int
	hold    time.Duration
	name    string
}{
	{8, 200 * time.Microsecond, "w=8"},
	{2, 3 * time.Millisecond, "w=2/hold=3ms"},
}

const (
	handoverWork = 2 * time.Millisecond
	handoverTTL  = 8 * time.Second // redsync's default expiry
)

// A handoverWorker is one process wanting the key.
type handoverWorker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

type redlockWorker struct {
	c   *redlock.Client
	key string
	l   *redlock.Lock
}

func (w *redlockWorker) lock(ctx context.Context) (err error) {
	w.l, err = w.c.Lock(ctx, w.key, handoverTTL)
	return err
}

func (w *redlockWorker) unlock(ctx context.Context) error { return w.l.Unlock(ctx) }

type redsyncWorker struct{ m *redsync.Mutex }

func (w *redsyncWorker) lock(ctx context.Context) error { return w.m.LockContext(ctx) }
func (w *redsyncWorker) unlock(ctx context.Context) error {
	return unlocked(w.m.UnlockContext(ctx))
}

// splitCounter counts the redlock workers' woken attempts, and those that
// lost while holding some nodes: split votes. It also records how long each
// winning attempt took (wonRounds), through each worker's attemptClock.
type splitCounter struct {
	woken, split atomic.Int64

	mu        sync.Mutex
	wonRounds []time.Duration
}

// An attemptClock is one worker's observer: event IDs are its Client's.
type attemptClock struct {
	s     *splitCounter
	began map[uint64]time.Time // by event ID: the last attempt's start
}

func (a *attemptClock) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.KindAttempt:
		if e.Woken {
			a.s.woken.Add(1)
		}
		a.began[e.ID] = time.Now() // a worker runs one Lock call at a time
	case e.Kind == observe.KindRetry && e.Woken && e.Held > 0:
		a.s.split.Add(1)
	case e.Kind == observe.KindAcquired:
		took := time.Since(a.began[e.ID])
		delete(a.began, e.ID)
		a.s.mu.Lock()
		a.s.wonRounds = append(a.s.wonRounds, took)
		a.s.mu.Unlock()
	}
}

// BenchmarkHandover runs b.N lock grants in all over each case's workers
// on N=5 local nodes, and reports:
//   - handovers/s: grants to a worker other than the previous holder, per
//     second of the run;
//   - wait-p50-µs, wait-p99-µs, wait-max-µs: from wanting the key to holding
//     it, across Lock calls that gave up (a default Lock gives up after about
//     5 s);
//   - handover-p50-µs, handover-p99-µs: from the previous holder's Unlock
//     call to the next holder's grant, for grants to another worker;
//   - waiter-handover-p50-µs, waiter-handover-p99-µs: the same, for the
//     grants to a worker that was already waiting when the Unlock was
//     called (the others went to a worker that came back from its work
//     after the release and found the key free: their latency is when it
//     came back);
//   - rtt-p50-µs: one round to the five nodes (a PING to each in parallel),
//     the yardstick for the hand-over;
//   - round-p50-µs (redlock): one TryLock on a free key, the SET round as
//     this library sends it (its pipes and fan-out included), with nothing
//     else running: the hand-over's last step;
//   - won-round-p50-µs (redlock): the same step during the run, the winning
//     attempt of each grant, from its start to the grant;
//   - unlock-p50-µs: the Unlock calls during the run, the release round as
//     the releaser sees it (the notices go out with its replies);
//   - self/op: grants that went back to the previous holder;
//   - splits/woken (redlock): woken attempts that lost holding some nodes.
//
// With REDLOCK_BENCH_WAITS set to a file name, every wait of the w=8 case
// is appended to it as impl,wait_ns (the CDF plot in docs/benchmarks/).
func BenchmarkHandover(b *testing.B) {
	addrs := startNodes(b, 5)
	pools := newPools(b, addrs)
	rtt := roundTrip(b, pools)
	round := lockRound(b, pools, addrs)
	for _, hc := range handoverCases {
		for _, impl := range []string{"redlock", "redsync"} {
			b.Run(fmt.Sprintf("N=5/%s/impl=%s", hc.name, impl), func(b *testing.B) {
				handover(b, pools, addrs, impl, hc.workers, hc.hold, rtt, round)
			})
		}
	}
}

// handover runs one case of BenchmarkHandover: w workers of impl, each
// holding the key for hold.
func handover(b *testing.B, pools []*redis.Pool, addrs []string, impl string, w int, hold, rtt, round time.Duration) {
	key := fmt.Sprintf("handover:%s:%d", impl, time.Now().UnixNano())
	workers := make([]handoverWorker, w)
	var splits splitCounter
	for i := range workers {
		switch impl {
		case "redlock":
			ps := make([]redlock.Pool, len(pools))
			for j, p := range pools {
				ps[j] = &redigo.Pool{Pool: p, Addr: addrs[j]}
			}
			c, err := redlock.New(ps, redlock.WithObserver(&attemptClock{s: &splits, began: map[uint64]time.Time{}}))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			workers[i] = &redlockWorker{c: c, key: key}
		case "redsync":
			workers[i] = &redsyncWorker{m: newRedsyncOn(pools).NewMutex(key, redsync.WithExpiry(handoverTTL))}
		}
	}
	r := runHandover(b, workers, hold)
	b.ReportMetric(float64(r.handovers)/r.elapsed.Seconds(), "handovers/s")
	b.ReportMetric(pct(r.waits, 50), "wait-p50-µs")
	b.ReportMetric(pct(r.waits, 99), "wait-p99-µs")
	b.ReportMetric(pct(r.waits, 100), "wait-max-µs")
	b.ReportMetric(pct(r.latency, 50), "handover-p50-µs")
	b.ReportMetric(pct(r.latency, 99), "handover-p99-µs")
	b.ReportMetric(pct(r.waiterLatency, 50), "waiter-handover-p50-µs")
	b.ReportMetric(pct(r.waiterLatency, 99), "waiter-handover-p99-µs")
	b.ReportMetric(us(rtt), "rtt-p50-µs")
	b.ReportMetric(pct(r.unlocks, 50), "unlock-p50-µs")
	if impl == "redlock" {
		b.ReportMetric(us(round), "round-p50-µs")
		b.ReportMetric(pct(splits.wonRounds, 50), "won-round-p50-µs")
	}
	b.ReportMetric(float64(r.self)/float64(b.N), "self/op")
	if impl == "redlock" && splits.woken.Load() > 0 {
		b.ReportMetric(float64(splits.split.Load())/float64(splits.woken.Load()), "splits/woken")
	}
	if r.gaveUp > 0 {
		b.Logf("%d Lock calls gave up and were called again", r.gaveUp)
	}
	if path := os.Getenv("REDLOCK_BENCH_WAITS"); path != "" && w == handoverCases[0].workers {
		writeWaits(b, path, impl, r.waits)
	}
}

type handoverResult struct {
	waits, latency  []time.Duration
	waiterLatency   []time.Duration // latency of the hand-overs to a worker that waited
	unlocks         []time.Duration // how long each Unlock call took
	handovers, self int
	gaveUp          int64
	elapsed         time.Duration
}

// runHandover runs the workers, each holding the key for hold, until b.N
// grants in all, at most a few minutes.
func runHandover(b *testing.B, workers []handoverWorker, hold time.Duration) handoverResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu       sync.Mutex
		r        handoverResult
		last     = -1 // the previous holder
		released time.Time
		left     atomic.Int64
		gaveUp   atomic.Int64
		wg       sync.WaitGroup

		unlockFailed atomic.Int64
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for id, w := range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				want := time.Now()
				for {
					if err := w.lock(ctx); err == nil {
						break
					}
					if ctx.Err() != nil {
						return
					}
					gaveUp.Add(1) // the library gave up; the worker still wants the key
				}
				granted := time.Now()
				mu.Lock()
				r.waits = append(r.waits, granted.Sub(want))
				if last == id {
					r.self++
				} else if last >= 0 {
					r.handovers++
					r.latency = append(r.latency, granted.Sub(released))
					if want.Before(released) {
						r.waiterLatency = append(r.waiterLatency, granted.Sub(released))
					}
				}
				last = id
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
				released = time.Now()
				began := released // the next holder may set released before Unlock returns
				mu.Unlock()
				err := w.unlock(ctx)
				took := time.Since(began)
				mu.Lock()
				r.unlocks = append(r.unlocks, took)
				mu.Unlock()
				if err != nil {
					unlockFailed.Add(1) // the key expires at its ttl; a loaded machine's node timeouts
				}
				time.Sleep(handoverWork)
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	b.StopTimer()
	r.gaveUp = gaveUp.Load()
	if n := unlockFailed.Load(); n > 0 {
		b.Logf("%d unlocks failed", n)
	}
	if ctx.Err() != nil {
		b.Fatalf("the run did not finish in 5 minutes")
	}
	return r
}

// roundTrip returns the median time of a PING sent to every node in
// parallel: one round of the algorithm with no work in it.
func roundTrip(b *testing.B, pools []*redis.Pool) time.Duration {
	conns := make([]redis.Conn, len(pools))
	for i, p := range pools {
		conns[i] = p.Get()
		defer conns[i].Close()
	}
	var rounds []time.Duration
	for range 200 {
		start := time.Now()
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() {
				if _, err := c.Do("PING"); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		rounds = append(rounds, time.Since(start))
	}
	return time.Duration(pct(rounds, 50) * float64(time.Microsecond))
}

// lockRound returns the median time of a TryLock on a free key with a
// Client on pools: one SET round to the nodes as the library sends it.
func lockRound(b *testing.B, pools []*redis.Pool, addrs []string) time.Duration {
	ps := make([]redlock.Pool, len(pools))
	for i, p := range pools {
		ps[i] = &redigo.Pool{Pool: p, Addr: addrs[i]}
	}
	c, err := redlock.New(ps)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var rounds []time.Duration
	for i := range 220 {
		key := fmt.Sprintf("handover:round:%d:%d", time.Now().UnixNano(), i)
		start := time.Now()
		l, err := c.TryLock(ctx, key, handoverTTL)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		if i >= 20 { // the first ones dial
			rounds = append(rounds, took)
		}
	}
	return time.Duration(pct(rounds, 50) * float64(time.Microsecond))
}

// pct returns the p-th percentile of ds in µs (p = 100: the maximum); ds is
// sorted in place.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return us(ds[min(len(ds)-1, len(ds)*p/100)])
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// writeWaits appends impl's waits to the CSV file at path, with its header
// if the file is new.
func writeWaits(b *testing.B, path, impl string, waits []time.Duration) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		fmt.Fprintln(f, "impl,wait_ns")
	}
	for _, w := range waits {
		fmt.Fprintf(f, "%s,%d\n", impl, w.Nanoseconds())
	}
}

package redlock_test

// The soak test: the chaos suite's random faults (chaos_test.go) on five
// durable Redis nodes in Docker, for half an hour by default, with eight
// Clients contending for one key. Besides the checker's verdict it watches
// the process for leaks: goroutines and live heap must not grow from one
// quiet moment to the next. make soak runs it; docs/chaos.md has results.
//
//	make soak                                    # 30 minutes
//	REDLOCK_SOAK_DURATION=5m make soak
//	REDLOCK_SOAK_DURATION=5m REDLOCK_CHAOS_SEED=1 go test -race -run 'TestSoak$' -timeout 30m -v .

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// soakDurationEnv sets the soak's length; without it TestSoak is skipped.
// soakProfileEnv names a directory for a heap profile at each measurement,
// sampled finely, for go tool pprof -base when the heap grows.
const (
	soakDurationEnv = "REDLOCK_SOAK_DURATION"
	soakProfileEnv  = "REDLOCK_SOAK_PROFILES"
)

// Leak thresholds, measured from the end of the first epoch (when pools
// and caches have reached their working size) to the end of the run, each
// time with the load stopped, background node calls settled and the heap
// collected. In those quiet moments the test binary has two goroutines and
// 3 to 6 MiB of live heap. Part of that grows, boundedly: each pipe keeps
// up to maxFreeCalls answered calls for reuse, and the deepest queue a
// fault storm builds raises that stock for good (heap profiles of a soak
// show it as the whole growth). So the heap may grow by
// soakHeapSlack plus soakCallBytes for each call the pipes added to their
// stock. A goroutine leaked per lock cycle would cross the first threshold
// within a second; a Lock (some 400 bytes with its arguments) kept per
// cycle, the second within ten minutes.
const (
	soakGoroutineSlack = 10      // goroutines
	soakHeapSlack      = 4 << 20 // bytes
	soakCallBytes      = 1024    // a pooled call with its arguments, channel and share of batch buffers: about 600 measured
)

// soakEpoch is the longest stretch of load between two measurements.
// soakHarnessErrors is how many faults Docker may fail to inject or heal
// before the run no longer counts as the schedule drawn.
const (
	soakEpoch         = 5 * time.Minute
	soakHarnessErrors = 3
)

func TestSoak(t *testing.T) {
	s := os.Getenv(soakDurationEnv)
	if s == "" {
		t.Skipf("a long run: set %s (make soak sets 30m) to run random faults on Redis nodes in Docker for that long", soakDurationEnv)
	}
	total, err := time.ParseDuration(s)
	if err != nil || total <= 0 {
		t.Fatalf("%s=%q: want a positive duration", soakDurationEnv, s)
	}
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < total+10*time.Minute {
		t.Fatalf("go test -timeout leaves %v, too little for %s=%v and 10 minutes to spare",
			time.Until(deadline).Round(time.Second), soakDurationEnv, total)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
	}
	t.Logf("seed %d; replay the fault schedule with %s=%d", seed, chaosSeedEnv, seed)

	const (
		clients     = 8
		nodeTimeout = 150 * time.Millisecond
		tries       = 3
		retryMax    = 20 * time.Millisecond
	)
	// As in TestChaosRandomFaults: fencing, so every node is durable.
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	var (
		cls   []*redlock.Client
		pools []redlock.Pool // for their connection counts
	)
	for range clients {
		ps := realPools(t, c.Addrs())
		cl, err := redlock.New(ps, redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(),
			redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		cls, pools = append(cls, cl), append(pools, ps...)
	}
	run := soakRun{
		clients:    cls,
		cluster:    c,
		ttl:        time.Second,
		lockBudget: chaosLockBudget(tries, true, nodeTimeout, retryMax),
		callBudget: nodeTimeout + chaosSlack,
	}

	epochs := max(3, int((total+soakEpoch-1)/soakEpoch))
	profiles := os.Getenv(soakProfileEnv)
	if profiles != "" {
		runtime.MemProfileRate = 512 // fine enough to see a small leak
	}
	first := soakMeasure(cls, pools, nil, profiles, 0)
	t.Logf("start: %d goroutines, %s live heap; %d epochs of %v", first.goroutines, mib(first.heap), epochs, total/time.Duration(epochs))
	var warm, last soakSample
	var sum soakTotals
	began := time.Now()
	run.progress = newSoakProgress(total)
	defer run.progress.finish()
	for e := range epochs {
		got := run.epoch(t, total/time.Duration(epochs), seed, e)
		sum.add(got)
		run.progress.epochDone(got)
		// Each measurement waits for what the load left running to exit
		// (a subscription lingers for a second after its last waiter): at
		// the first epoch's end, down to the start's count; a warm sample
		// taken before they exited would raise every later allowance.
		limit := &first
		if e > 0 {
			limit = &warm
		}
		last = soakMeasure(cls, pools, limit, profiles, e+1)
		if e == 0 {
			warm = last
		}
		t.Logf("epoch %d: %d cycles, %d failed locks, %d extends, %d fault episodes (%s); checker: %s; %d unexpected results; %d goroutines, %s live heap, %d pooled connections, %d pooled calls",
			e+1, got.cycles, got.lockFails, got.extends, got.episodes, got.faults, got.checker, len(got.unexpected),
			last.goroutines, mib(last.heap), last.conns, last.calls)
		for _, v := range append(got.violations, got.unexpected...) {
			t.Error(v)
		}
		for _, h := range got.harness {
			t.Logf("epoch %d: fault schedule: %s", e+1, h)
		}
		if got.cycles == 0 || got.episodes == 0 {
			t.Errorf("epoch %d: %d lock cycles and %d fault episodes; want some of each", e+1, got.cycles, got.episodes)
		}
	}

	t.Logf("soak: %v, seed %d: %d cycles, %d failed locks, %d extends, %d fault episodes, %d violations, %d unexpected results, %d faults Docker failed to inject or heal",
		time.Since(began).Round(time.Second), seed, sum.cycles, sum.lockFails, sum.extends, sum.episodes,
		len(sum.violations), len(sum.unexpected), len(sum.harness))
	t.Logf("goroutines: %d at start, %d after the first epoch, %d at the end; live heap: %s, %s, %s; pooled connections: %d, %d, %d; pooled calls: %d, %d, %d",
		first.goroutines, warm.goroutines, last.goroutines, mib(first.heap), mib(warm.heap), mib(last.heap),
		first.conns, warm.conns, last.conns, first.calls, warm.calls, last.calls)
	if len(sum.harness) > soakHarnessErrors {
		t.Errorf("Docker failed %d faults, more than %d: the schedule did not run as drawn", len(sum.harness), soakHarnessErrors)
	}
	if last.goroutines > warm.goroutines+soakGoroutineSlack {
		t.Errorf("goroutines grew from %d to %d, more than %d", warm.goroutines, last.goroutines, soakGoroutineSlack)
	}
	slack := int64(soakHeapSlack + soakCallBytes*max(0, last.calls-warm.calls))
	if grown := int64(last.heap) - int64(warm.heap); grown > slack {
		t.Errorf("live heap grew from %s to %s, more than %s (the pipes' stock of calls grew from %d to %d)",
			mib(warm.heap), mib(last.heap), mib(uint64(slack)), warm.calls, last.calls)
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// soakRun is what stays from one epoch to the next: the cluster and the
// clients, whose pools and pipes are what a leak would grow.
type soakRun struct {
	clients                []*redlock.Client
	cluster                *redistest.Cluster
	ttl                    time.Duration
	lockBudget, callBudget time.Duration
	progress               *soakProgress
}

// soakTotals is one epoch's outcome, or the run's.
type soakTotals struct {
	cycles, lockFails, extends, episodes int64
	faults, checker                      string
	violations, unexpected, harness      []string // harness: Docker's failures to inject or heal a fault
}

func (s *soakTotals) add(o soakTotals) {
	s.cycles += o.cycles
	s.lockFails += o.lockFails
	s.extends += o.extends
	s.episodes += o.episodes
	s.violations = append(s.violations, o.violations...)
	s.unexpected = append(s.unexpected, o.unexpected...)
	s.harness = append(s.harness, o.harness...)
}

// epoch runs every client's worker and a fault schedule for d, with a
// checker of its own, then stops them and heals the nodes. Worker ids are
// unique across the clients, so that the checker's messages name the
// worker.
func (r *soakRun) epoch(t *testing.T, d time.Duration, seed uint64, e int) soakTotals {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	check := newChaosChecker()
	var wg sync.WaitGroup
	loads := make([]*chaosLoad, len(r.clients))
	for i, cl := range r.clients {
		ld := &chaosLoad{client: cl, key: "soak", ttl: r.ttl, lockBudget: r.lockBudget, callBudget: r.callBudget, check: check}
		loads[i] = ld
		id := e*len(r.clients) + i
		rng := rand.New(rand.NewPCG(seed, uint64(id)))
		wg.Go(func() { ld.worker(ctx, id, rng) })
	}
	// The fault schedule. Docker itself sometimes fails a fault ("unable
	// to freeze" under load); the schedule heals what it injected and
	// returns, and starts again after a second.
	sched := &chaosSchedule{cluster: r.cluster, rng: rand.New(rand.NewPCG(seed, uint64(1000+e))), ttl: r.ttl, log: t.Logf}
	var harness []string
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		for ctx.Err() == nil {
			if err := sched.run(ctx); err != nil {
				harness = append(harness, err.Error())
				sleepCtx(ctx, time.Second)
			}
		}
	}()

	stopProgress := r.progress.watch(loads, sched, check)
	<-ctx.Done()
	<-schedDone // every node healed
	wg.Wait()
	stopProgress()

	out := soakTotals{episodes: sched.episodes.Load(), faults: sched.counts(), violations: check.finish(),
		checker: check.summary(), harness: harness}
	for _, ld := range loads {
		out.cycles += ld.cycles.Load()
		out.lockFails += ld.lockFails.Load()
		out.extends += ld.extends.Load()
		ld.mu.Lock()
		out.unexpected = append(out.unexpected, ld.unexpected...)
		ld.mu.Unlock()
	}
	return out
}

type soakSample struct {
	goroutines int
	heap       uint64 // live heap after a collection
	conns      int    // the pools' connections, idle or not: each holds buffers on the heap
	calls      int    // the calls the pipes keep for reuse
}

// soakMeasure waits until the clients' background node calls have ended,
// then counts goroutines, the pools' connections and the live heap, and
// writes a heap profile into dir if it is not "". Goroutines that have
// finished their work may take a moment to exit: if the count is above
// limit's allowance, it looks again for up to five seconds before it
// reports.
func soakMeasure(clients []*redlock.Client, pools []redlock.Pool, limit *soakSample, dir string, n int) soakSample {
	for _, cl := range clients {
		redlock.Settle(cl)
	}
	g := runtime.NumGoroutine()
	for end := time.Now().Add(5 * time.Second); limit != nil && g > limit.goroutines+soakGoroutineSlack && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
		g = runtime.NumGoroutine()
	}
	conns, calls := 0, 0
	for _, cl := range clients {
		calls += redlock.PooledCalls(cl)
	}
	for _, p := range pools {
		if rp, ok := p.(*redigo.Pool); ok {
			conns += rp.Stats().ActiveCount // idle ones too
		}
	}
	runtime.GC()
	runtime.GC() // the first may leave objects that finalizers kept alive
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if dir != "" {
		if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap%d.pprof", n))); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	return soakSample{goroutines: g, heap: ms.HeapAlloc, conns: conns, calls: calls}
}

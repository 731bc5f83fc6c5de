package redlock

// The deterministic simulation of the semaphore (docs/semaphore.md): the
// same world as sim_test.go's (simulated network with delays, drops, node
// crashes and restarts, fast node clocks, holder pauses, contexts of every
// kind), with workers that take permits of a K-permit semaphore instead of
// locks. An independent checker verifies, from what the workers saw alone,
// that at no instant more than K permits were valid: each permit's validity
// runs from when Acquire returned to the latest Until its holder saw, cut
// short at the start of its Release.
//
// TestSimulationSemaphoreMajorityUnsafe runs the same schedules with the
// quorum forced down to a plain majority, for K=2 and N=5, and requires the
// checker to find more than K valid permits at once: the reason the quorum
// is ⌊K·N/(K+1)⌋+1.
//
//	go test -run 'TestSimulationSemaphore' .                                  # fast subset
//	REDLOCK_SIM_SCHEDULES=20000 go test -run 'TestSimulationSemaphore$' -timeout 60m .
//	REDLOCK_SIM_SEED=1234 REDLOCK_SIM_SCHEDULES=1 REDLOCK_SIM_TRACE=1 go test -run 'TestSimulationSemaphore$' -v .

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

const simSemKey = "permits"

// The Go equivalents of scripts/semaphore_*.lua, run with the node's lock
// held. A sorted set is kept in one simValue: "token score;token score",
// scores being expiries in milliseconds on the node's clock, and the value's
// own expiry is its latest score (PEXPIREAT).
func init() {
	simScripts[semAcquireScript.hash] = func(n *simNode, ka []any) (any, error) {
		set, now := n.zset(str(ka[0]))
		if int64(len(set)) >= num(ka[3]) {
			return int64(0), nil
		}
		set[str(ka[1])] = now + num(ka[2])
		n.storeZset(str(ka[0]), set)
		return int64(1), nil
	}
	simScripts[semExtendScript.hash] = func(n *simNode, ka []any) (any, error) {
		set, now := n.zset(str(ka[0]))
		score, ok := set[str(ka[1])]
		if !ok {
			n.storeZset(str(ka[0]), set) // the expired members are gone
			return int64(0), nil
		}
		set[str(ka[1])] = max(score, now+num(ka[2])) // never shorter
		n.storeZset(str(ka[0]), set)
		return int64(1), nil
	}
	simScripts[semReleaseScript.hash] = func(n *simNode, ka []any) (any, error) {
		set, _ := n.zset(str(ka[0]))
		_, ok := set[str(ka[1])]
		delete(set, str(ka[1]))
		n.storeZset(str(ka[0]), set)
		if ok {
			return int64(1), nil
		}
		return int64(0), nil
	}
}

// zset returns key's live members (token → expiry) and the node's time, in
// milliseconds on its clock, as TIME gives it; expired members are dropped
// (ZREMRANGEBYSCORE -inf now).
func (n *simNode) zset(key string) (map[string]int64, int64) {
	now := n.now().UnixMilli()
	set := map[string]int64{}
	v, ok := n.get(key)
	if !ok || v == "" {
		return set, now
	}
	for _, m := range strings.Split(v, ";") {
		token, score, _ := strings.Cut(m, " ")
		s, err := strconv.ParseInt(score, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("sim: bad sorted set %q", v))
		}
		if s > now {
			set[token] = s
		}
	}
	return set, now
}

// storeZset writes key's members back, with the key's expiry at the latest
// score; an empty set is deleted, as Redis deletes an empty sorted set.
func (n *simNode) storeZset(key string, set map[string]int64) {
	if len(set) == 0 {
		delete(n.data, key)
		return
	}
	var parts []string
	var last int64
	for token, s := range set {
		parts = append(parts, token+" "+strconv.FormatInt(s, 10))
		last = max(last, s)
	}
	slices.Sort(parts)
	n.data[key] = simValue{v: strings.Join(parts, ";"), expires: time.UnixMilli(last)}
}

// semSimConfig is one semaphore schedule: the world of sim_test.go plus the
// permit count, and, for the unsafe variant, a quorum forced on it.
type semSimConfig struct {
	simConfig
	permits int
	quorum  int // if > 0, replaces the semaphore's quorum (unsafe on purpose)
}

func drawSemConfig(seed uint64) semSimConfig {
	cfg := semSimConfig{simConfig: drawConfig(seed, false)}
	r := rand.New(rand.NewPCG(seed, 0x5e4a))
	cfg.permits = 1 + r.IntN(3)
	// More workers than permits, so that they contend.
	for cfg.clients*cfg.workers < cfg.permits+2 {
		cfg.workers++
	}
	return cfg
}

// A permitGrant is one permit as its holder saw it.
type permitGrant struct {
	worker  int
	value   string
	granted time.Time // when Acquire returned
	end     time.Time // the latest Until the holder saw, cut at the start of Release
}

// semSimRun is the outcome of one semaphore schedule.
type semSimRun struct {
	grants     []permitGrant
	violations []string
	maxValid   int // the most permits valid at one instant
	calls      int
	events     []string
}

// runSemSchedule plays one semaphore schedule inside a synctest bubble.
func runSemSchedule(t *testing.T, cfg semSimConfig) semSimRun {
	var run semSimRun
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{cfg: cfg.simConfig, rng: rand.New(rand.NewPCG(cfg.seed, 1)),
			tracing: os.Getenv("REDLOCK_SIM_TRACE") != "", start: time.Now()}
		defer func() { run.events = w.events }()
		faults := rand.New(rand.NewPCG(cfg.seed, 2))
		for range cfg.nodes {
			w.nodes = append(w.nodes, newSimNode(cfg.clockRate))
		}
		var (
			mu      sync.Mutex
			running atomic.Int32
			wg      sync.WaitGroup
			broken  []string
		)
		record := func(g permitGrant) int {
			mu.Lock()
			defer mu.Unlock()
			run.grants = append(run.grants, g)
			return len(run.grants) - 1
		}
		setEnd := func(i int, end time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if end.Before(run.grants[i].end) {
				run.grants[i].end = end
			}
		}
		raiseEnd := func(i int, until time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if until.After(run.grants[i].end) {
				run.grants[i].end = until
			}
		}
		call := func(rng *rand.Rand, id int, op string, f func(context.Context) error, documented ...error) error {
			ctx, kind, cancel := cfg.callCtx(rng)
			w.tracef("worker %d: %s begins, context %d", id, op, kind)
			err := f(ctx)
			w.tracef("worker %d: %s returns %v", id, op, err)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			run.calls++
			if err == nil {
				return nil
			}
			for _, d := range documented {
				if errors.Is(err, d) {
					return err
				}
			}
			broken = append(broken, fmt.Sprintf("%s: undocumented error %v", op, err))
			return err
		}

		var clients []*Client
		for c := range cfg.clients {
			pools := make([]Pool, cfg.nodes)
			clock := &simClock{}
			for i := range pools {
				pools[i] = simPool{w: w, node: i, link: &simLink{}, clock: clock}
			}
			client, err := New(pools, WithNodeTimeout(simNodeTimeout), WithClock(clock),
				WithTries(8), WithRetryDelay(10*time.Millisecond, 100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, client)
			sem, err := client.Semaphore(simSemKey, cfg.permits, AllowNoFaultTolerance())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.quorum > 0 {
				sem.quorum = cfg.quorum
			}
			for k := range cfg.workers {
				id := c*cfg.workers + k
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(100+id)))
				running.Add(1)
				wg.Go(func() {
					defer running.Add(-1)
					for range cfg.cycles {
						var p *Lock
						var err error
						try := rng.IntN(3) == 0
						if call(rng, id, "Acquire", func(ctx context.Context) error {
							if try {
								p, err = sem.TryAcquire(ctx, cfg.ttl)
							} else {
								p, err = sem.Acquire(ctx, cfg.ttl)
							}
							return err
						}, ErrNotObtained) != nil {
							continue
						}
						idx := record(permitGrant{worker: id, value: p.Value(), granted: time.Now(), end: p.Until()})
						extend := func() {
							_ = call(rng, id, "Extend", func(ctx context.Context) error { return p.Extend(ctx, cfg.ttl) },
								ErrNotObtained, ErrExpired)
							raiseEnd(idx, p.Until())
						}
						extendAt := rng.IntN(4)
						if extendAt == 0 {
							time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 2))))
							extend()
						}
						if rng.Float64() < cfg.pauseRate {
							time.Sleep(cfg.ttl * 2) // a GC pause past the validity
						} else {
							time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 4))))
						}
						if extendAt == 1 {
							extend()
						}
						setEnd(idx, time.Now())
						if call(rng, id, "Release", p.Unlock, ErrExpired, ErrLockLost, errNotReleased) != nil {
							_ = p.Unlock(context.Background())
						}
					}
				})
			}
		}

		wg.Go(func() {
			for c := 0; c < cfg.crashes && running.Load() > 0; c++ {
				time.Sleep(time.Duration(faults.Int64N(int64(cfg.ttl))))
				n := w.nodes[faults.IntN(cfg.nodes)]
				n.crash()
				time.Sleep(time.Duration(faults.Int64N(int64(cfg.ttl / 2))))
				n.restart(!cfg.amnesia)
			}
		})
		wg.Wait()
		for _, c := range clients {
			c.calls.Wait()
			if err := c.Close(); err != nil { // ends the release subscriptions (wake.go)
				t.Errorf("Close: %v", err)
			}
		}
		w.wires.Wait()
		run.violations = append(run.violations, broken...)
		if cfg.clean {
			run.violations = append(run.violations, permitsLeftBehind(w.nodes)...)
		}
	})
	v, most := checkPermits(run.grants, cfg.permits)
	run.violations = append(run.violations, v...)
	run.maxValid = most
	return run
}

// permitsLeftBehind is the liveness check of a clean network, run once every
// worker has stopped and every message has landed: every token was released
// or undone, so no node may still hold a member, live or expired.
func permitsLeftBehind(nodes []*simNode) []string {
	var v []string
	for i, n := range nodes {
		n.mu.Lock()
		if val, ok := n.data[simSemKey]; ok {
			v = append(v, fmt.Sprintf("liveness: node %d still holds %q after every worker released and stopped", i, val.v))
		}
		n.mu.Unlock()
	}
	return v
}

// checkPermits is the independent checker: it knows only the validity
// intervals [granted, end) that the holders saw, and reports every instant
// at which more than k of them were open, and the most open at once.
func checkPermits(grants []permitGrant, k int) (violations []string, most int) {
	type edge struct {
		at    time.Time
		delta int // +1 opens, −1 closes
		g     permitGrant
	}
	var edges []edge
	for _, g := range grants {
		if g.granted.Before(g.end) {
			edges = append(edges, edge{g.granted, +1, g}, edge{g.end, -1, g})
		}
	}
	// Half-open intervals: at the same instant, closing comes first.
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	open := map[string]permitGrant{}
	for _, e := range edges {
		if e.delta < 0 {
			delete(open, e.g.value)
			continue
		}
		open[e.g.value] = e.g
		most = max(most, len(open))
		if len(open) > k {
			var holders []string
			for _, g := range open {
				holders = append(holders, fmt.Sprintf("worker %d until %s", g.worker, g.end.Format(time.StampMicro)))
			}
			slices.Sort(holders)
			violations = append(violations, fmt.Sprintf("%d permits of %d valid at %s: %s",
				len(open), k, e.at.Format(time.StampMicro), strings.Join(holders, ", ")))
		}
	}
	return violations, most
}

// forSemSchedules runs n semaphore schedules, seeds base to base+n-1, over
// one worker per CPU, drawing each with draw, and calls check with each
// result. check must be safe for concurrent use.
func forSemSchedules(t *testing.T, base uint64, n int, draw func(seed uint64) semSimConfig, check func(*testing.T, semSimConfig, semSimRun)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < n; i += workers {
					cfg := draw(base + uint64(i))
					check(t, cfg, runSemSchedule(t, cfg))
				}
			})
		}
	})
}

// simSemDefaultSchedules is the fast subset that go test runs.
const simSemDefaultSchedules = 150

// Under the stated assumptions, no schedule has more than K permits valid at
// once, for K of 1 to 3 on 3, 5 or 7 nodes.
func TestSimulationSemaphore(t *testing.T) {
	base, n := simSchedules(t, simSemDefaultSchedules)
	t.Logf("seeds %d..%d (replay one with REDLOCK_SIM_SEED=<seed> REDLOCK_SIM_SCHEDULES=1)", base, base+uint64(n)-1)
	var (
		mu                   sync.Mutex
		grants, calls, clean int
		full                 int // schedules in which K permits were valid at once
		byPermits            [4]int
		start                = time.Now()
	)
	forSemSchedules(t, base, n, drawSemConfig, func(t *testing.T, cfg semSimConfig, run semSimRun) {
		mu.Lock()
		grants += len(run.grants)
		calls += run.calls
		byPermits[cfg.permits]++
		if cfg.clean {
			clean++
		}
		if run.maxValid == cfg.permits {
			full++
		}
		mu.Unlock()
		if len(run.violations) > 0 {
			if run.events != nil {
				t.Logf("seed %d, events:\n%s", cfg.seed, strings.Join(run.events, "\n"))
			}
			t.Fatalf("seed %d (%+v): %d violations, first: %s", cfg.seed, cfg, len(run.violations), run.violations[0])
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("%d schedules (K=1: %d, K=2: %d, K=3: %d; %d on a clean network) in %v: %d calls, %d permits granted, %d schedules with all K permits valid at once, 0 violations",
		n, byPermits[1], byPermits[2], byPermits[3], clean, time.Since(start).Round(time.Second), calls, grants, full)
	if grants == 0 {
		t.Fatal("no permit was ever granted: the simulation exercised nothing")
	}
	if n >= simSemDefaultSchedules && full == 0 {
		// The bound must be reached, not only respected: a semaphore that
		// admitted one holder at a time would pass the safety check.
		t.Errorf("in %d schedules, K permits were never valid at once", n)
	}
}

// With a plain majority as the quorum, K=2 and N=5, the checker must find
// three permits valid at once in some schedule (3 holders × 3 nodes fit in
// 2 × 5 node slots), while the same schedules with the right quorum, 4,
// find none. This is the unit test that shows why the quorum is not a
// majority.
func TestSimulationSemaphoreMajorityUnsafe(t *testing.T) {
	base, n := simSchedules(t, simSemDefaultSchedules)
	draw := func(quorum int) func(uint64) semSimConfig {
		return func(seed uint64) semSimConfig {
			cfg := drawSemConfig(seed)
			cfg.nodes, cfg.permits, cfg.quorum = 5, 2, quorum
			cfg.crashes = min(cfg.crashes, cfg.nodes)
			cfg.clients, cfg.workers = 3, 2 // six contenders for two permits
			return cfg
		}
	}
	for _, tc := range []struct {
		name   string
		quorum int
		unsafe bool
	}{
		{"quorum=4", semQuorum(5, 2), false},
		{"majority=3", quorum(5), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				found   int
				example string
			)
			forSemSchedules(t, base, n, draw(tc.quorum), func(t *testing.T, cfg semSimConfig, run semSimRun) {
				if tc.unsafe && run.maxValid <= cfg.permits || !tc.unsafe && len(run.violations) == 0 {
					return // the unsafe quorum must break the bound itself, not only liveness
				}
				mu.Lock()
				defer mu.Unlock()
				found++
				if example == "" {
					example = fmt.Sprintf("seed %d: %s", cfg.seed, run.violations[0])
				}
			})
			t.Logf("K=2, N=5, quorum %d: %d of %d schedules violated a property; e.g. %s", tc.quorum, found, n, example)
			switch {
			case tc.unsafe && found == 0:
				t.Fatalf("no violation in %d schedules with a majority quorum: the checker cannot fail", n)
			case !tc.unsafe && found > 0:
				t.Fatalf("%d violations in %d schedules with the correct quorum; first: %s", found, n, example)
			}
		})
	}
}

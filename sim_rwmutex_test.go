package redlock

// The deterministic simulation of the read-write lock (sim_test.go has the
// world: in-memory nodes, a lossy network with delays, crashes and restarts
// with data kept, fast node clocks, virtual time). Workers take the lock
// for reading (two in three) or writing, sometimes with TryLock, hold it,
// sometimes extend it, sometimes stall past their validity, and unlock it.
// Each call gets a context of its own, as in TestSimulation. The checker,
// which knows nothing of the protocol, then holds the run to the claim:
//
//   - no writer's validity interval overlaps any other holder's, reader's
//     or writer's (an interval runs from when Lock or RLock returned to the
//     latest Until its holder saw, cut at the start of its Unlock);
//   - every error is one the API documents for the call;
//   - on a clean network, no writer key or reader is left on any node once
//     every worker has unlocked and stopped.
//
//	go test -run 'TestSimulationRWMutex$' .                              # fast subset
//	REDLOCK_SIM_SCHEDULES=20000 go test -run 'TestSimulationRWMutex$' -timeout 60m .
//	REDLOCK_SIM_SEED=1234 REDLOCK_SIM_SCHEDULES=1 REDLOCK_SIM_TRACE=1 go test -run 'TestSimulationRWMutex$' -v .

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The nodes run the Go equivalents of the read-write scripts. A reader is a
// value of its own, named readers set + "\x00" + token, with the reader's
// expiry as its ttl: a sorted set scored by expiry, pruned on access, in
// another shape.
func init() {
	simScripts[rwLockScript.hash] = simRWLock
	simScripts[rwRLockScript.hash] = simRWRLock
	simScripts[rwRExtendScript.hash] = simRWRExtend
	simScripts[rwRUnlockScript.hash] = simRWRUnlock
	simScripts[rwUnintentScript.hash] = simRWUnintent
	simScripts[rwUnlockScript.hash] = simRWUnlock
	simScripts[rwUnwaitScript.hash] = func(*simNode, []any) (any, error) { return int64(0), nil }
}

// simRWUnsafe holds, for nodes of a deliberately broken schedule, the
// variant they run (rwVariant); they are keyed by *simNode.
var simRWUnsafe sync.Map

type rwVariant int

const (
	rwSafe            rwVariant = iota
	rwReaderIgnoresW            // a reader is admitted beside a writer
	rwWriterIgnoresRs           // a writer is admitted beside readers
)

func simRWVariant(n *simNode) rwVariant {
	v, _ := simRWUnsafe.Load(n)
	k, _ := v.(rwVariant)
	return k
}

func simMember(set, token string) string { return set + "\x00" + token }

// simLiveReaders counts set's live readers, expiring the others.
func simLiveReaders(n *simNode, set string) int {
	live := 0
	for k := range n.data {
		if strings.HasPrefix(k, set+"\x00") {
			if _, ok := n.get(k); ok {
				live++
			}
		}
	}
	return live
}

func simRWLock(n *simNode, ka []any) (any, error) {
	// ka[3] is the fencing counter, read only with fencing (ka[9] "1");
	// ka[4], the entitled readers of phase fairness, is not modelled: it
	// only makes a writer refuse, which the checker's safety does not need.
	w, r, i, fence, token, ttl, intent, mark, fenced := str(ka[0]), str(ka[1]), str(ka[2]), str(ka[3]), str(ka[5]), num(ka[6]), str(ka[7]), num(ka[8]), str(ka[9])
	_, writer := n.get(w)
	if !writer && (simLiveReaders(n, r) == 0 || simRWVariant(n) == rwWriterIgnoresRs) {
		n.setPX(w, token, ttl)
		if v, ok := n.get(i); ok && v == intent {
			delete(n.data, i)
		}
		if fenced == "1" {
			c, _ := n.get(fence)
			v, _ := strconv.ParseInt(c, 10, 64)
			return v + 1, nil
		}
		return int64(1), nil
	}
	if mark > 0 {
		if v, ok := n.get(i); !ok || v == intent {
			n.setPX(i, intent, mark)
		}
	}
	return int64(0), nil
}

func simRWRLock(n *simNode, ka []any) (any, error) {
	// ka[3] and ka[4], phase fairness's waiting and entitled readers, and
	// the wait id and registration ttl (ka[7], ka[8]) are not modelled: a
	// reader is refused on a node with an intent mark, entitled or not.
	w, r, i, token, ttl := str(ka[0]), str(ka[1]), str(ka[2]), str(ka[5]), num(ka[6])
	_, writer := n.get(w)
	_, marked := n.get(i)
	if (writer && simRWVariant(n) != rwReaderIgnoresW) || marked {
		return int64(0), nil
	}
	n.setPX(simMember(r, token), token, ttl)
	return int64(1), nil
}

// simRWUnlock is rw_unlock.lua without phase fairness: release.lua on the
// writer key.
func simRWUnlock(n *simNode, ka []any) (any, error) {
	key := str(ka[0])
	if v, ok := n.get(key); ok && v == str(ka[3]) {
		delete(n.data, key)
		if str(ka[4]) != "" {
			n.announce(key)
		}
		return int64(1), nil
	}
	return int64(0), nil
}

func simRWRExtend(n *simNode, ka []any) (any, error) {
	m, ttl := simMember(str(ka[0]), str(ka[1])), num(ka[2])
	v, ok := n.get(m)
	if !ok {
		return int64(0), nil // an expired reader is not revived
	}
	if exp := n.now().Add(time.Duration(ttl) * time.Millisecond); exp.After(n.data[m].expires) {
		n.setPX(m, v, ttl) // ZADD GT: never shorter
	}
	return int64(1), nil
}

func simRWRUnlock(n *simNode, ka []any) (any, error) {
	m := simMember(str(ka[0]), str(ka[1]))
	if _, ok := n.get(m); ok {
		delete(n.data, m)
		return int64(1), nil
	}
	return int64(0), nil
}

func simRWUnintent(n *simNode, ka []any) (any, error) {
	if v, ok := n.get(str(ka[0])); ok && v == str(ka[1]) {
		delete(n.data, str(ka[0]))
		return int64(1), nil
	}
	return int64(0), nil
}

// An rwGrant is one hold as its holder saw it.
type rwGrant struct {
	worker  int
	write   bool
	value   string
	granted time.Time
	end     time.Time
}

// rwRun is the outcome of one read-write schedule.
type rwRun struct {
	grants       []rwGrant
	reads, write int
	violations   []string
	events       []string
}

// runRWSchedule plays one schedule of the read-write lock inside a synctest
// bubble, with the nodes running variant's scripts.
func runRWSchedule(t *testing.T, cfg simConfig, variant rwVariant) rwRun {
	var run rwRun
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 1)),
			tracing: os.Getenv("REDLOCK_SIM_TRACE") != "", start: time.Now()}
		defer func() { run.events = w.events }()
		faults := rand.New(rand.NewPCG(cfg.seed, 2))
		for range cfg.nodes {
			n := newSimNode(cfg.clockRate)
			w.nodes = append(w.nodes, n)
			if variant != rwSafe {
				simRWUnsafe.Store(n, variant)
				defer simRWUnsafe.Delete(n)
			}
		}
		var (
			mu      sync.Mutex
			running atomic.Int32
			wg      sync.WaitGroup
			broken  []string
		)
		record := func(g rwGrant) int {
			mu.Lock()
			defer mu.Unlock()
			run.grants = append(run.grants, g)
			if g.write {
				run.write++
			} else {
				run.reads++
			}
			return len(run.grants) - 1
		}
		cut := func(i int, end time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if end.Before(run.grants[i].end) {
				run.grants[i].end = end
			}
		}
		raise := func(i int, until time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if until.After(run.grants[i].end) {
				run.grants[i].end = until
			}
		}
		call := func(rng *rand.Rand, id int, op string, f func(context.Context) error, documented ...error) error {
			ctx, _, cancel := cfg.callCtx(rng)
			w.tracef("worker %d: %s begins", id, op)
			err := f(ctx)
			w.tracef("worker %d: %s returns %v", id, op, err)
			cancel()
			if err == nil {
				return nil
			}
			for _, d := range documented {
				if errors.Is(err, d) {
					return err
				}
			}
			mu.Lock()
			broken = append(broken, fmt.Sprintf("%s: undocumented error %v", op, err))
			mu.Unlock()
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
			rw := client.RWMutex(simKey)
			for k := range cfg.workers {
				id := c*cfg.workers + k
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(100+id)))
				running.Add(1)
				wg.Go(func() {
					defer running.Add(-1)
					for range cfg.cycles {
						var l *Lock
						write, try := rng.IntN(3) == 0, rng.IntN(3) == 0
						op := map[bool]string{false: "RLock", true: "Lock"}[write]
						if call(rng, id, op, func(ctx context.Context) error {
							var err error
							switch {
							case write && try:
								l, err = rw.TryLock(ctx, cfg.ttl)
							case write:
								l, err = rw.Lock(ctx, cfg.ttl)
							case try:
								l, err = rw.TryRLock(ctx, cfg.ttl)
							default:
								l, err = rw.RLock(ctx, cfg.ttl)
							}
							return err
						}, ErrNotObtained) != nil {
							continue
						}
						idx := record(rwGrant{worker: id, write: write, value: l.Value(), granted: time.Now(), end: l.Until()})
						extend := func() {
							_ = call(rng, id, "Extend", func(ctx context.Context) error { return l.Extend(ctx, cfg.ttl) },
								ErrNotObtained, ErrExpired)
							raise(idx, l.Until())
						}
						extendAt := rng.IntN(4)
						if extendAt == 0 {
							time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 2))))
							extend()
						}
						if rng.Float64() < cfg.pauseRate {
							time.Sleep(cfg.ttl * 2) // a stall past validity
						} else {
							time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 4))))
						}
						if extendAt == 1 {
							extend()
						}
						cut(idx, time.Now())
						if call(rng, id, "Unlock", l.Unlock, ErrExpired, ErrLockLost, errNotReleased) != nil {
							_ = l.Unlock(context.Background())
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
				n.restart(true)
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
			run.violations = append(run.violations, rwLeftBehind(w.nodes)...)
		}
	})
	run.violations = append(run.violations, checkRW(run.grants)...)
	return run
}

// rwLeftBehind is the clean network's liveness check: once every worker has
// unlocked and stopped, no node holds a writer key or a live reader. The
// intent mark is left out: a granted writer leaves it, for its short ttl,
// on the nodes that refused it.
func rwLeftBehind(nodes []*simNode) []string {
	w, r, _ := rwNames(simKey)
	var v []string
	for i, n := range nodes {
		n.mu.Lock()
		if val, held := n.get(w); held {
			v = append(v, fmt.Sprintf("liveness: node %d still holds writer %s after every worker unlocked", i, val))
		}
		if k := simLiveReaders(n, r); k > 0 {
			v = append(v, fmt.Sprintf("liveness: node %d still holds %d readers after every worker unlocked", i, k))
		}
		n.mu.Unlock()
	}
	return v
}

// checkRW is the independent checker: no writer's interval overlaps any
// other holder's.
func checkRW(grants []rwGrant) []string {
	var v []string
	for i, a := range grants {
		if !a.write {
			continue
		}
		for j, b := range grants {
			if i == j || (b.write && j < i) { // each pair of writers once
				continue
			}
			if a.granted.Before(b.end) && b.granted.Before(a.end) {
				kind := map[bool]string{false: "reader", true: "writer"}[b.write]
				v = append(v, fmt.Sprintf("overlap: writer %d valid [%s, %s) and %s %d valid [%s, %s)",
					a.worker, a.granted.Format(time.StampMicro), a.end.Format(time.StampMicro),
					kind, b.worker, b.granted.Format(time.StampMicro), b.end.Format(time.StampMicro)))
			}
		}
	}
	return v
}

// forRWSchedules runs n read-write schedules, seeds base to base+n-1, on one
// worker per CPU, and calls check with each result; check must be safe for
// concurrent use.
func forRWSchedules(t *testing.T, base uint64, n int, variant rwVariant, check func(*testing.T, simConfig, rwRun)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < n; i += workers {
					cfg := drawConfig(base+uint64(i), false)
					check(t, cfg, runRWSchedule(t, cfg, variant))
				}
			})
		}
	})
}

// simRWDefaultSchedules is the fast subset that go test runs.
const simRWDefaultSchedules = 200

// Under the stated assumptions no schedule lets a writer's validity overlap
// another holder's.
func TestSimulationRWMutex(t *testing.T) {
	base, n := simSchedules(t, simRWDefaultSchedules)
	t.Logf("seeds %d..%d (replay one with REDLOCK_SIM_SEED=<seed> REDLOCK_SIM_SCHEDULES=1)", base, base+uint64(n)-1)
	var (
		mu                   sync.Mutex
		reads, writes, clean int
		shared               int // schedules in which two readers held at once
	)
	start := time.Now()
	forRWSchedules(t, base, n, rwSafe, func(t *testing.T, cfg simConfig, run rwRun) {
		mu.Lock()
		reads += run.reads
		writes += run.write
		if cfg.clean {
			clean++
		}
		if readersOverlap(run.grants) {
			shared++
		}
		mu.Unlock()
		if len(run.violations) > 0 {
			if run.events != nil {
				t.Logf("seed %d, events:\n%s", cfg.seed, strings.Join(run.events, "\n"))
			}
			t.Fatalf("seed %d (%+v): %d violations, first: %s", cfg.seed, cfg, len(run.violations), run.violations[0])
		}
	})
	t.Logf("%d schedules (%d on a clean network) in %v: %d reads and %d writes granted, readers shared the lock in %d schedules, 0 violations",
		n, clean, time.Since(start).Round(time.Second), reads, writes, shared)
	// A protocol that refuses everything is safe; these show that this one
	// grants both sides, and lets readers share.
	if reads == 0 || writes == 0 {
		t.Fatalf("%d reads and %d writes granted: the simulation exercised too little", reads, writes)
	}
	if n >= simRWDefaultSchedules && shared == 0 {
		t.Errorf("no two readers held at once in %d schedules: readers do not share", n)
	}
}

// readersOverlap reports whether two readers' intervals overlap.
func readersOverlap(grants []rwGrant) bool {
	for i, a := range grants {
		for _, b := range grants[i+1:] {
			if !a.write && !b.write && a.granted.Before(b.end) && b.granted.Before(a.end) {
				return true
			}
		}
	}
	return false
}

// With nodes that run a broken script, a reader admitted beside a writer or
// a writer beside readers, the checker must find overlaps: proof that it
// can fail.
func TestSimulationRWMutexCatchesUnsafe(t *testing.T) {
	base, n := simSchedules(t, simRWDefaultSchedules/2)
	for _, variant := range []rwVariant{rwReaderIgnoresW, rwWriterIgnoresRs} {
		t.Run(fmt.Sprint("variant", int(variant)), func(t *testing.T) {
			var (
				mu      sync.Mutex
				found   int
				example string
			)
			forRWSchedules(t, base, n, variant, func(t *testing.T, cfg simConfig, run rwRun) {
				if len(run.violations) == 0 {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				found++
				if example == "" {
					example = fmt.Sprintf("seed %d: %s", cfg.seed, run.violations[0])
				}
			})
			t.Logf("%d of %d schedules violated exclusion; e.g. %s", found, n, example)
			if found == 0 {
				t.Fatalf("no violation in %d schedules of a broken variant: the checker cannot fail", n)
			}
		})
	}
}

package redlock

// The deterministic simulation of leader election (sim_test.go has the
// world: nodes, network, faults, contexts). Candidates on several Clients
// campaign for one election, lead for a while (their leadership extended in
// the background), write to a resource guarded by their term, and resign;
// some stall, and on a faulty network their whole process pauses, so that
// their leadership runs out and a newer leader writes before their late
// write. Readers ask Leader throughout, and one observer follows Observe.
//
// The independent checker sees only what the candidates and readers saw:
//
//   - never two leaders with overlapping validity (each runs from Campaign's
//     return to the latest Until its holder saw, cut at its Resign);
//   - terms strictly increasing in the order leadership was granted;
//   - the resource never accepted a write from a leader older than one
//     whose write it had already accepted;
//   - Leader never reported a value and term that no Campaign was granted,
//     and never another leader while one was valid for the whole read;
//   - Observe's leaders were all granted, with terms that never go back;
//   - every error is one the API documents for the call;
//   - on a clean network, no key is left behind (leftBehind).
//
//	go test -run 'TestSimulationElection' .                    # fast subset
//	REDLOCK_SIM_SCHEDULES=20000 go test -run 'TestSimulationElection$' -timeout 60m .

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// The Go equivalents of the election's scripts. The record is kept as one
// string, token, term and value joined by NULs; only these two read it.
func init() {
	simScripts[electPublishScript.hash] = func(n *simNode, ka []any) (any, error) {
		key, record, token := str(ka[0]), str(ka[1]), str(ka[2])
		if v, ok := n.get(key); !ok || v != token {
			return int64(0), nil
		}
		n.data[record] = simValue{v: token + "\x00" + str(ka[3]) + "\x00" + str(ka[4])}
		return int64(1), nil
	}
	simScripts[electReadScript.hash] = func(n *simNode, ka []any) (any, error) {
		token, ok := n.get(str(ka[0]))
		if !ok {
			return nil, nil
		}
		rec, ok := n.get(str(ka[1]))
		fields := strings.SplitN(rec, "\x00", 3)
		if !ok || len(fields) != 3 || fields[0] != token {
			return nil, nil
		}
		return []any{fields[1], fields[2]}, nil
	}
}

// A simPause freezes one Client's process: while it lasts, nothing the
// Client sends leaves it, and a command whose deadline passed meanwhile is
// never sent, as a paused process's would time out when it wakes.
type simPause struct {
	mu    sync.Mutex
	until time.Time
}

func (p *simPause) freeze(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if end := time.Now().Add(d); end.After(p.until) {
		p.until = end
	}
}

// simPausedPool is a simPool behind its Client's simPause.
type simPausedPool struct {
	simPool
	pause *simPause
}

func (p simPausedPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.pause.mu.Lock()
	wait := time.Until(p.pause.until)
	p.pause.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return errSimTimeout
		}
	}
	return p.simPool.Exec(ctx, cmds, replies)
}

// An electGrant is one leadership as its holder saw it: the mutex's grant
// (token: the term; value: the lock's random token) and the value it
// campaigned with.
type electGrant struct {
	grant
	name string
}

// A leaderReport is one Leader call that named a leader.
type leaderReport struct {
	worker     int
	start, end time.Time
	got        Leader
}

// electRun is the outcome of one election schedule.
type electRun struct {
	simRun
	elected   []electGrant
	reports   []leaderReport
	observed  []Leader
	noLeader  int // Leader calls that returned ErrNoLeader
	campaigns int
}

// An electVariant breaks the election on purpose, to show that the checker
// catches it; the zero value is the library as it is.
type electVariant struct {
	quorum   int // if not 0, every Client's quorum: candidates elected on fewer nodes
	readNeed int // if not 0, the agreement Leader and Observe believe
}

// runElectionSchedule plays one schedule of the election inside a synctest
// bubble.
func runElectionSchedule(t *testing.T, cfg simConfig, variant electVariant) electRun {
	var run electRun
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 1)),
			tracing: os.Getenv("REDLOCK_SIM_TRACE") != "", start: time.Now()}
		defer func() { run.events = w.events }()
		faults := rand.New(rand.NewPCG(cfg.seed, 2))
		for range cfg.nodes {
			n := newSimNode(cfg.clockRate)
			n.world = w
			w.nodes = append(w.nodes, n)
		}

		var (
			mu       sync.Mutex
			resource simResource
			running  atomic.Int32
			wg       sync.WaitGroup
			broken   []string
		)
		record := func(g electGrant) int {
			mu.Lock()
			defer mu.Unlock()
			run.elected = append(run.elected, g)
			return len(run.elected) - 1
		}
		raiseEnd := func(i int, until time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if until.After(run.elected[i].end) {
				run.elected[i].end = until
			}
		}
		setEnd := func(i int, end time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if end.Before(run.elected[i].end) {
				run.elected[i].end = end
			}
		}
		call := func(rng *rand.Rand, id int, op string, f func(context.Context) error, documented ...error) error {
			ctx, kind, cancel := cfg.callCtx(rng)
			// No call waits for ever: a campaign that never ends would keep
			// the schedule running after everyone else has stopped.
			stop := time.AfterFunc(8*cfg.ttl, cancel)
			w.tracef("worker %d: %s begins, context %d", id, op, kind)
			err := f(ctx)
			w.tracef("worker %d: %s returns %v", id, op, err)
			stop.Stop()
			cancel()
			mu.Lock()
			defer mu.Unlock()
			run.calls[kind]++
			if err == nil {
				return nil
			}
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				run.ctxEnded[kind]++
			}
			for _, d := range documented {
				if errors.Is(err, d) {
					return err
				}
			}
			broken = append(broken, fmt.Sprintf("%s: undocumented error %v", op, err))
			return err
		}
		read := func(rng *rand.Rand, id int, e *Election) {
			var got Leader
			start := time.Now()
			err := call(rng, id, "Leader", func(ctx context.Context) (err error) {
				got, err = e.Leader(ctx)
				return err
			}, ErrNoLeader)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				run.noLeader++
				return
			}
			run.reports = append(run.reports, leaderReport{worker: id, start: start, end: time.Now(), got: got})
		}

		var clients []*Client
		opts := []ElectionOption{WithElectionTTL(cfg.ttl), WithObserveInterval(cfg.ttl / 4)}
		for c := range cfg.clients {
			pools := make([]Pool, cfg.nodes)
			clock := &simClock{}
			pause := &simPause{}
			for i := range pools {
				pools[i] = simPausedPool{simPool{w: w, node: i, link: &simLink{}, clock: clock}, pause}
			}
			// Without WithFencing: an election is fenced anyway.
			client, err := New(pools, WithNodeTimeout(simNodeTimeout), WithClock(clock),
				WithRetryDelay(10*time.Millisecond, 100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if variant.quorum > 0 {
				client.quorum = variant.quorum
			}
			election := func() *Election {
				e := client.Election(simKey, opts...)
				e.readNeed = variant.readNeed
				return e
			}
			clients = append(clients, client)

			// A reader on each Client asks who leads every ttl/2.
			rrng := rand.New(rand.NewPCG(cfg.seed, uint64(50+c)))
			reader := election()
			wg.Go(func() {
				for running.Load() > 0 {
					read(rrng, -1-c, reader)
					time.Sleep(cfg.ttl / 2)
				}
			})

			for k := range cfg.workers {
				id := c*cfg.workers + k
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(100+id)))
				e := election()
				running.Add(1)
				wg.Go(func() {
					defer running.Add(-1)
					for cycle := range cfg.cycles {
						var ld *Leadership
						name := fmt.Sprintf("w%d.%d", id, cycle)
						mu.Lock()
						run.campaigns++
						mu.Unlock()
						if call(rng, id, "Campaign", func(ctx context.Context) (err error) {
							ld, err = e.Campaign(ctx, name)
							return err
						}, ErrNotObtained) != nil {
							read(rng, id, e)
							continue
						}
						idx := record(electGrant{grant{worker: id, token: ld.Term(), value: ld.lock.token,
							granted: time.Now(), end: ld.Until()}, name})

						// Lead for up to one and a half ttls, watching Until
						// (the extensions move it) and Done; or stall for
						// two ttls, the whole process on a faulty network,
						// before a write that may come after a newer
						// leader's.
						if rng.Float64() < cfg.pauseRate {
							if !cfg.clean {
								pause.freeze(2 * cfg.ttl)
							}
							time.Sleep(2 * cfg.ttl)
						} else {
							hold := time.NewTimer(time.Duration(rng.Int64N(int64(cfg.ttl * 3 / 2))))
						lead:
							for {
								raiseEnd(idx, ld.Until())
								step := time.NewTimer(cfg.ttl / 8)
								select {
								case <-ld.Done():
									step.Stop()
									break lead
								case <-hold.C:
									step.Stop()
									break lead
								case <-step.C:
								}
							}
							hold.Stop()
						}
						raiseEnd(idx, ld.Until())
						resource.write(ld.Term(), idx)
						setEnd(idx, time.Now())
						err := call(rng, id, "Resign", ld.Resign, ErrLockLost, ErrExpired, errNotReleased)
						if err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrExpired) {
							// The release reached too few nodes: Resign may be retried.
							_ = call(rng, id, "Resign again", func(context.Context) error { return ld.Resign(context.Background()) },
								ErrLockLost, ErrExpired, errNotReleased)
						}
					}
				})
			}
		}

		// One observer follows the election from the first Client.
		octx, stopObserving := context.WithCancel(context.Background())
		watcher := clients[0].Election(simKey, opts...)
		watcher.readNeed = variant.readNeed
		observed, err := watcher.Observe(octx)
		if err != nil {
			t.Fatal(err)
		}
		observer := make(chan struct{})
		go func() {
			defer close(observer)
			for l := range observed {
				mu.Lock()
				run.observed = append(run.observed, l)
				mu.Unlock()
			}
		}()

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
		stopObserving()
		<-observer // closed: Observe's goroutine has returned
		for _, c := range clients {
			c.calls.Wait()
			if err := c.Close(); err != nil { // ends the release subscriptions (wake.go)
				t.Errorf("Close: %v", err)
			}
		}
		w.wires.Wait()
		run.accepted = resource.accepted
		for _, g := range run.elected {
			run.grants = append(run.grants, g.grant)
		}
		run.violations = append(run.violations, broken...)
		if cfg.clean {
			run.violations = append(run.violations, leftBehind(w.nodes, run.grants)...)
		}
		run.batches, run.multi, run.inMulti = int(w.batches.Load()), int(w.multi.Load()), int(w.inMulti.Load())
	})
	run.violations = append(run.violations, check(run.simRun)...)
	run.violations = append(run.violations, checkLeaders(run.elected, run.reports, run.observed)...)
	return run
}

// checkLeaders is the independent check of what Leader and Observe
// reported, against the leaderships that Campaign granted.
func checkLeaders(elected []electGrant, reports []leaderReport, observed []Leader) []string {
	var v []string
	byTerm := map[uint64]electGrant{}
	for _, g := range elected {
		byTerm[g.token] = g
	}
	granted := func(l Leader) bool {
		g, ok := byTerm[l.Term]
		return ok && g.name == l.Value
	}
	for _, r := range reports {
		if !granted(r.got) {
			v = append(v, fmt.Sprintf("Leader: reader %d was told %q at term %d, which no Campaign was granted",
				r.worker, r.got.Value, r.got.Term))
			continue
		}
		for _, g := range elected {
			if g.token != r.got.Term && !g.granted.After(r.start) && !g.end.Before(r.end) {
				v = append(v, fmt.Sprintf("Leader: reader %d was told %q (term %d) while %q (term %d) was valid for the whole read",
					r.worker, r.got.Value, r.got.Term, g.name, g.token))
			}
		}
	}
	var highest uint64
	for _, l := range observed {
		if l.Term == 0 {
			continue
		}
		if !granted(l) {
			v = append(v, fmt.Sprintf("Observe: sent %q at term %d, which no Campaign was granted", l.Value, l.Term))
		}
		if l.Term < highest {
			v = append(v, fmt.Sprintf("Observe: term %d after term %d", l.Term, highest))
		}
		highest = max(highest, l.Term)
	}
	return v
}

// forElectionSchedules runs n election schedules, seeds base to base+n-1,
// over one worker per CPU, and calls check with each result.
func forElectionSchedules(t *testing.T, base uint64, n int, variant electVariant, check func(*testing.T, simConfig, electRun)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < n; i += workers {
					cfg := drawConfig(base+uint64(i), false)
					check(t, cfg, runElectionSchedule(t, cfg, variant))
				}
			})
		}
	})
}

// simElectionSchedules is the fast subset that go test runs.
const simElectionSchedules = 60

// Under the stated assumptions, no election schedule violates any property.
func TestSimulationElection(t *testing.T) {
	base, n := simSchedules(t, simElectionSchedules)
	t.Logf("seeds %d..%d (replay one with REDLOCK_SIM_SEED=<seed> REDLOCK_SIM_SCHEDULES=1)", base, base+uint64(n)-1)
	var (
		mu                                                 sync.Mutex
		campaigns, elected, writes, reports, none, changes int
		clean, ctxEnded                                    int
	)
	start := time.Now()
	forElectionSchedules(t, base, n, electVariant{}, func(t *testing.T, cfg simConfig, run electRun) {
		mu.Lock()
		campaigns += run.campaigns
		elected += len(run.elected)
		writes += len(run.accepted)
		reports += len(run.reports)
		none += run.noLeader
		changes += len(run.observed)
		for _, k := range run.ctxEnded {
			ctxEnded += k
		}
		if cfg.clean {
			clean++
		}
		mu.Unlock()
		if len(run.violations) > 0 {
			if run.events != nil {
				t.Logf("seed %d, events:\n%s", cfg.seed, strings.Join(run.events, "\n"))
			}
			t.Fatalf("seed %d (%+v): %d violations, first: %s", cfg.seed, cfg, len(run.violations), run.violations[0])
		}
	})
	t.Logf("%d schedules (%d on a clean network) in %v: %d campaigns, %d leaderships, %d writes accepted, %d stale writes rejected; "+
		"Leader named a leader %d times and no leader %d times; Observe sent %d changes; %d calls ended by their context; 0 violations",
		n, clean, time.Since(start).Round(time.Second), campaigns, elected, writes, elected-writes, reports, none, changes, ctxEnded)
	if elected == 0 || reports == 0 || changes == 0 {
		t.Fatalf("%d leaderships, %d reports, %d observed changes: the simulation exercised too little", elected, reports, changes)
	}
	if n < simElectionSchedules {
		return
	}
	if elected < 2*n {
		t.Errorf("%d leaderships in %d schedules: fewer than 2 a schedule", elected, n)
	}
	if elected == writes {
		t.Errorf("no stale write in %d schedules: no deposed leader was ever fenced off", n)
	}
}

// The checker must fail on unsafe variants. With a quorum of one node, a
// candidate is elected, and a reader believes, on a single node's word: the
// checker finds overlapping leaders or repeated terms.
func TestSimulationElectionCatchesQuorumOfOne(t *testing.T) {
	simElectionCatches(t, electVariant{quorum: 1})
}

// With a safe election but readers that believe one node, the checker finds
// Leader naming a deposed leader while a newer one was valid, or Observe
// going back to an older term.
func TestSimulationElectionCatchesReadFromOneNode(t *testing.T) {
	simElectionCatches(t, electVariant{readNeed: 1})
}

func simElectionCatches(t *testing.T, variant electVariant) {
	// 60 schedules find a violation of each variant with a probability
	// above 0.9999 (one schedule in six, or more, shows one); a larger
	// REDLOCK_SIM_SCHEDULES buys nothing here beyond 300.
	base, n := simSchedules(t, 60)
	n = min(n, 300)
	var (
		mu      sync.Mutex
		found   int
		example string
	)
	forElectionSchedules(t, base, n, variant, func(t *testing.T, cfg simConfig, run electRun) {
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
	t.Logf("%d of %d schedules of %+v violated a property; e.g. %s", found, n, variant, example)
	if found == 0 {
		t.Fatalf("no violation in %d schedules of %+v: the checker cannot fail", n, variant)
	}
}

package redlock

// The one runner of the deterministic simulation, for every primitive.
//
// A schedule is a world (sim_test.go: nodes, network, faults) in which the
// workers of several Clients acquire one primitive's holds, hold them (some
// extend, some stall past their validity, on a faulty network with their
// whole process frozen), write to a resource guarded by fencing tokens, and
// release them. Each call gets a context of its own (callCtx). Beside the
// crashes, delays and drops, the fault model has: nodes at maxmemory,
// a key prefix on every Client, releases called with a context that has
// already ended, one Client closed while its workers call it, and what each
// primitive draws for itself (simPrimitive.draw): permit weights and
// repeated tokens for the semaphore, reader and writer demand patterns for
// the RW lock, and leader records lost on restart for election.
//
// A primitive tells the runner how to acquire and release its holds
// (simPrimitive) and what it promises; the checker, which knows nothing of
// the protocol, holds every run to:
//
//   - occupancy: at no instant does the weight of valid holds exceed the
//     primitive's capacity: the weights of the valid holds are added up,
//     not the holders counted (a mutex lock or a leadership weighs 1 of 1;
//     a permit its weight, 1 to K, of K; a reader 1, and a writer the
//     whole capacity). A hold
//     is valid from when its acquisition returned to the latest Until its
//     holder saw, cut at the start of its release;
//   - fencing: fenced holds' tokens grow strictly in the order they were
//     granted, and the resource never accepted a write from a holder older
//     than one whose write it had already accepted;
//   - every error is one the API documents for the call, and Close returns
//     within its bound;
//   - on a clean network, no hold is left on any node once every worker has
//     released and stopped, even by a release whose context had ended;
//   - what the primitive adds (election: what Leader and Observe report).
//
// The unsafe variants (simUnsafe) run the same schedules with one rule
// broken, in the test world only, and each has a test that requires the
// checker to fail.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A simPrimitive is what the runner knows of one primitive.
type simPrimitive struct {
	name string
	// fast is the schedules go test runs; short, with -short.
	fast, short int
	// draw draws the primitive's part of cfg, from r.
	draw func(cfg *simConfig, r *rand.Rand)
	// capacity is the weight that may be valid at one instant.
	capacity func(cfg simConfig) int
	// open makes a worker's actor on Client c.
	open func(e *simEnv, c *Client, id int) simActor
	// start, if set, runs once the workers are started (election's readers
	// and observer); it may add goroutines to e.wg that end once
	// e.running is 0. stop, if set, runs once they have all ended.
	start, stop func(e *simEnv)
	// left reports what node n still holds that a clean run must not
	// leave behind (n.mu is held).
	left func(cfg simConfig, n *simNode, run *simRun) []string
	// check, if set, is the primitive's own check, after the common ones.
	check func(cfg simConfig, run *simRun) []string
}

// A simActor is one worker's way to acquire.
type simActor struct {
	op      string // the acquisition's name, for errors and traces
	acquire func(ctx context.Context, rng *rand.Rand, cycle int) (*simHold, error)
	lost    func(rng *rand.Rand) // if set, runs after an acquisition that failed
}

// A simHold is one hold, whatever the primitive.
type simHold struct {
	kind    string // "lock", "permit", "read", "write", "leader"
	weight  int    // what it occupies of the capacity
	fenced  bool   // its token guards the resource
	value   string // the random token the nodes hold
	token   uint64 // the fencing token or term; 0 if none
	name    string // a leader's value
	until   func() time.Time
	extend  func(ctx context.Context, ttl time.Duration) error // nil: it keeps itself (a Leadership)
	done    <-chan struct{}
	release func(ctx context.Context) error
	op      string  // the release's name
	errs    []error // what the release may return

	// closeEnds: Client.Close ends the hold and releases it (a
	// Leadership), as a release by the holder's own process.
	closeEnds bool
}

// A grant is one hold as its holder saw it.
type grant struct {
	worker   int
	client   int
	closeEnd bool // Close of its Client ends it (simHold.closeEnds)
	kind     string
	weight   int
	fenced   bool
	token    uint64
	value    string
	name     string
	granted  time.Time // when the acquisition returned
	end      time.Time // the latest Until its holder saw, cut at the start of its release
	released time.Time // when its release began; zero if never
}

// simResource is the guarded resource: it accepts a write unless its token
// is lower than the highest it has accepted. It records the grant index of
// each write it accepted, for the checker.
type simResource struct {
	mu       sync.Mutex
	highest  uint64
	accepted []int
}

func (r *simResource) write(token uint64, grantIndex int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return
	}
	r.highest = token
	r.accepted = append(r.accepted, grantIndex)
}

// simRun is the outcome of one schedule.
type simRun struct {
	grants     []grant
	accepted   []int
	violations []string
	most       int  // the most weight valid at one instant
	mixedFull  bool // the capacity was valid in two or more holds, one weighing more than 1 (checkOccupancy)
	shared     bool // two readers held at once (the RW lock's check sets it)

	calls, ctxEnded                [len(ctxOdds)]int // client calls by context kind, and those that failed with their context's error
	batches, multi, inMulti, maxEx int               // Exec calls, those of 2+ commands, the commands in them, the largest
	woken, wokenWon                int               // attempts started by a release announcement, and those that won
	closed                         bool              // a Client was closed during the run
	closedAt                       time.Time         // when that Close began
	restarts                       []time.Time       // when nodes came back
	events                         []string

	// Election: what Leader and Observe reported.
	reports   []leaderReport
	none      []leaderReport // Leader calls on which a majority saw no leader
	observed  []Leader
	noLeader  int
	campaigns int
	// Campaigns that won the lock as Close began: Campaign returned
	// ErrClosed after it had published, and Close resigned at once. Their
	// values may be seen for that instant (docs/election.md).
	closedWins map[string]bool
}

// A simEnv is one schedule being played: what the primitives' functions
// may use.
type simEnv struct {
	t       *testing.T
	cfg     simConfig
	p       *simPrimitive
	w       *simWorld
	wakes   *simWakes
	mu      sync.Mutex // guards run and broken
	run     *simRun
	broken  []string // calls that returned an error the API does not document for them
	wg      sync.WaitGroup
	running atomic.Int32 // workers still cycling
	clients []*Client    // the workers' Clients
	extra   []*Client    // Clients of readers (election's unsafe readers)
	procs   map[*Client]*simProcess

	stopWatching func()                 // election: ends Observe
	tokens       func() (string, error) // every Client's, with simConfig.repeatTokens
}

// newClient makes a Client on the world's nodes, with its own links and
// process, and a quorum of quorum nodes if that is not 0 (unsafe).
func (e *simEnv) newClient(quorum int) *Client {
	cfg := e.cfg
	proc := &simProcess{announced: make([]atomic.Bool, cfg.nodes)}
	clock := &simClock{}
	pools := make([]Pool, cfg.nodes)
	for i := range pools {
		pools[i] = simPool{w: e.w, node: i, link: &simLink{}, proc: proc, clock: clock}
	}
	opts := []Option{WithNodeTimeout(simNodeTimeout), WithClock(clock), WithTries(8),
		WithRetryDelay(10*time.Millisecond, 100*time.Millisecond), WithObserver(e.wakes)}
	if cfg.fencing {
		opts = append(opts, WithFencing())
	}
	if cfg.prefix != "" {
		opts = append(opts, WithKeyPrefix(cfg.prefix))
	}
	if cfg.repeatTokens {
		opts = append(opts, WithTokenFunc(e.tokens))
	}
	c, err := New(pools, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	if quorum > 0 {
		c.quorum = quorum
	}
	e.procs[c] = proc
	return c
}

// repeatingTokens is a misbehaving token function, shared by every Client
// of a schedule: one token in three is a repeat, and each repeated token is
// issued exactly twice. A third use would let the undo of one failed
// attempt remove a member that another attempt with the same token then
// finds missing; no library can keep holders with one token apart then.
func repeatingTokens(seed uint64) func() (string, error) {
	rng := rand.New(rand.NewPCG(seed, 7000))
	var (
		mu      sync.Mutex
		pending string // a repeated token issued once so far
		next    int
	)
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(3) != 0 {
			return fmt.Sprintf("unique-%d", rng.Uint64()), nil
		}
		if pending != "" {
			t := pending
			pending = ""
			return t, nil
		}
		pending = fmt.Sprintf("repeated-%d", next)
		next++
		return pending, nil
	}
}

// call runs one client call with a context of its own, and checks that an
// error is one the call documents (ErrClosed is documented for every call).
func (e *simEnv) call(rng *rand.Rand, id int, op string, release bool, f func(context.Context) error, documented ...error) (ctxKind, error) {
	ctx, kind, cancel := e.cfg.callCtx(rng, release)
	// No call waits for ever: a campaign that never ends would keep the
	// schedule running after everyone else has stopped.
	stop := time.AfterFunc(8*e.cfg.ttl, cancel)
	e.w.tracef("worker %d: %s begins, context %d", id, op, kind)
	err := f(ctx)
	e.w.tracef("worker %d: %s returns %v", id, op, err)
	stop.Stop()
	cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.run.calls[kind]++
	if err == nil {
		return kind, nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		e.run.ctxEnded[kind]++
	}
	for _, d := range append(documented, ErrClosed) {
		if errors.Is(err, d) {
			return kind, err
		}
	}
	e.broken = append(e.broken, fmt.Sprintf("%s: undocumented error %v", op, err))
	return kind, err
}

func (e *simEnv) record(g grant) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.run.grants = append(e.run.grants, g)
	return len(e.run.grants) - 1
}

// raise moves grant i's end to until, if later: the holder saw it valid
// that long.
func (e *simEnv) raise(i int, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if until.After(e.run.grants[i].end) {
		e.run.grants[i].end = until
	}
}

// cut ends grant i at now, if it ran later: its release begins.
func (e *simEnv) cut(i int, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := &e.run.grants[i]
	if now.Before(g.end) {
		g.end = now
	}
	g.released = now
}

// hold is what a worker does while it holds h: sleep, extend, stall.
func (e *simEnv) hold(rng *rand.Rand, id, idx int, h *simHold, proc *simProcess) {
	cfg := e.cfg
	stall := func() {
		if !cfg.clean && !cfg.lossless {
			proc.freeze(2 * cfg.ttl) // the whole process: its background calls too
		}
		time.Sleep(2 * cfg.ttl)
	}
	if h.extend == nil {
		// A hold that keeps itself: watch Until (its extensions move it)
		// and Done for up to one and a half ttls, or stall.
		if rng.Float64() < cfg.pauseRate {
			stall()
		} else {
			hold := time.NewTimer(time.Duration(rng.Int64N(int64(cfg.ttl * 3 / 2))))
		watch:
			for {
				e.raise(idx, h.until())
				step := time.NewTimer(cfg.ttl / 8)
				select {
				case <-h.done:
					step.Stop()
					break watch
				case <-hold.C:
					step.Stop()
					break watch
				case <-step.C:
				}
			}
			hold.Stop()
		}
		e.raise(idx, h.until())
		return
	}
	// Half the holders extend: up to half a ttl into their hold, or after
	// they stall, if they do.
	extend := func() {
		_, _ = e.call(rng, id, "Extend", false, func(ctx context.Context) error { return h.extend(ctx, cfg.ttl) },
			ErrNotObtained, ErrExpired)
		e.raise(idx, h.until())
	}
	extendAt := rng.IntN(4)
	if extendAt == 0 {
		time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 2))))
		extend()
	}
	if rng.Float64() < cfg.pauseRate {
		stall() // a GC pause: the write below comes late
	} else {
		time.Sleep(time.Duration(rng.Int64N(int64(cfg.ttl / 4))))
	}
	if extendAt == 1 {
		extend()
	}
}

// worker runs one worker's cycles.
func (e *simEnv) worker(id int, c *Client, rng *rand.Rand, resource *simResource) {
	defer e.running.Add(-1)
	a := e.p.open(e, c, id)
	for cycle := range e.cfg.cycles {
		var h *simHold
		if _, err := e.call(rng, id, a.op, false, func(ctx context.Context) (err error) {
			h, err = a.acquire(ctx, rng, cycle)
			return err
		}, ErrNotObtained); err != nil {
			if a.lost != nil {
				a.lost(rng)
			}
			continue
		}
		idx := e.record(grant{worker: id, client: id / e.cfg.workers, closeEnd: h.closeEnds, kind: h.kind, weight: h.weight, fenced: h.fenced, token: h.token,
			value: h.value, name: h.name, granted: time.Now(), end: h.until()})
		e.hold(rng, id, idx, h, e.procs[c])
		if h.fenced {
			resource.write(h.token, idx)
		}
		e.cut(idx, time.Now())
		kind, err := e.call(rng, id, h.op, true, h.release, h.errs...)
		if err != nil && kind != ctxDone {
			// A holder whose release failed (its context ended first, say)
			// releases again, as chaosLoad does. A release whose context
			// had ended before the call is not retried: it must have gone
			// out (issue 23), and on a clean network leftBehind checks it.
			_ = h.release(context.Background())
		}
	}
}

// runSchedule plays one schedule of p inside a synctest bubble, and checks
// it.
func runSchedule(t *testing.T, p *simPrimitive, cfg simConfig) simRun {
	var run simRun
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 1)),
			tracing: os.Getenv("REDLOCK_SIM_TRACE") != "", start: time.Now()}
		defer func() { run.events = w.events }()
		for range cfg.nodes {
			n := newSimNode(cfg.clockRate)
			n.world = w
			n.watch = cfg.prefix + simKey
			w.nodes = append(w.nodes, n)
			if cfg.unsafe != (simUnsafe{}) { // the nodes' scripts look their variant up
				simUnsafeNodes.Store(n, cfg.unsafe)
				defer simUnsafeNodes.Delete(n)
			}
		}
		e := &simEnv{t: t, cfg: cfg, p: p, w: w, wakes: &simWakes{}, run: &run, procs: map[*Client]*simProcess{},
			tokens: repeatingTokens(cfg.seed)}
		var resource simResource
		for c := range cfg.clients {
			client := e.newClient(cfg.unsafe.quorum)
			e.clients = append(e.clients, client)
			for k := range cfg.workers {
				id := c*cfg.workers + k
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(100+id)))
				e.running.Add(1)
				e.wg.Go(func() { e.worker(id, client, rng, &resource) })
			}
		}
		if p.start != nil {
			p.start(e)
		}
		e.faults()
		e.wg.Wait()
		if p.stop != nil {
			p.stop(e)
		}
		// Virtual time stops when this function returns: first let the node
		// calls left in the background, and their messages, run out.
		for _, c := range append(e.clients, e.extra...) {
			c.calls.Wait()
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
		w.wires.Wait()
		run.woken, run.wokenWon = int(e.wakes.attempts.Load()), int(e.wakes.won.Load())
		run.accepted = resource.accepted
		run.violations = append(run.violations, e.broken...)
		if cfg.clean {
			for i, n := range w.nodes {
				n.mu.Lock()
				for _, v := range p.left(cfg, n, &run) {
					run.violations = append(run.violations, fmt.Sprintf("liveness: node %d: %s", i, v))
				}
				n.mu.Unlock()
			}
		}
		run.batches, run.multi, run.inMulti = int(w.batches.Load()), int(w.multi.Load()), int(w.inMulti.Load())
		run.maxEx = int(w.maxBatch.Load())
	})
	run.violations = append(run.violations, closedEnds(run.grants, run.closedAt, cfg.clients-1)...)
	unique, twins := checkTwins(run.grants)
	v, most, mixedFull := checkOccupancy(unique, p.capacity(cfg))
	run.most, run.mixedFull = most, mixedFull
	run.violations = append(run.violations, twins...)
	run.violations = append(run.violations, v...)
	run.violations = append(run.violations, checkFencing(run.grants, run.accepted)...)
	if p.check != nil {
		run.violations = append(run.violations, p.check(cfg, &run)...)
	}
	return run
}

// faults starts the fault schedule, drawn from the seed alone: node
// crashes and restarts, nodes at maxmemory, and one Client's Close.
func (e *simEnv) faults() {
	cfg, w := e.cfg, e.w
	var lose func(string) bool
	if cfg.recordLoss {
		lose = func(k string) bool { return strings.HasPrefix(k, "redlock:leader:") }
	}
	crashes := rand.New(rand.NewPCG(cfg.seed, 2))
	e.wg.Go(func() {
		for c := 0; c < cfg.crashes && e.running.Load() > 0; c++ {
			time.Sleep(time.Duration(crashes.Int64N(int64(cfg.ttl))))
			n := w.nodes[crashes.IntN(cfg.nodes)]
			n.crash()
			time.Sleep(time.Duration(crashes.Int64N(int64(cfg.ttl / 2))))
			n.restart(!cfg.amnesia, lose)
			e.mu.Lock()
			e.run.restarts = append(e.run.restarts, time.Now())
			e.mu.Unlock()
		}
	})
	if cfg.full > 0 {
		fill := rand.New(rand.NewPCG(cfg.seed, 3))
		e.wg.Go(func() {
			// Each chosen node fills up in turn and stays full for up to
			// two ttls; then every node is freed again.
			for _, i := range fill.Perm(cfg.nodes)[:cfg.full] {
				if e.running.Load() == 0 {
					break
				}
				time.Sleep(time.Duration(fill.Int64N(int64(cfg.ttl))))
				w.nodes[i].setFull(true)
			}
			time.Sleep(time.Duration(fill.Int64N(int64(2 * cfg.ttl))))
			for _, n := range w.nodes {
				n.setFull(false)
			}
		})
	}
	if cfg.closeOne {
		closer := rand.New(rand.NewPCG(cfg.seed, 4))
		c := e.clients[cfg.clients-1]
		e.wg.Go(func() {
			time.Sleep(time.Duration(closer.Int64N(int64(cfg.cycles) * int64(cfg.ttl) / 2)))
			start := time.Now()
			e.mu.Lock()
			e.run.closed, e.run.closedAt = true, start
			e.mu.Unlock()
			err := c.Close()
			took := time.Since(start)
			e.mu.Lock()
			defer e.mu.Unlock()
			if err != nil && !errors.Is(err, ErrNodeTimeout) {
				e.broken = append(e.broken, fmt.Sprintf("Close: undocumented error %v", err))
			}
			// Close's bound, three node timeouts, and the 1 ms by which the
			// wait for calls in flight, which polls, may pass its end
			// (inflight.wait).
			if bound := 3*simNodeTimeout + time.Millisecond; took > bound {
				e.broken = append(e.broken, fmt.Sprintf("Close took %v, beyond its bound of %v", took, bound))
			}
		})
	}
}

// checkOccupancy is the independent check of the primitive's bound: it
// knows only the validity intervals [granted, end) that the holders saw,
// and their weights, and adds up the weights, not the holders. It reports
// the first instants at which the valid holds weighed more than capacity,
// the most weight valid at once, and whether the valid holds weighed the
// whole capacity at an instant when two or more of them were valid and one
// weighed more than 1 (a weighted semaphore filled by unequal permits).
func checkOccupancy(grants []grant, capacity int) (violations []string, most int, mixedFull bool) {
	type edge struct {
		at    time.Time
		open  bool
		index int
	}
	var edges []edge
	for i, g := range grants {
		if g.granted.Before(g.end) {
			edges = append(edges, edge{g.granted, true, i}, edge{g.end, false, i})
		}
	}
	// Half-open intervals: at the same instant, closing comes first.
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		switch {
		case a.open == b.open:
			return 0
		case a.open:
			return 1
		}
		return -1
	})
	open, weight, heavy := map[int]bool{}, 0, 0 // heavy: open holds weighing more than 1
	for _, e := range edges {
		g := grants[e.index]
		if !e.open {
			delete(open, e.index)
			weight -= g.weight
			if g.weight > 1 {
				heavy--
			}
			continue
		}
		open[e.index] = true
		weight += g.weight
		if g.weight > 1 {
			heavy++
		}
		most = max(most, weight)
		if weight >= capacity && len(open) > 1 && heavy > 0 {
			mixedFull = true
		}
		if weight > capacity && len(violations) < 5 {
			var holders []string
			for i := range open {
				h := grants[i]
				holders = append(holders, fmt.Sprintf("%s of worker %d weighing %d [%s, %s)", h.kind, h.worker, h.weight,
					h.granted.Format(time.StampMicro), h.end.Format(time.StampMicro)))
			}
			slices.Sort(holders)
			violations = append(violations, fmt.Sprintf("occupancy: %d holds weighing %d in all, above the capacity of %d, valid at %s: %s",
				len(open), weight, capacity, e.at.Format(time.StampMicro), strings.Join(holders, ", ")))
		}
	}
	return violations, most, mixedFull
}

// closedEnds cuts, at the Close of Client client (at closedAt, if not
// zero), the holds that Close ends: the holder's own process released them,
// and Done told the holder so, even if it was stalled and still believes
// the Until it saw before.
// A hold granted on that Client after Close began is a violation: a
// closed Client hands out nothing.
func closedEnds(grants []grant, closedAt time.Time, client int) (violations []string) {
	if closedAt.IsZero() {
		return nil
	}
	for i := range grants {
		g := &grants[i]
		switch {
		case g.client != client:
		case g.granted.After(closedAt):
			violations = append(violations, fmt.Sprintf("Close: worker %d was granted a %s at %s, after its Client's Close began at %s",
				g.worker, g.kind, g.granted.Format(time.StampMicro), closedAt.Format(time.StampMicro)))
		case g.closeEnd && closedAt.Before(g.end):
			g.end = closedAt
		}
	}
	return violations
}

// simRepeated reports whether value came from a token function that
// repeats itself (repeatingTokens): such a token may be another holder's.
func simRepeated(value string) bool { return strings.HasPrefix(value, "repeated-") }

// checkTwins is the check of holds whose tokens repeat (a token function
// that breaks its contract): never two valid at once with one token, which
// would be two holders in one slot. Nothing more can be promised to such a
// hold: its twin's release, or the undo of its twin's failed attempt,
// removes the token wherever it is; so occupancy counts only the holds
// whose tokens are unique, and holds them to the bound among themselves.
func checkTwins(grants []grant) (unique []grant, violations []string) {
	for i, a := range grants {
		if !simRepeated(a.value) {
			unique = append(unique, a)
			continue
		}
		for _, b := range grants[i+1:] {
			if a.value == b.value && a.granted.Before(b.end) && b.granted.Before(a.end) {
				violations = append(violations, fmt.Sprintf("twins: token %s held by worker %d [%s, %s) and worker %d [%s, %s) at once",
					a.value, a.worker, a.granted.Format(time.StampMicro), a.end.Format(time.StampMicro),
					b.worker, b.granted.Format(time.StampMicro), b.end.Format(time.StampMicro)))
			}
		}
	}
	return unique, violations
}

// simUnsafeNodes holds, for the nodes of a deliberately broken schedule, the
// variant their scripts run; they are keyed by *simNode.
var simUnsafeNodes sync.Map

func simUnsafeOf(n *simNode) simUnsafe {
	v, _ := simUnsafeNodes.Load(n)
	u, _ := v.(simUnsafe)
	return u
}

// checkFencing is the independent check of fencing tokens: fenced holds'
// tokens grow strictly in the order the holds were granted, and the
// resource's accepted writes never go back to an older grant.
func checkFencing(grants []grant, accepted []int) []string {
	var v []string
	var fenced []grant
	for _, g := range grants {
		if g.fenced {
			fenced = append(fenced, g)
		}
	}
	slices.SortStableFunc(fenced, func(a, b grant) int { return a.granted.Compare(b.granted) })
	for i := 1; i < len(fenced); i++ {
		if last, cur := fenced[i-1], fenced[i]; cur.token <= last.token {
			v = append(v, fmt.Sprintf("token order: worker %d got %d after worker %d got %d",
				cur.worker, cur.token, last.worker, last.token))
		}
	}
	// Grants were recorded in the order their acquisitions returned.
	for i := 1; i < len(accepted); i++ {
		if accepted[i] < accepted[i-1] {
			v = append(v, fmt.Sprintf("stale write accepted: grant %d after grant %d", accepted[i], accepted[i-1]))
		}
	}
	return v
}

// leftKey reports key on n (n.mu held) if a clean run must not leave it: a
// live value, or one that lived until its ttl without being a granted
// hold's.
func leftKey(n *simNode, key string, run *simRun) []string {
	var v []string
	if val, held := n.get(key); held {
		v = append(v, fmt.Sprintf("still holds %s = %q after every worker released and stopped", key, val))
	}
	if key != n.watch {
		return v
	}
	granted := map[string]bool{}
	for _, g := range run.grants {
		granted[g.value] = true
	}
	for _, val := range n.expired {
		if !granted[val] {
			v = append(v, fmt.Sprintf("kept %q, from an acquisition that was not granted, until its ttl", val))
		}
	}
	return v
}

// simSchedules returns the first seed and the number of schedules to run:
// fast by default (short with -short), REDLOCK_SIM_SCHEDULES for the full
// run.
func simSchedules(t *testing.T, fast, short int) (base uint64, n int) {
	n = fast
	if testing.Short() {
		n = short
	}
	if s := os.Getenv("REDLOCK_SIM_SCHEDULES"); s != "" {
		var err error
		if _, err = fmt.Sscan(s, &n); err != nil || n < 1 {
			t.Fatalf("REDLOCK_SIM_SCHEDULES=%q: want a positive count", s)
		}
	}
	base = uint64(time.Now().UnixNano())
	if s := os.Getenv("REDLOCK_SIM_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &base); err != nil {
			t.Fatalf("REDLOCK_SIM_SEED: %v", err)
		}
	}
	return base, n
}

// drawSchedule draws schedule seed of p, with tweak applied last.
func drawSchedule(p *simPrimitive, seed uint64, amnesia bool, tweak func(*simConfig)) simConfig {
	cfg := drawConfig(seed, amnesia)
	if amnesia {
		cfg.crashes = cfg.nodes * 3 // many restarts, so that a majority forgets
	}
	if p.draw != nil {
		p.draw(&cfg, rand.New(rand.NewPCG(seed, 0x9a1e)))
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return cfg
}

// forSchedules runs n schedules of p, seeds base to base+n-1, spread over
// one worker per CPU, and calls check with each result. check must be safe
// for concurrent use.
func forSchedules(t *testing.T, p *simPrimitive, base uint64, n int, amnesia bool, tweak func(*simConfig), check func(*testing.T, simConfig, simRun)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	rep := newSimProgress(t.Name(), n) // nil, silent, unless REDLOCK_SIM_SCHEDULES is set
	defer rep.finish()
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < n; i += workers {
					cfg := drawSchedule(p, base+uint64(i), amnesia, tweak)
					run := runSchedule(t, p, cfg)
					rep.schedule(len(run.violations))
					check(t, cfg, run)
				}
			})
		}
	})
}

// simTotals sums what the schedules of one test exercised.
type simTotals struct {
	mu                                sync.Mutex
	schedules, clean, grants, writes  int
	violated                          int // schedules with a violation
	byKind                            map[string]int
	full                              int // schedules that reached the capacity
	mixedFull                         int // schedules that reached it with holds of unequal weights (simRun.mixedFull)
	weighted                          int // semaphore: schedules whose permits draw weights (simConfig.weights)
	byWeight                          map[int]int
	shared                            int // schedules in which readers shared
	calls, ctxEnded                   [len(ctxOdds)]int
	batches, multi, inMulti, maxBatch int
	woken, wokenWon                   int
	closed, prefixed, oom, repeats    int
	reports, noLeader, observed       int
	decidedNone                       int // election: Leader calls on which a majority saw no leader (checkNoneWhileValid)
	lossless, noneChecked             int // election: schedules whose records' liveness is checked, and their no-leader reads
	campaigns                         int
}

func (s *simTotals) add(p *simPrimitive, cfg simConfig, run simRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKind == nil {
		s.byKind, s.byWeight = map[string]int{}, map[int]int{}
	}
	s.schedules++
	if len(run.violations) > 0 {
		s.violated++
	}
	if cfg.clean {
		s.clean++
	}
	s.grants += len(run.grants)
	s.writes += len(run.accepted)
	for _, g := range run.grants {
		s.byKind[g.kind]++
		s.byWeight[g.weight]++
	}
	if run.most >= p.capacity(cfg) {
		s.full++
	}
	if run.mixedFull {
		s.mixedFull++
	}
	if cfg.weights != weightsUnit {
		s.weighted++
	}
	if run.shared {
		s.shared++
	}
	for k := range s.calls {
		s.calls[k] += run.calls[k]
		s.ctxEnded[k] += run.ctxEnded[k]
	}
	s.batches += run.batches
	s.multi += run.multi
	s.inMulti += run.inMulti
	s.maxBatch = max(s.maxBatch, run.maxEx)
	s.woken += run.woken
	s.wokenWon += run.wokenWon
	if run.closed {
		s.closed++
	}
	if cfg.prefix != "" {
		s.prefixed++
	}
	if cfg.full > 0 {
		s.oom++
	}
	if cfg.repeatTokens {
		s.repeats++
	}
	if cfg.lossless {
		s.lossless++
		s.noneChecked += len(run.none)
	}
	s.reports += len(run.reports)
	s.noLeader += run.noLeader
	s.decidedNone += len(run.none)
	s.observed += len(run.observed)
	s.campaigns += run.campaigns
}

// simulate runs p's schedules under the stated assumptions, fails on the
// first violation, and returns what they exercised.
func simulate(t *testing.T, p *simPrimitive) *simTotals {
	base, n := simSchedules(t, p.fast, p.short)
	t.Logf("%s: seeds %d..%d (replay one with REDLOCK_SIM_SEED=<seed> REDLOCK_SIM_SCHEDULES=1)", p.name, base, base+uint64(n)-1)
	totals := &simTotals{}
	start := time.Now()
	forSchedules(t, p, base, n, false, nil, func(t *testing.T, cfg simConfig, run simRun) {
		totals.add(p, cfg, run)
		if len(run.violations) > 0 {
			if run.events != nil {
				t.Logf("seed %d, events:\n%s", cfg.seed, strings.Join(run.events, "\n"))
			}
			t.Fatalf("seed %d (%+v): %d violations, first: %s", cfg.seed, cfg, len(run.violations), run.violations[0])
		}
	})
	s := totals
	t.Logf("%s: %d of %d schedules run (%d on a clean network) in %v: %d holds granted %v, capacity reached in %d schedules, %d fenced writes accepted, %d schedules with violations",
		p.name, s.schedules, n, s.clean, time.Since(start).Round(time.Second), s.grants, s.byKind, s.full, s.writes, s.violated)
	t.Logf("faults: %d schedules with a key prefix, %d with nodes at maxmemory, %d with a Client closed during calls, %d with repeated tokens; %d releases called with an ended context",
		s.prefixed, s.oom, s.closed, s.repeats, s.calls[ctxDone])
	t.Logf("client calls by context (ended by it): never %d, timer %d (%d), on an answer %d (%d), between rounds %d (%d), short deadline %d (%d), long deadline %d (%d)",
		s.calls[ctxNever], s.calls[ctxTimer], s.ctxEnded[ctxTimer], s.calls[ctxOnAnswer], s.ctxEnded[ctxOnAnswer],
		s.calls[ctxBetween], s.ctxEnded[ctxBetween], s.calls[ctxShort], s.ctxEnded[ctxShort], s.calls[ctxLong], s.ctxEnded[ctxLong])
	t.Logf("%d batches sent, %d of 2 or more commands (%d commands, at most %d in one); %d attempts woken by a release announcement, %d of them won",
		s.batches, s.multi, s.inMulti, s.maxBatch, s.woken, s.wokenWon)
	if s.grants == 0 {
		t.Fatal("nothing was ever granted: the simulation exercised nothing")
	}
	return totals
}

// simCatches runs p's schedules with tweak (an unsafe variant) and fails
// unless some schedule has a violation that counts (all do, if counts is
// nil): proof that the checker can fail.
func simCatches(t *testing.T, p *simPrimitive, n int, tweak func(*simConfig), counts func(simConfig, simRun) bool) {
	base, _ := simSchedules(t, n, n)
	if s := os.Getenv("REDLOCK_SIM_SCHEDULES"); s != "" {
		var m int
		if _, err := fmt.Sscan(s, &m); err == nil {
			n = min(max(n, m), 3*n) // more helps little: each variant is caught within n with high probability
		}
	}
	var (
		mu      sync.Mutex
		found   int
		example string
	)
	forSchedules(t, p, base, n, false, tweak, func(t *testing.T, cfg simConfig, run simRun) {
		if len(run.violations) == 0 || counts != nil && !counts(cfg, run) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		found++
		if example == "" {
			example = fmt.Sprintf("seed %d: %s", cfg.seed, run.violations[0])
		}
	})
	t.Logf("%d of %d schedules of the unsafe variant violated a property; e.g. %s", found, n, example)
	if found == 0 {
		t.Fatalf("no violation in %d schedules of the unsafe variant: the checker cannot fail", n)
	}
}

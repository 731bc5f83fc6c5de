package redlock_test

// The semaphore on real Redis 7 masters in containers (docs/semaphore.md):
// workers contend for K permits while a seeded schedule kills, pauses,
// partitions and restarts nodes, and an independent checker verifies that
// no more than K permits were ever valid at once.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// A permitChecker judges a run of permit cycles against the semaphore's
// claim: while a permit's Until has not passed, the permits of the key held
// weigh at most k in all (with unit permits: at most k are held). It trusts
// nothing but Until, Weight and the process's monotonic clock, and checks
// the claim two ways:
//
//   - occupancy: a holder entering while others weighing more than k less
//     its own weight are inside with validity left is a violation;
//   - validity intervals: after the run, no instant may lie inside
//     [granted, end) intervals weighing more than k, end being the earlier
//     of Until and the holder's exit, which comes before its Release.
//
// It is safe for concurrent use.
type permitChecker struct {
	k int

	mu         sync.Mutex
	inside     map[*permitHold]bool
	maxInside  int
	overruns   int
	intervals  []chaosInterval
	weights    []int // of intervals, by index
	violations []string
}

type permitHold struct {
	worker  int
	weight  int // its Semaphore's Weight
	permit  *redlock.Lock
	granted time.Time
}

func newPermitChecker(k int) *permitChecker {
	return &permitChecker{k: k, inside: map[*permitHold]bool{}}
}

// enter records that worker holds p from now on. Call it right after
// Acquire returns.
func (c *permitChecker) enter(worker, weight int, p *redlock.Lock) *permitHold {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	valid := 0
	for other := range c.inside {
		if now.Before(other.permit.Until()) {
			valid += other.weight
		}
	}
	if valid+weight > c.k {
		c.violatef("occupancy: worker %d entered with weight %d at %s while permits weighing %d of %d were valid",
			worker, weight, stamp(now), valid, c.k)
	}
	h := &permitHold{worker: worker, weight: weight, permit: p, granted: now}
	c.inside[h] = true
	inside := 0
	for other := range c.inside {
		inside += other.weight
	}
	c.maxInside = max(c.maxInside, inside)
	return h
}

// exit records that h's holder left. Call it before Release.
func (c *permitChecker) exit(h *permitHold) {
	now := time.Now()
	until := h.permit.Until()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inside, h)
	end := now
	if until.Before(end) {
		end = until
		c.overruns++
	}
	c.intervals = append(c.intervals, chaosInterval{worker: h.worker, start: h.granted, end: end})
	c.weights = append(c.weights, h.weight)
}

// finish runs the interval sweep and returns every violation found.
func (c *permitChecker) finish() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for i, iv := range c.intervals {
		if iv.start.Before(iv.end) {
			edges = append(edges, edge{iv.start, c.weights[i]}, edge{iv.end, -c.weights[i]})
		}
	}
	sort.Slice(edges, func(i, j int) bool { // closing first at the same instant: half-open
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	open := 0
	for _, e := range edges {
		open += e.delta
		if open > c.k {
			c.violatef("intervals: permits weighing %d of %d valid at %s", open, c.k, stamp(e.at))
		}
	}
	return slices.Clone(c.violations)
}

func (c *permitChecker) violatef(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// most returns the most weight that was inside at once.
func (c *permitChecker) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxInside
}

func (c *permitChecker) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d intervals, max occupancy %d of %d, %d overruns, %d violations",
		len(c.intervals), c.maxInside, c.k, c.overruns, len(c.violations))
}

// A permitLoad is a set of workers contending for a semaphore's permits:
// Acquire, a critical section checked by a permitChecker (sometimes with an
// Extend), and Release. It checks that each call returns within its bound,
// with an error the API documents.
type permitLoad struct {
	sem                       *redlock.Semaphore
	sems                      []*redlock.Semaphore // if set, worker w uses sems[w%len(sems)]
	ttl                       time.Duration
	acquireBudget, callBudget time.Duration
	check                     *permitChecker

	cycles, acquireFails, extends, extendFails, releaseFails atomic.Int64

	mu         sync.Mutex
	unexpected []string
}

func (ld *permitLoad) start(ctx context.Context, workers int, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { ld.worker(ctx, w, rand.New(rand.NewPCG(seed, uint64(w)))) })
	}
	return wg.Wait
}

func (ld *permitLoad) worker(ctx context.Context, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		var p *redlock.Lock
		var err error
		sem := ld.sem
		if len(ld.sems) > 0 {
			sem = ld.sems[id%len(ld.sems)]
		}
		ld.timed("Acquire", ld.acquireBudget, func() { p, err = sem.Acquire(ctx, ld.ttl) })
		if err != nil {
			ld.acquireFails.Add(1)
			if !errors.Is(err, redlock.ErrNotObtained) {
				ld.unexpectedf("Acquire: %v", err)
			}
			continue
		}
		h := ld.check.enter(id, sem.Weight(), p)
		for w := range 2 {
			if time.Until(p.Until()) < ld.ttl/2 {
				break
			}
			time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond) // the work
			if w == 0 && rng.IntN(4) == 0 {
				ld.extends.Add(1)
				ld.timed("Extend", ld.callBudget, func() { err = p.Extend(ctx, ld.ttl) })
				if err != nil {
					ld.extendFails.Add(1)
					if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrExpired) {
						ld.unexpectedf("Extend: %v", err)
					}
				}
			}
		}
		ld.check.exit(h)
		ld.timed("Release", ld.callBudget, func() { err = p.Unlock(context.WithoutCancel(ctx)) })
		if err != nil {
			ld.releaseFails.Add(1)
			if len(realNodeErrors(err)) == 0 && !errors.Is(err, redlock.ErrExpired) && !errors.Is(err, redlock.ErrLockLost) {
				ld.unexpectedf("Release: %v", err)
			}
		}
		ld.cycles.Add(1)
	}
}

func (ld *permitLoad) timed(name string, budget time.Duration, call func()) {
	if d := realTimed(call); d > budget {
		ld.unexpectedf("%s took %v, more than its bound %v", name, d, budget)
	}
}

func (ld *permitLoad) unexpectedf(format string, args ...any) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.unexpected = append(ld.unexpected, fmt.Sprintf(format, args...))
}

// Random kills, pauses, partitions and restarts on a seeded schedule while
// six workers contend for the two permits of a semaphore on seven nodes
// (quorum 5, so two nodes may fail), until at least 300 cycles and 8 fault
// episodes are done or 40 seconds pass. The checker must find 0 violations.
//
// Nodes 0 to 3 are durable and restart at once; nodes 4 to 6 have no
// persistence and stay down longer than the ttl, as doc.go requires.
// REDLOCK_CHAOS_SEED replays a schedule.
func TestChaosSemaphore(t *testing.T) {
	t.Parallel() // chaosStart says why
	chaosSemaphore(t, "TestChaosSemaphore", nil)
}

// TestChaosSemaphoreWeighted is TestChaosSemaphore with weighted permits:
// of the six workers, two take permits of weight 2 (all of K=2) and four of
// weight 1, on the same key, and the checker adds up weights.
func TestChaosSemaphoreWeighted(t *testing.T) {
	t.Parallel() // chaosStart says why
	chaosSemaphore(t, "TestChaosSemaphoreWeighted", []int{2, 1, 1})
}

// chaosSemaphore runs the chaos schedule of TestChaosSemaphore; worker w
// takes permits of weight weights[w%len(weights)], or 1 if weights is nil.
func chaosSemaphore(t *testing.T, name string, weights []int) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
	}
	t.Logf("seed %d; replay with %s=%d go test -run '%s$' .", seed, chaosSeedEnv, seed, name)

	const (
		nodes, permits = 7, 2
		workers        = 6
		minCycles      = 300
		minEpisodes    = 8
		nodeTimeout    = 150 * time.Millisecond
		tries          = 3
		retryMax       = 20 * time.Millisecond
		ttl            = time.Second
		// The run ends once both minimums are reached (about 40 s), or at
		// runCap: on a loaded machine Docker's faults come slower (7
		// episodes in 43 s were seen beside the other modules' tests), and
		// the minimums measure the library, not the machine.
		runCap = 2 * time.Minute
	)
	c := chaosStart(t, redistest.ClusterOptions{Nodes: nodes, Durable: func(i int) bool { return i < 4 }})
	client := realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax))
	sem := mustSemaphore(t, client, "chaos:semaphore", permits)
	if sem.Quorum() != 5 {
		t.Fatalf("quorum %d for K=%d on N=%d, want 5", sem.Quorum(), permits, nodes)
	}
	ld := &permitLoad{
		sem:           sem,
		ttl:           ttl,
		acquireBudget: chaosLockBudget(tries, false, nodeTimeout, retryMax),
		callBudget:    nodeTimeout + chaosSlack,
		check:         newPermitChecker(permits),
	}
	for _, w := range weights {
		ld.sems = append(ld.sems, mustSemaphore(t, client, "chaos:semaphore", permits, redlock.WithWeight(w)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), runCap)
	defer cancel()
	start := time.Now()
	waitLoad := ld.start(ctx, workers, seed)
	defer waitLoad()
	defer cancel()

	sched := &chaosSchedule{cluster: c, rng: rand.New(rand.NewPCG(seed, 0)), ttl: ttl, log: t.Logf}
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.run(ctx) }()

	realEventually(runCap, func() bool {
		return ctx.Err() != nil || ld.cycles.Load() >= minCycles && sched.episodes.Load() >= minEpisodes
	})
	cancel()
	schedErr := <-schedDone
	waitLoad()

	violations := ld.check.finish()
	t.Logf("seed %d: %v, %d fault episodes, faults injected: %s", seed, time.Since(start).Round(time.Second),
		sched.episodes.Load(), sched.counts())
	t.Logf("%d cycles, %d failed acquisitions, %d extends (%d failed), %d failed releases; checker: %s",
		ld.cycles.Load(), ld.acquireFails.Load(), ld.extends.Load(), ld.extendFails.Load(), ld.releaseFails.Load(),
		ld.check.summary())
	if len(violations) > 0 {
		t.Errorf("%d violations of the permit bound:\n%s", len(violations), chaosReport(violations))
	}
	ld.mu.Lock()
	if len(ld.unexpected) > 0 {
		t.Errorf("%d unexpected results:\n%s", len(ld.unexpected), chaosReport(ld.unexpected))
	}
	ld.mu.Unlock()
	if schedErr != nil {
		t.Errorf("fault schedule: %v", schedErr)
	}
	if ld.cycles.Load() < minCycles || sched.episodes.Load() < minEpisodes {
		t.Errorf("liveness: %d cycles and %d episodes, want %d and %d",
			ld.cycles.Load(), sched.episodes.Load(), minCycles, minEpisodes)
	}
	if ld.check.most() < permits {
		t.Errorf("never %d permits held at once: the bound went unexercised", permits)
	}
	if t.Failed() {
		t.Logf("replay with %s=%d", chaosSeedEnv, seed)
	}
}

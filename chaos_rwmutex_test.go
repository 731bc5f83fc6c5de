package redlock_test

// Chaos for the read-write lock: readers and writers contend on five real
// Redis 7 masters in containers while the fault schedule of
// TestChaosRandomFaults kills, freezes, cuts off and restarts them. An
// independent checker holds the run to the claim: while a writer's Until
// has not passed, no other holder, reader or writer, is inside.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// An rwChecker is the chaosChecker for a read-write lock:
//   - occupancy: a writer entering while any holder with validity left is
//     inside, or a reader entering while such a writer is, is a violation;
//   - intervals: after the run, no writer's [granted, end) overlaps any
//     other holder's, end being the earlier of Until and the start of the
//     release.
//
// A holder whose validity passed while it was inside counts as an overrun.
// It is safe for concurrent use.
type rwChecker struct {
	mu            sync.Mutex
	inside        map[*rwHold]bool
	maxReaders    int // readers inside at once, at most
	overruns      int
	reads, writes int
	intervals     []rwInterval
	violations    []string
}

type rwHold struct {
	worker  int
	write   bool
	lock    *redlock.Lock
	granted time.Time
}

type rwInterval struct {
	worker     int
	write      bool
	start, end time.Time
}

func newRWChecker() *rwChecker { return &rwChecker{inside: map[*rwHold]bool{}} }

func (c *rwChecker) enter(worker int, write bool, l *redlock.Lock) *rwHold {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	readers := 0
	for other := range c.inside {
		if !now.Before(other.lock.Until()) {
			continue // overran its validity; exit counts it
		}
		if write || other.write {
			c.violations = append(c.violations, fmt.Sprintf("occupancy: worker %d (write %v) entered at %s while worker %d (write %v) held, valid for %v more",
				worker, write, stamp(now), other.worker, other.write, other.lock.Until().Sub(now)))
		}
		if !other.write {
			readers++
		}
	}
	if write {
		c.writes++
	} else {
		c.reads++
		c.maxReaders = max(c.maxReaders, readers+1)
	}
	h := &rwHold{worker: worker, write: write, lock: l, granted: now}
	c.inside[h] = true
	return h
}

func (c *rwChecker) exit(h *rwHold) {
	now := time.Now()
	until := h.lock.Until()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inside, h)
	end := now
	if until.Before(end) {
		end = until
		c.overruns++
	}
	c.intervals = append(c.intervals, rwInterval{worker: h.worker, write: h.write, start: h.granted, end: end})
}

func (c *rwChecker) finish() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	iv := append([]rwInterval(nil), c.intervals...)
	sort.Slice(iv, func(i, j int) bool { return iv[i].start.Before(iv[j].start) })
	for i, a := range iv {
		for _, b := range iv[i+1:] {
			if !b.start.Before(a.end) {
				break // sorted by start: no later interval overlaps a
			}
			if a.write || b.write {
				c.violations = append(c.violations, fmt.Sprintf("intervals: worker %d (write %v) [%s, %s) overlaps worker %d (write %v) [%s, %s)",
					a.worker, a.write, stamp(a.start), stamp(a.end), b.worker, b.write, stamp(b.start), stamp(b.end)))
			}
		}
	}
	return append([]string(nil), c.violations...)
}

func (c *rwChecker) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d reads, %d writes, at most %d readers inside at once, %d overruns, %d violations",
		c.reads, c.writes, c.maxReaders, c.overruns, len(c.violations))
}

// Readers and writers under random faults on real nodes: no writer ever
// shares the lock, readers do share it, and every call ends within its
// bound with a documented error.
func TestChaosRWMutex(t *testing.T) {
	t.Parallel() // chaosStart says why
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const (
		workers     = 8
		nodeTimeout = 150 * time.Millisecond
		tries       = 3
		retryMax    = 20 * time.Millisecond
		ttl         = time.Second
		run         = 40 * time.Second
		minReads    = 300
		minWrites   = 50
	)
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	client := realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax))
	rw := client.RWMutex("chaos:rw")
	check := newRWChecker()
	lockBudget := chaosLockBudget(tries, false, nodeTimeout, retryMax) + nodeTimeout // and the intent's removal
	callBudget := nodeTimeout + chaosSlack

	var (
		mu                    sync.Mutex
		unexpected            []string
		lockFails, extendFail atomic.Int64
	)
	unexpectedf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		unexpected = append(unexpected, fmt.Sprintf(format, args...))
	}
	longest := map[string]time.Duration{}
	timed := func(name string, budget time.Duration, f func()) {
		d := realTimed(f)
		mu.Lock()
		longest[name] = max(longest[name], d)
		mu.Unlock()
		if d > budget {
			unexpectedf("%s took %v, more than its bound %v", name, d, budget)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				write := rng.IntN(4) == 0
				var l *redlock.Lock
				var err error
				timed("Lock", lockBudget, func() {
					if write {
						l, err = rw.Lock(ctx, ttl)
					} else {
						l, err = rw.RLock(ctx, ttl)
					}
				})
				if err != nil {
					lockFails.Add(1)
					if !errors.Is(err, redlock.ErrNotObtained) {
						unexpectedf("Lock (write %v): %v", write, err)
					}
					continue
				}
				h := check.enter(w, write, l)
				// Work only with half the ttl left, as doc.go asks.
				for step := range 2 {
					if time.Until(l.Until()) < ttl/2 {
						break
					}
					time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
					if step == 0 && rng.IntN(4) == 0 {
						timed("Extend", callBudget, func() { err = l.Extend(ctx, ttl) })
						if err != nil {
							extendFail.Add(1)
							if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrExpired) {
								unexpectedf("Extend: %v", err)
							}
						}
					}
				}
				check.exit(h)
				timed("Unlock", callBudget, func() { err = l.Unlock(context.WithoutCancel(ctx)) })
				if err != nil && len(realNodeErrors(err)) == 0 && !errors.Is(err, redlock.ErrExpired) {
					unexpectedf("Unlock: %v", err)
				}
			}
		}()
	}
	sched := &chaosSchedule{cluster: c, rng: rand.New(rand.NewPCG(seed, 0)), ttl: ttl, log: t.Logf}
	schedErr := sched.run(ctx)
	wg.Wait()

	violations := check.finish()
	t.Logf("seed %d: %d fault episodes (%s); %d failed locks, %d failed extends; longest Lock %v (bound %v), Extend %v, Unlock %v (bound %v); checker: %s",
		seed, sched.episodes.Load(), sched.counts(), lockFails.Load(), extendFail.Load(),
		longest["Lock"].Round(time.Millisecond), lockBudget, longest["Extend"].Round(time.Millisecond),
		longest["Unlock"].Round(time.Millisecond), callBudget, check.summary())
	if len(violations) > 0 {
		t.Errorf("%d exclusion violations:\n%s", len(violations), chaosReport(violations))
	}
	if len(unexpected) > 0 {
		t.Errorf("%d unexpected results:\n%s", len(unexpected), chaosReport(unexpected))
	}
	if schedErr != nil {
		t.Errorf("fault schedule: %v", schedErr)
	}
	check.mu.Lock()
	defer check.mu.Unlock()
	if check.reads < minReads || check.writes < minWrites || check.maxReaders < 2 {
		t.Errorf("liveness: %d reads, %d writes, at most %d readers at once; want %d, %d and 2",
			check.reads, check.writes, check.maxReaders, minReads, minWrites)
	}
}

package redlock

// The mutex in the one runner (sim_runner_test.go): Lock and TryLock,
// fenced in three schedules of four, Extend, Unlock.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

var simMutex = &simPrimitive{
	name: "mutex", fast: 300, short: 60,
	capacity: func(simConfig) int { return 1 },
	open: func(e *simEnv, c *Client, id int) simActor {
		return simActor{op: "Lock", acquire: func(ctx context.Context, rng *rand.Rand, _ int) (*simHold, error) {
			var l *Lock
			var err error
			if rng.IntN(3) == 0 {
				l, err = c.TryLock(ctx, simKey, e.cfg.ttl)
			} else {
				l, err = c.Lock(ctx, simKey, e.cfg.ttl)
			}
			if err != nil {
				return nil, err
			}
			return lockHold(l, "lock", 1, e.cfg.fencing), nil
		}}
	},
	left: func(cfg simConfig, n *simNode, run *simRun) []string {
		return leftKey(n, cfg.prefix+simKey, run)
	},
}

// lockHold is a *Lock as the runner holds it.
func lockHold(l *Lock, kind string, weight int, fenced bool) *simHold {
	return &simHold{kind: kind, weight: weight, fenced: fenced, value: l.Value(), token: l.Token(),
		until: l.Until, extend: l.Extend, release: l.Unlock, op: "Unlock",
		errs: []error{ErrExpired, ErrLockLost, errNotReleased, ErrReleased}}
}

// Under the stated assumptions (nodes keep their data across restarts, node
// clocks within the drift factor), no schedule violates any property.
func TestSimulation(t *testing.T) {
	s := simulate(t, simMutex)
	if testing.Short() || s.schedules < simMutex.fast {
		return
	}
	// About six locks are granted per schedule. Far fewer means the
	// protocol refuses what it should grant, which no safety property
	// shows (ignoring the nodes' counters does that: every token is 1, and
	// round 2 refuses each after the first).
	if s.grants < 2*s.schedules {
		t.Errorf("%d locks granted in %d schedules: fewer than 2 a schedule", s.grants, s.schedules)
	}
	if s.multi == 0 {
		t.Errorf("no multi-command batch in %d schedules: the pipes' batching went unexercised", s.schedules)
	}
	if s.wokenWon == 0 {
		t.Errorf("no woken attempt won in %d schedules: wake-up on release went unexercised", s.schedules)
	}
	for k := ctxTimer; k < ctxKind(len(ctxOdds)); k++ {
		if s.ctxEnded[k] == 0 {
			t.Errorf("no call ended by a context of kind %d in %d schedules", k, s.schedules)
		}
	}
	if s.closed == 0 || s.oom == 0 || s.prefixed == 0 {
		t.Errorf("in %d schedules, %d closed a Client, %d filled nodes, %d used a prefix: a fault went unexercised",
			s.schedules, s.closed, s.oom, s.prefixed)
	}
}

// With the persistence assumption broken on purpose (nodes restart empty and
// at once), the checker must find violations: proof that it can fail.
func TestSimulationCatchesAmnesia(t *testing.T) {
	base, n := simSchedules(t, 100, 100)
	found := 0
	var example string
	forSchedules(t, simMutex, base, n, true, nil, func(t *testing.T, cfg simConfig, run simRun) {
		if len(run.violations) > 0 {
			simFound(&found, &example, cfg, run)
		}
	})
	t.Logf("%d of %d schedules with amnesiac restarts violated a property; e.g. %s", found, n, example)
	if found == 0 {
		t.Fatalf("no violation found in %d schedules with amnesiac restarts: the checker cannot fail", n)
	}
}

// simFound counts a caught schedule, under simFoundMu.
func simFound(found *int, example *string, cfg simConfig, run simRun) {
	simFoundMu.Lock()
	defer simFoundMu.Unlock()
	*found++
	if *example == "" {
		*example = fmt.Sprintf("seed %d: %s", cfg.seed, run.violations[0])
	}
}

// An announcement is a hint: a variant that counts the nodes that announced
// a release as votes, even where the acquisition was refused, must break
// mutual exclusion, and the checker must say so. Waiters woken by the same
// release each count the same nodes. The variant lives in the port
// (simPool.presume), not in the library.
func TestSimulationCatchesNoticeVotes(t *testing.T) {
	simCatches(t, simMutex, 100, func(cfg *simConfig) {
		cfg.unsafe.noticeVotes = true
		cfg.clients = max(cfg.clients, 2) // waiters in more than one Client
	}, nil)
}

// A release whose caller's context had ended must still go out (issue 23):
// with a port that drops such releases, keys stay behind on a clean
// network, and the checker must say so. Every release is called with an
// ended context here, and every network is clean.
func TestSimulationCatchesSkippedRelease(t *testing.T) {
	for _, p := range simPrimitives {
		n := 30 // 6 to 10 of 10 schedules are caught
		if p == simElection {
			n = 15 // 10 of 10, and each schedule is slower
		}
		t.Run(p.name, func(t *testing.T) {
			simCatches(t, p, n, func(cfg *simConfig) {
				cfg.unsafe.skipRelease = true
				cfg.releaseEnded = 1
				cfg.clean, cfg.maxDelay, cfg.dropRate, cfg.crashes, cfg.noticeLoss, cfg.full = true, time.Millisecond, 0, 0, 0, 0
				cfg.closeOne = false
			}, nil)
		})
	}
}

var simFoundMu sync.Mutex

// simPrimitives are the four primitives that the one runner serves.
var simPrimitives = []*simPrimitive{simMutex, simSemaphore, simRWMutex, simElection}

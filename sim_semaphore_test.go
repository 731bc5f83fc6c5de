package redlock

// The semaphore in the one runner (sim_runner_test.go; docs/semaphore.md):
// workers take permits of a K-permit semaphore, K from 1 to 3, and the
// checker holds every run to at most K valid at once. In one schedule in
// four the Clients' token function repeats tokens (issue 21), which the
// nodes refuse: no two holds with one token are valid at once (checkTwins).
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
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
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
		if _, ok := set[str(ka[1])]; ok && !simUnsafeOf(n).sharedTokens {
			return int64(2), nil // a repeated token is refused
		}
		if int64(len(set)) >= num(ka[3]) {
			return int64(0), nil
		}
		if err := n.grow(); err != nil {
			return nil, err // ZADD is the script's first write
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

var simSemaphore = &simPrimitive{
	name: "semaphore", fast: 150, short: 40,
	draw: func(cfg *simConfig, r *rand.Rand) {
		cfg.permits = 1 + r.IntN(3)
		for cfg.clients*cfg.workers < cfg.permits+2 {
			cfg.workers++ // more workers than permits, so that they contend
		}
		cfg.repeatTokens = r.IntN(4) == 0
	},
	capacity: func(cfg simConfig) int { return cfg.permits },
	open: func(e *simEnv, c *Client, id int) simActor {
		sem, err := c.Semaphore(simSemKey, e.cfg.permits, AllowNoFaultTolerance())
		if err != nil {
			e.t.Error(err)
		}
		if q := e.cfg.unsafe.semQuorum; q > 0 && sem != nil {
			sem.quorum = q
		}
		return simActor{op: "Acquire", acquire: func(ctx context.Context, rng *rand.Rand, _ int) (*simHold, error) {
			var p *Lock
			var err error
			if rng.IntN(3) == 0 {
				p, err = sem.TryAcquire(ctx, e.cfg.ttl)
			} else {
				p, err = sem.Acquire(ctx, e.cfg.ttl)
			}
			if err != nil {
				return nil, err
			}
			return &simHold{kind: "permit", weight: 1, value: p.Value(), until: p.Until, extend: p.Extend,
				release: p.Unlock, op: "Unlock", errs: []error{ErrExpired, ErrLockLost, errNotReleased, ErrReleased}}, nil
		}}
	},
	left: func(cfg simConfig, n *simNode, _ *simRun) []string {
		// Every token was released or undone: no member, live or expired.
		if val, ok := n.data[SemaphoreKey(cfg.prefix+simSemKey)]; ok {
			return []string{fmt.Sprintf("still holds members %q after every worker released and stopped", val.v)}
		}
		return nil
	},
}

// Under the stated assumptions, no schedule has more than K permits valid at
// once, for K of 1 to 3 on 3, 5 or 7 nodes.
func TestSimulationSemaphore(t *testing.T) {
	s := simulate(t, simSemaphore)
	if testing.Short() || s.schedules < simSemaphore.fast {
		return
	}
	if s.full == 0 {
		// The bound must be reached, not only respected: a semaphore that
		// admitted one holder at a time would pass the safety check.
		t.Errorf("in %d schedules, K permits were never valid at once", s.schedules)
	}
	if s.repeats == 0 {
		t.Errorf("no schedule with repeated tokens in %d", s.schedules)
	}
}

// semUnsafe is the shape of the unsafe semaphore variants: K=2 on N=5, six
// contenders.
func semUnsafe(cfg *simConfig) {
	cfg.nodes, cfg.permits = 5, 2
	cfg.crashes = min(cfg.crashes, cfg.nodes)
	cfg.clients, cfg.workers = 3, 2
	cfg.full = min(cfg.full, cfg.nodes)
}

// With a plain majority as the quorum, K=2 and N=5, the checker must find
// three permits valid at once in some schedule (3 holders × 3 nodes fit in
// 2 × 5 node slots), while the same schedules with the right quorum, 4,
// find none. This is the unit test that shows why the quorum is not a
// majority.
func TestSimulationSemaphoreMajorityUnsafe(t *testing.T) {
	t.Run("quorum=4", func(t *testing.T) {
		base, n := simSchedules(t, 60, 20)
		forSchedules(t, simSemaphore, base, n, false, semUnsafe, func(t *testing.T, cfg simConfig, run simRun) {
			if len(run.violations) > 0 {
				t.Errorf("seed %d: %d violations with the correct quorum; first: %s", cfg.seed, len(run.violations), run.violations[0])
			}
		})
	})
	t.Run("majority=3", func(t *testing.T) {
		simCatches(t, simSemaphore, 60, func(cfg *simConfig) {
			semUnsafe(cfg)
			cfg.unsafe.semQuorum = quorum(5)
		}, func(cfg simConfig, run simRun) bool {
			return run.most > cfg.permits // the bound itself broken, not only liveness
		})
	})
}

// Nodes that re-score a repeated token instead of refusing it (the script
// before issue 21) admit two holders into one slot: with tokens that repeat
// in every schedule, the checker must find two holds of one token valid at
// once.
func TestSimulationSemaphoreCatchesSharedTokens(t *testing.T) {
	simCatches(t, simSemaphore, 120, func(cfg *simConfig) {
		semUnsafe(cfg)
		cfg.repeatTokens = true
		cfg.unsafe.sharedTokens = true
	}, func(cfg simConfig, run simRun) bool {
		return strings.HasPrefix(run.violations[0], "twins:")
	})
}

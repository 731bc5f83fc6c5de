package redlock

// The semaphore in the one runner (sim_runner_test.go; docs/semaphore.md):
// workers take permits of a K-permit semaphore, K from 1 to 3, and the
// checker holds every run to valid permits weighing at most K in all. In
// three schedules in four the permits have weights (WithWeight): each
// acquisition draws one from 1 to K, or heavy workers (2 to K) take turns
// with light ones (1). In one schedule in four the Clients' token function
// repeats tokens (issue 21), which the nodes refuse whatever the weight: no
// two holds with one token are valid at once (checkTwins).
//
// TestSimulationSemaphoreCatchesUnweighted runs heavy and light workers on
// nodes that count every member as 1, and requires the checker to find the
// valid permits weighing more than K.
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
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const simSemKey = "permits"

// The Go equivalents of scripts/semaphore_*.lua, step by step, run with
// the node's lock held. A sorted set is kept in one simValue as Redis keeps
// it: every member, live or expired, "member score;member score", the
// scores being expiries in milliseconds on the node's clock, and the key's
// own expiry set by PEXPIREAT only where a script sets it.
// TestSimSemaphoreScriptsMatchLua runs these and the Lua side by side.
func init() {
	simScripts[semAcquireScript.hash] = simSemAcquire
	simScripts[semExtendScript.hash] = simSemExtend
	simScripts[semReleaseScript.hash] = simSemRelease
}

// simSemAcquire is semaphore_acquire.lua: KEYS[1] set, ARGV[1] member
// ("weight:token"), ARGV[2] ttl, ARGV[3] K, ARGV[4] the member's weight.
func simSemAcquire(n *simNode, ka []any) (any, error) {
	z := n.zset(str(ka[0]))
	member, ttl, k, weight := str(ka[1]), num(ka[2]), num(ka[3]), num(ka[4])
	u := simUnsafeOf(n)
	_, token := semSplit(member)
	var used int64
	for m, score := range z.members {
		w, tok := semSplit(m)
		if tok == token && !u.sharedTokens {
			return int64(2), nil // a repeated token is refused, live or expired, whatever its weight
		}
		if u.unweighted {
			w = 1 // the unsafe variant: every member counts as one
		}
		if score > z.now {
			used += w
		}
	}
	if u.unweighted {
		weight = 1 // ... and so does the caller
	}
	if used+weight > k {
		return int64(0), nil
	}
	if err := n.grow(); err != nil {
		return nil, err // ZADD is the script's first write
	}
	z.members[member] = z.now + ttl
	z.removeExpired()
	z.expireAtLast()
	n.storeZset(z)
	return int64(1), nil
}

// simSemExtend is semaphore_extend.lua: KEYS[1] set, ARGV[1] member, ARGV[2]
// ttl.
func simSemExtend(n *simNode, ka []any) (any, error) {
	z := n.zset(str(ka[0]))
	member, ttl := str(ka[1]), num(ka[2])
	z.removeExpired()
	score, ok := z.members[member]
	if ok {
		if expiry := z.now + ttl; expiry > score { // never shorter
			z.members[member] = expiry
			z.expireAtLast()
		}
	}
	n.storeZset(z)
	if !ok {
		return int64(0), nil
	}
	return int64(1), nil
}

// simSemRelease is semaphore_release.lua: KEYS[1] set, ARGV[1] member,
// ARGV[2] channel.
func simSemRelease(n *simNode, ka []any) (any, error) {
	key, member := str(ka[0]), str(ka[1])
	z := n.zset(key)
	z.removeExpired()
	_, ok := z.members[member]
	delete(z.members, member)
	n.storeZset(z)
	if !ok {
		return int64(0), nil
	}
	if len(ka) > 2 && str(ka[2]) != "" {
		n.announce(str(ka[2]), key)
	}
	return int64(1), nil
}

// semSplit is the scripts' split: a member "<weight>:<token>" whose weight
// is decimal from 1 up (Lua's "^[1-9]%d*:") weighs that much; any other
// member weighs 1 and is its own token.
func semSplit(m string) (int64, string) {
	i := strings.IndexByte(m, ':')
	if i < 1 || m[0] < '1' || m[0] > '9' || strings.Trim(m[1:i], "0123456789") != "" {
		return 1, m
	}
	w, err := strconv.ParseInt(m[:i], 10, 64)
	if err != nil {
		w = math.MaxInt32 // more than any K: Lua's tonumber gives a huge float
	}
	return w, m[i+1:]
}

// A simZset is a sorted set read from a node: its members (member →
// score), live or expired, the key's own expiry, and the node's time in
// milliseconds on its clock, as TIME gives it.
type simZset struct {
	key     string
	members map[string]int64
	expires time.Time
	now     int64
}

// zset reads key's sorted set; a key past its own expiry reads as empty,
// as Redis expires it on access.
func (n *simNode) zset(key string) *simZset {
	z := &simZset{key: key, members: map[string]int64{}, now: n.now().UnixMilli()}
	v, ok := n.get(key)
	if !ok || v == "" {
		return z
	}
	z.expires = n.data[key].expires
	for _, m := range strings.Split(v, ";") {
		member, score, _ := strings.Cut(m, " ")
		s, err := strconv.ParseInt(score, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("sim: bad sorted set %q", v))
		}
		z.members[member] = s
	}
	return z
}

// removeExpired is ZREMRANGEBYSCORE key -inf now.
func (z *simZset) removeExpired() {
	for m, s := range z.members {
		if s <= z.now {
			delete(z.members, m)
		}
	}
}

// expireAtLast is PEXPIREAT key <the latest score>.
func (z *simZset) expireAtLast() {
	var last int64
	for _, s := range z.members {
		last = max(last, s)
	}
	z.expires = time.UnixMilli(last)
}

// storeZset writes z back; an empty set is deleted, as Redis deletes an
// empty sorted set.
func (n *simNode) storeZset(z *simZset) {
	if len(z.members) == 0 {
		delete(n.data, z.key)
		return
	}
	var parts []string
	for m, s := range z.members {
		parts = append(parts, m+" "+strconv.FormatInt(s, 10))
	}
	slices.Sort(parts)
	n.data[z.key] = simValue{v: strings.Join(parts, ";"), expires: z.expires}
}

// simWeights is how a schedule's permits weigh (WithWeight).
type simWeights int

const (
	weightsUnit    simWeights = iota // every permit weighs 1
	weightsUniform                   // each acquisition draws its weight uniformly from 1 to K
	weightsMixed                     // heavy workers (each a weight from 2 to K) beside light ones (1)
)

var simSemaphore = &simPrimitive{
	name: "semaphore", fast: 150, short: 40,
	draw: func(cfg *simConfig, r *rand.Rand) {
		cfg.permits = 1 + r.IntN(3)
		for cfg.clients*cfg.workers < cfg.permits+2 {
			cfg.workers++ // more workers than permits, so that they contend
		}
		cfg.repeatTokens = r.IntN(4) == 0
		// One schedule in four keeps weight 1 (with K=1 every weight is 1).
		cfg.weights = []simWeights{weightsUnit, weightsUniform, weightsUniform, weightsUniform,
			weightsMixed, weightsMixed, weightsMixed, weightsUnit}[r.IntN(8)]
	},
	capacity: func(cfg simConfig) int { return cfg.permits },
	open: func(e *simEnv, c *Client, id int) simActor {
		// One Semaphore per weight, all on one key and K: they share the
		// permits.
		k := e.cfg.permits
		sems := make([]*Semaphore, k+1)
		for w := 1; w <= k; w++ {
			sem, err := c.Semaphore(simSemKey, k, AllowNoFaultTolerance(), WithWeight(w))
			if err != nil {
				e.t.Error(err)
				return simActor{op: "Acquire", acquire: func(context.Context, *rand.Rand, int) (*simHold, error) { return nil, err }}
			}
			if q := e.cfg.unsafe.semQuorum; q > 0 {
				sem.quorum = q
			}
			sems[w] = sem
		}
		// A worker's own weight, when it keeps one: heavy or light, drawn
		// from the seed and the worker alone.
		mine := 1
		if wr := rand.New(rand.NewPCG(e.cfg.seed, uint64(0x3e19+id))); e.cfg.weights == weightsMixed && k > 1 && wr.IntN(2) == 0 {
			mine = 2 + wr.IntN(k-1)
		}
		return simActor{op: "Acquire", acquire: func(ctx context.Context, rng *rand.Rand, _ int) (*simHold, error) {
			w := mine
			if e.cfg.weights == weightsUniform {
				w = 1 + rng.IntN(k)
			}
			sem := sems[w]
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
			return &simHold{kind: "permit", weight: w, value: p.Value(), until: p.Until, extend: p.Extend,
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

// Under the stated assumptions, in no schedule do the valid permits weigh
// more than K in all, for K of 1 to 3 on 3, 5 or 7 nodes, with weights from
// 1 to K.
func TestSimulationSemaphore(t *testing.T) {
	s := simulate(t, simSemaphore)
	var weights []string
	for w := 1; s.byWeight[w] > 0; w++ {
		weights = append(weights, fmt.Sprintf("%d of weight %d", s.byWeight[w], w))
	}
	t.Logf("weights: %d schedules with weighted permits; permits granted: %s; K valid at once in %d schedules, in permits of unequal weights in %d",
		s.weighted, strings.Join(weights, ", "), s.full, s.mixedFull)
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
	if s.mixedFull == 0 {
		// Likewise for weights: K must be filled by a heavy permit and
		// others beside it, where counting holders and adding up weights
		// part ways.
		t.Errorf("in %d schedules (%d weighted), K was never filled by permits of unequal weights", s.schedules, s.weighted)
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
		forSchedules(t, simSemaphore, base, n, false, func(cfg *simConfig) {
			semUnsafe(cfg)
			cfg.weights = weightsUnit
		}, func(t *testing.T, cfg simConfig, run simRun) {
			if len(run.violations) > 0 {
				t.Errorf("seed %d: %d violations with the correct quorum; first: %s", cfg.seed, len(run.violations), run.violations[0])
			}
		})
	})
	t.Run("majority=3", func(t *testing.T) {
		simCatches(t, simSemaphore, 60, func(cfg *simConfig) {
			semUnsafe(cfg)
			cfg.weights = weightsUnit // three holders of one permit each
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
		cfg.weights = weightsUnit // heavier twins fit less often beside others
		cfg.unsafe.sharedTokens = true
	}, func(cfg simConfig, run simRun) bool {
		return strings.HasPrefix(run.violations[0], "twins:")
	})
}

// Nodes that count every member, and the caller, as weight 1 when they
// admit (the acquire script of unit permits, with weights in the members)
// let K permits in whatever they weigh: with heavy and light workers on K=2
// and N=5, the checker must find the valid permits weighing more than K in
// some schedule, while the same schedules on nodes that add up the weights
// find nothing.
func TestSimulationSemaphoreCatchesUnweighted(t *testing.T) {
	mixed := func(cfg *simConfig) {
		semUnsafe(cfg)
		cfg.weights = weightsMixed
	}
	t.Run("weights", func(t *testing.T) {
		base, n := simSchedules(t, 60, 20)
		forSchedules(t, simSemaphore, base, n, false, mixed, func(t *testing.T, cfg simConfig, run simRun) {
			if len(run.violations) > 0 {
				t.Errorf("seed %d: %d violations on nodes that add up weights; first: %s", cfg.seed, len(run.violations), run.violations[0])
			}
		})
	})
	t.Run("unweighted", func(t *testing.T) {
		simCatches(t, simSemaphore, 60, func(cfg *simConfig) {
			mixed(cfg)
			cfg.unsafe.unweighted = true
		}, func(cfg simConfig, run simRun) bool {
			// The bound itself, in weight: K holders or fewer, too heavy.
			return run.most > cfg.permits && slices.ContainsFunc(run.violations, func(v string) bool {
				return strings.HasPrefix(v, "occupancy:")
			})
		})
	})
}

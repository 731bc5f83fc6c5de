package redlock

// The read-write lock in the one runner (sim_runner_test.go). Workers take
// the lock for reading or writing, sometimes with TryLock, hold it,
// sometimes extend it, sometimes stall past their validity, and unlock it.
// Each schedule draws a demand pattern: the share of writes (from one in
// ten to nine in ten), and in half the schedules fixed roles, each worker
// only reading or only writing, coming back as soon as it has let go (the
// pattern that starved readers before issue 21). Writers are fenced when
// the Client is. The checker holds every run to the occupancy bound: a
// reader weighs 1, a writer the whole capacity, so that no writer's
// validity overlaps any other holder's.
//
//	go test -run 'TestSimulationRWMutex$' .                              # fast subset
//	REDLOCK_SIM_SCHEDULES=20000 go test -run 'TestSimulationRWMutex$' -timeout 60m .
//	REDLOCK_SIM_SEED=1234 REDLOCK_SIM_SCHEDULES=1 REDLOCK_SIM_TRACE=1 go test -run 'TestSimulationRWMutex$' -v .

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
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

// An rwVariant is a node script broken on purpose (simUnsafe.rw).
type rwVariant int

const (
	rwSafe            rwVariant = iota
	rwReaderIgnoresW            // a reader is admitted beside a writer
	rwWriterIgnoresRs           // a writer is admitted beside readers
)

func simRWVariant(n *simNode) rwVariant { return simUnsafeOf(n).rw }

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
		if err := n.grow(); err != nil {
			return nil, err // SET is the script's first write
		}
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
			if err := n.grow(); err != nil {
				return nil, err
			}
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
		if str(ka[7]) != "" && num(ka[8]) > 0 {
			if err := n.grow(); err != nil {
				return nil, err // the waiting reader's registration, a ZADD
			}
		}
		return int64(0), nil
	}
	if _, ok := n.get(simMember(r, token)); ok {
		return int64(2), nil // a repeated token: another reader's member
	}
	if err := n.grow(); err != nil {
		return nil, err // ZADD is the script's first write
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
			n.announce(str(ka[4]), key)
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

// simRWCapacity is the RW lock's capacity: more readers than any schedule
// has, and a writer weighs all of it.
const simRWCapacity = 1 << 20

var simRWMutex = &simPrimitive{
	name: "rwmutex", fast: 200, short: 50,
	draw: func(cfg *simConfig, r *rand.Rand) {
		cfg.writeShare = []float64{0.1, 1.0 / 3, 2.0 / 3, 0.9}[r.IntN(4)]
		cfg.roles = r.IntN(2) == 0
	},
	capacity: func(simConfig) int { return simRWCapacity },
	open: func(e *simEnv, c *Client, id int) simActor {
		rw := c.RWMutex(simKey)
		cfg := e.cfg
		role := rand.New(rand.NewPCG(cfg.seed, uint64(300+id))).Float64() < cfg.writeShare
		return simActor{op: "Lock or RLock", acquire: func(ctx context.Context, rng *rand.Rand, _ int) (*simHold, error) {
			write, try := rng.Float64() < cfg.writeShare, rng.IntN(3) == 0
			if cfg.roles {
				write = role
			}
			var l *Lock
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
			if err != nil {
				return nil, err
			}
			if write {
				return lockHold(l, "write", simRWCapacity, cfg.fencing), nil
			}
			return lockHold(l, "read", 1, false), nil
		}}
	},
	check: func(_ simConfig, run *simRun) []string {
		run.shared = readersOverlap(run.grants)
		return nil
	},
	// No writer key or live reader is left. The intent mark is left out: a
	// granted writer leaves it, for its short ttl, on the nodes that
	// refused it.
	left: func(cfg simConfig, n *simNode, run *simRun) []string {
		w, r, _ := rwNames(cfg.prefix + simKey)
		v := leftKey(n, w, run)
		if k := simLiveReaders(n, r); k > 0 {
			v = append(v, fmt.Sprintf("still holds %d readers after every worker unlocked", k))
		}
		return v
	},
}

// Under the stated assumptions no schedule lets a writer's validity overlap
// another holder's.
func TestSimulationRWMutex(t *testing.T) {
	s := simulate(t, simRWMutex)
	// A protocol that refuses everything is safe; these show that this one
	// grants both sides, and lets readers share.
	if s.byKind["read"] == 0 || s.byKind["write"] == 0 {
		t.Fatalf("%d reads and %d writes granted: the simulation exercised too little", s.byKind["read"], s.byKind["write"])
	}
	t.Logf("readers shared the lock in %d of %d schedules", s.shared, s.schedules)
	if !testing.Short() && s.schedules >= simRWMutex.fast && s.shared == 0 {
		t.Errorf("no two readers held at once in %d schedules: readers do not share", s.schedules)
	}
}

// readersOverlap reports whether two readers' intervals overlap.
func readersOverlap(grants []grant) bool {
	for i, a := range grants {
		for _, b := range grants[i+1:] {
			if a.kind == "read" && b.kind == "read" && a.granted.Before(b.end) && b.granted.Before(a.end) {
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
	for _, variant := range []rwVariant{rwReaderIgnoresW, rwWriterIgnoresRs} {
		t.Run(fmt.Sprint("variant", int(variant)), func(t *testing.T) {
			simCatches(t, simRWMutex, 60, func(cfg *simConfig) { cfg.unsafe.rw = variant }, nil)
		})
	}
}

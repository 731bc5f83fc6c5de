package redlock_test

// Chaos tests: real Redis 7 masters in containers, killed, frozen, cut off and
// restarted while clients contend for a lock. docs/chaos.md describes each
// scenario, what it proves and how to run it alone; the harness is in
// internal/redistest/docker.go.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// chaosSlack is added to every time bound: the margin for a loaded two-core
// machine running the race detector. The bounds are correctness bounds, not
// speed targets.
const chaosSlack = time.Second

// chaosSeedEnv replays TestChaosRandomFaults with a given seed.
const chaosSeedEnv = "REDLOCK_CHAOS_SEED"

// chaosStart starts a scenario's Docker nodes.
//
// The chaos scenarios (TestChaos*) call t.Parallel: they run after the
// package's other tests, two at a time (-parallel defaults to GOMAXPROCS,
// 2 here), each on nodes of its own. They mostly wait, on Docker and on
// their faults' timers: one after another they took 318 s of the root
// package's 543 s on a 2-core machine with 44% of its CPU idle. Their
// bounds carry chaosSlack for the load.
func chaosStart(t *testing.T, opts redistest.ClusterOptions) *redistest.Cluster {
	t.Helper()
	stalls.watch(t)
	c := redistest.StartCluster(t, opts)
	t.Logf("%d nodes from %s", len(c.Nodes), c.Image())
	return c
}

// chaosLockBudget is the longest Lock may take: each try is one node timeout
// per round (two with fencing) plus one for the undo of a lost try, and a
// retry delay between tries.
func chaosLockBudget(tries int, fenced bool, nodeTimeout, retryMax time.Duration) time.Duration {
	rounds := 2
	if fenced {
		rounds = 3
	}
	// tries timed attempts, and in each of the tries−1 pauses at most one
	// woken attempt that runs past the pause's end (docs/algorithm.md,
	// "Time bounds of each call").
	attempts := 2*tries - 1
	return time.Duration(attempts*rounds)*nodeTimeout + time.Duration(tries-1)*retryMax + chaosSlack
}

// A chaosLoad is a set of workers contending for one key, each cycle being
// Lock, a critical section checked by a chaosChecker, sometimes an Extend,
// and Unlock. It also checks that every call returns within its time bound
// and with an error the API documents.
type chaosLoad struct {
	client                 *redlock.Client
	key                    string
	ttl                    time.Duration
	lockBudget, callBudget time.Duration
	check                  *chaosChecker

	cycles, lockFails, extends, extendFails, unlockFails atomic.Int64
	maxLock, maxExtend, maxUnlock                        atomic.Int64 // nanoseconds

	mu         sync.Mutex
	unexpected []string
}

// chaosMargin is the validity a holder must have left to start a write: the
// discipline doc.go asks of holders, with room for the scheduler.
func (ld *chaosLoad) margin() time.Duration { return ld.ttl / 2 }

// start runs workers until ctx ends and returns a function that waits for
// them.
func (ld *chaosLoad) start(ctx context.Context, workers int, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ld.worker(ctx, w, rand.New(rand.NewPCG(seed, uint64(w))))
		}()
	}
	return wg.Wait
}

func (ld *chaosLoad) worker(ctx context.Context, id int, rng *rand.Rand) {
	for ctx.Err() == nil {
		var l *redlock.Lock
		var err error
		ld.observe("Lock", &ld.maxLock, ld.lockBudget, func() { l, err = ld.client.Lock(ctx, ld.key, ld.ttl) })
		if err != nil {
			ld.lockFails.Add(1)
			if !errors.Is(err, redlock.ErrNotObtained) {
				ld.unexpectedf("Lock: %v", err)
			}
			continue
		}

		h := ld.check.enter(id, l)
		for w := range 2 {
			if time.Until(l.Until()) < ld.margin() {
				break
			}
			ld.check.write(h)
			if w == 0 && rng.IntN(4) == 0 {
				ld.extends.Add(1)
				ld.observe("Extend", &ld.maxExtend, ld.callBudget, func() { err = l.Extend(ctx, ld.ttl) })
				if err != nil {
					ld.extendFails.Add(1)
					if !errors.Is(err, redlock.ErrNotObtained) && !errors.Is(err, redlock.ErrExpired) {
						ld.unexpectedf("Extend: %v", err)
					}
				}
			}
		}
		ld.check.exit(h)

		// Release even when ctx has ended, so the next run starts clean.
		ld.observe("Unlock", &ld.maxUnlock, ld.callBudget, func() { err = l.Unlock(context.WithoutCancel(ctx)) })
		if err != nil {
			ld.unlockFails.Add(1)
			if len(realNodeErrors(err)) == 0 && !errors.Is(err, redlock.ErrExpired) {
				ld.unexpectedf("Unlock: %v", err)
			}
		}
		ld.cycles.Add(1)
	}
}

// observe runs call, keeps the longest duration in max and records a call
// that took longer than budget.
func (ld *chaosLoad) observe(name string, max *atomic.Int64, budget time.Duration, call func()) {
	d := realTimed(call)
	for {
		old := max.Load()
		if int64(d) <= old || max.CompareAndSwap(old, int64(d)) {
			break
		}
	}
	if d > budget {
		ld.unexpectedf("%s took %v, more than its bound %v", name, d, budget)
	}
}

func (ld *chaosLoad) unexpectedf(format string, args ...any) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.unexpected = append(ld.unexpected, fmt.Sprintf(format, args...))
}

// waitCycles polls until at least n cycles are done, ctx ends or timeout
// passes, and reports whether n were reached.
func (ld *chaosLoad) waitCycles(ctx context.Context, n int64, timeout time.Duration) bool {
	return realEventually(timeout, func() bool { return ld.cycles.Load() >= n || ctx.Err() != nil }) &&
		ld.cycles.Load() >= n
}

// verdict fails t on any violation or unexpected result, and logs the figures.
func (ld *chaosLoad) verdict(t *testing.T) {
	t.Helper()
	violations := ld.check.finish()
	t.Logf("%d cycles, %d failed locks, %d extends (%d failed), %d failed unlocks; max Lock %v, Extend %v, Unlock %v; checker: %s",
		ld.cycles.Load(), ld.lockFails.Load(), ld.extends.Load(), ld.extendFails.Load(), ld.unlockFails.Load(),
		time.Duration(ld.maxLock.Load()).Round(time.Millisecond), time.Duration(ld.maxExtend.Load()).Round(time.Millisecond),
		time.Duration(ld.maxUnlock.Load()).Round(time.Millisecond), ld.check.summary())
	if len(violations) > 0 {
		t.Errorf("%d mutual exclusion violations:\n%s", len(violations), chaosReport(violations))
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if len(ld.unexpected) > 0 {
		t.Errorf("%d unexpected results:\n%s", len(ld.unexpected), chaosReport(ld.unexpected))
	}
}

// Scenario 1. SIGKILL two of five nodes in the middle of a contention run:
// the three survivors are a majority, so locks keep being granted, and the
// checker finds no two holders at once.
func TestChaosMinorityKilled(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	const (
		nodeTimeout = 150 * time.Millisecond
		tries       = 3
		retryMax    = 20 * time.Millisecond
		before      = 200 // cycles before the kill
		after       = 300 // cycles required after it
	)
	ld := &chaosLoad{
		client: realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout),
			redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax)),
		key:        "chaos:minority",
		ttl:        time.Second,
		lockBudget: chaosLockBudget(tries, false, nodeTimeout, retryMax),
		callBudget: nodeTimeout + chaosSlack,
		check:      newChaosChecker(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	wait := ld.start(ctx, 8, 1)
	defer wait()
	defer cancel()

	if !ld.waitCycles(ctx, before, time.Minute) {
		t.Fatalf("only %d cycles before any fault", ld.cycles.Load())
	}
	for _, i := range []int{1, 3} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	killedAt := ld.cycles.Load()
	if !ld.waitCycles(ctx, killedAt+after, time.Minute) {
		t.Errorf("liveness: only %d cycles in the minute after killing 2 of 5 nodes, want %d",
			ld.cycles.Load()-killedAt, after)
	}
	cancel()
	wait()
	t.Logf("%d cycles before the kill, %d after", killedAt, ld.cycles.Load()-killedAt)
	ld.verdict(t)
}

// Scenario 2. With three of five nodes dead, Lock gives up within its retry
// budget with an error that names exactly the dead nodes, and leaves nothing
// behind on the live ones (step 4). Once the nodes return, locks are granted
// again.
func TestChaosMajorityKilled(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	const (
		nodeTimeout = 200 * time.Millisecond
		tries       = 4
		retryMax    = 100 * time.Millisecond
		key         = "chaos:majority"
	)
	client := realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithTries(tries), redlock.WithRetryDelay(50*time.Millisecond, retryMax))
	ctx := context.Background()

	dead := []int{0, 2, 3}
	for _, i := range dead {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	d := realTimed(func() { _, err = client.Lock(ctx, key, 5*time.Second) })
	budget := chaosLockBudget(tries, false, nodeTimeout, retryMax)
	t.Logf("Lock with 3 of 5 dead failed after %v (budget %v): %v", d, budget, err)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("Lock = %v, want ErrNotObtained", err)
	}
	if d > budget {
		t.Errorf("Lock took %v, more than its retry budget %v", d, budget)
	}
	failed := realNodeErrors(err)
	if got := slices.Sorted(maps.Keys(failed)); !slices.Equal(got, dead) {
		t.Errorf("error names nodes %v, want the dead ones %v: %v", got, dead, err)
	}
	for _, i := range dead {
		if !strings.Contains(err.Error(), "node "+strconv.Itoa(i)+" ("+c.Nodes[i].Addr+"):") {
			t.Errorf("message does not name node %d: %v", i, err)
		}
	}
	for _, i := range []int{1, 4} {
		if v := realGet(t, realConn(t, c.Nodes[i].Addr), key); v != "" {
			t.Errorf("live node %d kept %q after the lost attempts", i, v)
		}
	}

	for _, i := range dead {
		if err := c.Nodes[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var l *redlock.Lock
	d = realTimed(func() { l, err = client.Lock(ctx, key, 5*time.Second) })
	if err != nil {
		t.Fatalf("Lock after the nodes returned: %v", err)
	}
	t.Logf("after restart, Lock succeeded in %v", d)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// Scenario 3. Frozen nodes (docker pause) accept connections but never
// answer. With one and then two of five frozen, Lock, Extend and Unlock
// succeed on the majority without waiting for the frozen nodes; with three,
// each fails within its bound and names the frozen nodes.
func TestChaosFrozenNodes(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	chaosBoundedOps(t, c, "frozen", (*redistest.Node).Pause, (*redistest.Node).Unpause)
}

// Scenario 4. A partition: nodes disconnected from the cluster's network,
// which takes their published port with them, so clients are refused. The
// same bounds as for frozen nodes hold, and after reconnection every node
// takes part again.
func TestChaosPartition(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	chaosBoundedOps(t, c, "partition", (*redistest.Node).Disconnect, (*redistest.Node).Reconnect)
}

// chaosBoundedOps applies fault to nodes 1, 3 and then 4, checking the time
// bounds of each operation at each step, then heals them and checks that all
// five nodes take part again.
func chaosBoundedOps(t *testing.T, c *redistest.Cluster, name string, fault, heal func(*redistest.Node) error) {
	// A node timeout far above a loopback round trip tells "returned on the
	// majority" apart from "waited for the faulty nodes".
	const nodeTimeout = 500 * time.Millisecond
	client := realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout), redlock.WithTries(1))
	ctx := context.Background()
	const ttl = 10 * time.Second
	order := []int{1, 3, 4}
	var faulty []int
	t.Cleanup(func() {
		for _, i := range faulty {
			if err := heal(c.Nodes[i]); err != nil {
				t.Errorf("healing node %d: %v", i, err)
			}
		}
	})

	for k, i := range order[:2] {
		if err := fault(c.Nodes[i]); err != nil {
			t.Fatal(err)
		}
		faulty = append(faulty, i)
		key := fmt.Sprintf("chaos:%s:%d", name, k+1)
		var l *redlock.Lock
		var lockErr, extendErr, unlockErr error
		dl := realTimed(func() { l, lockErr = client.Lock(ctx, key, ttl) })
		if lockErr != nil {
			t.Fatalf("%d %s: Lock: %v", k+1, name, lockErr)
		}
		de := realTimed(func() { extendErr = l.Extend(ctx, ttl) })
		du := realTimed(func() { unlockErr = l.Unlock(ctx) })
		t.Logf("%d of 5 %s: Lock %v, Extend %v, Unlock %v (node timeout %v)", k+1, name,
			dl.Round(time.Microsecond), de.Round(time.Microsecond), du.Round(time.Microsecond), nodeTimeout)
		if extendErr != nil || unlockErr != nil {
			t.Errorf("%d %s: Extend: %v; Unlock: %v", k+1, name, extendErr, unlockErr)
		}
		for op, d := range map[string]time.Duration{"Lock": dl, "Extend": de, "Unlock": du} {
			if d >= nodeTimeout {
				t.Errorf("%d %s: %s took %v: it waited for the faulty nodes instead of returning on the majority",
					k+1, name, op, d)
			}
		}
	}

	// A majority faulty: hold a lock from before, then fault the third node.
	key := "chaos:" + name + ":3"
	held, err := client.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatalf("Lock with 2 %s: %v", name, err)
	}
	if err := fault(c.Nodes[order[2]]); err != nil {
		t.Fatal(err)
	}
	faulty = append(faulty, order[2])
	var lockErr, extendErr, unlockErr error
	dl := realTimed(func() { _, lockErr = client.TryLock(ctx, key+":other", ttl) })
	de := realTimed(func() { extendErr = held.Extend(ctx, ttl) })
	du := realTimed(func() { unlockErr = held.Unlock(ctx) })
	t.Logf("3 of 5 %s: TryLock %v, Extend %v, Unlock %v fail as they must", name,
		dl.Round(time.Millisecond), de.Round(time.Millisecond), du.Round(time.Millisecond))
	bounds := []struct {
		op    string
		err   error
		d, at time.Duration
	}{
		{"TryLock", lockErr, dl, 2*nodeTimeout + chaosSlack},
		{"Extend", extendErr, de, nodeTimeout + chaosSlack},
		{"Unlock", unlockErr, du, nodeTimeout + chaosSlack},
	}
	for _, b := range bounds {
		if b.err == nil {
			t.Errorf("%s succeeded with 3 of 5 nodes %s", b.op, name)
			continue
		}
		if b.d > b.at {
			t.Errorf("%s took %v, more than %v", b.op, b.d, b.at)
		}
		if got := slices.Sorted(maps.Keys(realNodeErrors(b.err))); !slices.Equal(got, []int{1, 3, 4}) {
			t.Errorf("%s: error names nodes %v, want [1 3 4]: %v", b.op, got, b.err)
		}
	}
	if !errors.Is(lockErr, redlock.ErrNotObtained) || !errors.Is(extendErr, redlock.ErrNotObtained) {
		t.Errorf("TryLock = %v, Extend = %v; want ErrNotObtained", lockErr, extendErr)
	}

	// Heal: every node takes part again.
	for _, i := range faulty {
		if err := heal(c.Nodes[i]); err != nil {
			t.Fatal(err)
		}
	}
	faulty = nil
	key = "chaos:" + name + ":healed"
	l, err := client.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatalf("Lock after healing: %v", err)
	}
	for _, n := range c.Nodes {
		conn := realConn(t, n.Addr)
		if !realEventually(5*time.Second, func() bool { return realGet(t, conn, key) == l.Value() }) {
			t.Errorf("node %d does not hold the lock after healing", n.Index)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after healing: %v", err)
	}
}

// Scenario 5, the hazard. Redis without persistence forgets its keys when it
// restarts. If a majority of the nodes holding a lock restart at once, a
// second client acquires the same key while the first still holds it. This
// test passes when the hazard shows: it documents why doc.go requires
// persistence or a delayed restart.
func TestChaosRestartHazard(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	a := realClient(t, c.Addrs(), redlock.WithTries(1))
	ctx := context.Background()
	const key, ttl = "chaos:hazard", 30 * time.Second

	first, err := a.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	before := realClient(t, c.Addrs(), redlock.WithTries(1))
	if _, err := before.TryLock(ctx, key, ttl); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("second client before the restart: %v, want ErrNotObtained", err)
	}
	for _, i := range []int{0, 1, 2} { // immediate restart, keys lost
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Nodes[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	// A client with fresh connections: see chaosExtendAfterRestart for what
	// pooled connections from before the restart do.
	b := realClient(t, c.Addrs(), redlock.WithTries(1))
	second, err := b.TryLock(ctx, key, ttl)
	if err != nil {
		t.Fatalf("the hazard did not show: %v", err)
	}
	now := time.Now()
	if !now.Before(first.Until()) || !now.Before(second.Until()) {
		t.Fatalf("the two locks do not overlap: first until %s, second until %s, now %s",
			stamp(first.Until()), stamp(second.Until()), stamp(now))
	}
	t.Logf("hazard shown: two holders of %s, both valid for %v more", key,
		min(first.Until().Sub(now), second.Until().Sub(now)).Round(time.Millisecond))
	// The first lock is lost: its release must say so (three of five nodes
	// hold another token), and must not touch the second's keys. Its
	// client's pools still hold connections from before the restart, whose
	// first command fails (see chaosExtendAfterRestart); a release that
	// fails proves nothing, so flush them with PINGs first.
	for range 20 {
		_, _ = a.Ping(ctx)
	}
	err = first.Unlock(ctx)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Unlock of the first lock: %v, want ErrLockLost: its holder must learn that exclusion was lost", err)
	}
	for _, i := range []int{0, 1, 2} {
		if v := realGet(t, realConn(t, c.Nodes[i].Addr), key); v != second.Value() {
			t.Errorf("node %d: the first holder's Unlock touched the second's key: %q", i, v)
		}
	}
	if err := second.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the second lock: %v", err)
	}
}

// Scenario 5, first mitigation. A node without persistence that stays down
// longer than the largest ttl comes back only after every key it held would
// have expired anyway: no second holder while the first is valid.
func TestChaosRestartDelayed(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{})
	a := realClient(t, c.Addrs(), redlock.WithTries(1))
	b := realClient(t, c.Addrs(), redlock.WithTries(1))
	ctx := context.Background()
	const key, ttl = "chaos:delayed", 2 * time.Second

	first, err := a.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, i := range []int{0, 1, 2} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// While the nodes stay down, the second client is refused.
	attempts := 0
	for time.Now().Before(first.Until()) {
		attempts++
		if l, err := b.TryLock(ctx, key, ttl); err == nil {
			left := time.Until(first.Until())
			_ = l.Unlock(ctx)
			t.Fatalf("second holder while the first is valid for %v more", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The mitigation: restart only once the largest ttl has passed since the
	// crash. This wait is the rule under test, not a guess at readiness.
	time.Sleep(time.Until(killed.Add(ttl + 100*time.Millisecond)))
	for _, i := range []int{0, 1, 2} {
		if err := c.Nodes[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	var second *redlock.Lock
	if !realEventually(5*time.Second, func() bool { second, err = b.TryLock(ctx, key, ttl); return err == nil }) {
		t.Fatalf("no lock after the delayed restart: %v", err)
	}
	if granted := time.Now(); !first.Until().Before(granted) {
		t.Errorf("second lock granted at %s, before the first expired at %s", stamp(granted), stamp(first.Until()))
	}
	t.Logf("%d refused attempts while the first lock was valid; second lock granted after its expiry", attempts)
	if err := second.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// Scenario 5, second mitigation. With appendonly yes and appendfsync always, a
// node that crashes and restarts at once still holds its keys: no second
// holder, and the first holder can still extend and release.
func TestChaosRestartDurable(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	a := realClient(t, c.Addrs(), redlock.WithTries(1))
	b := realClient(t, c.Addrs(), redlock.WithTries(1))
	ctx := context.Background()
	const key, ttl = "chaos:durable", 30 * time.Second

	first, err := a.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 2} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
		if err := c.Nodes[i].Start(); err != nil {
			t.Fatal(err)
		}
		if v := realGet(t, realConn(t, c.Nodes[i].Addr), key); v != first.Value() {
			t.Errorf("node %d lost the key in the crash: %q", i, v)
		}
	}
	if _, err := b.TryLock(ctx, key, ttl); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("second client after the restart: %v, want ErrNotObtained", err)
	}
	chaosExtendAfterRestart(t, first, ttl)
	if err := first.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the restart: %v", err)
	}
	second, err := b.TryLock(ctx, key, ttl)
	if err != nil {
		t.Fatalf("second client after the release: %v", err)
	}
	_ = second.Unlock(ctx)
}

// chaosExtendAfterRestart extends l after some of its nodes restarted. The
// client's pool still holds connections from before the restart, and NewPool
// tests an idle connection only after 30 seconds, so the first command on
// each stale connection fails with EOF: with a majority restarted, the first
// Extend fails although every node is up and holds the key. The lock stays
// valid (a lost Extend never lengthens it) and the next Extend succeeds. The
// report to the lead proposes a fix in pool.go.
func chaosExtendAfterRestart(t *testing.T, l *redlock.Lock, ttl time.Duration) {
	t.Helper()
	ctx := context.Background()
	err := l.Extend(ctx, ttl)
	if err != nil {
		t.Logf("first Extend after the restart failed on stale pooled connections: %v", err)
		if !time.Now().Before(l.Until()) {
			t.Fatalf("the lost Extend ended the lock's validity")
		}
		err = l.Extend(ctx, ttl)
	}
	if err != nil {
		t.Errorf("Extend after the restart: %v", err)
	}
}

// Scenario 6. Random kills, pauses, partitions and restarts on a seeded
// schedule while eight clients contend for one key, until at least 2,000
// cycles and 20 fault episodes are done. The checker must find 0 violations.
//
// Nodes 0 to 2 are durable and restart at once; nodes 3 and 4 have no
// persistence and stay down longer than the ttl, as doc.go requires.
//
// Set REDLOCK_CHAOS_SEED to replay a schedule.
func TestChaosRandomFaults(t *testing.T) {
	t.Parallel() // chaosStart says why
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosSeedEnv, s, err)
		}
	}
	t.Logf("seed %d; replay with %s=%d go test -run 'TestChaosRandomFaults$' .", seed, chaosSeedEnv, seed)
	fmt.Printf("TestChaosRandomFaults: seed %d\n", seed)

	const (
		workers     = 8
		minCycles   = 2000
		minEpisodes = 20
		nodeTimeout = 150 * time.Millisecond
		tries       = 3
		retryMax    = 20 * time.Millisecond
		ttl         = time.Second
	)
	// Fencing counters must survive restarts (docs/fencing.md): every node is
	// durable here. TestChaosRestartDelayed covers nodes without persistence.
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	var wakes wakeEvents // wake-up on release is on, as by default
	ld := &chaosLoad{
		client: realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(),
			redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax), redlock.WithObserver(&wakes)),
		key:        "chaos:random",
		ttl:        ttl,
		lockBudget: chaosLockBudget(tries, true, nodeTimeout, retryMax),
		callBudget: nodeTimeout + chaosSlack,
		check:      newChaosChecker(),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	waitLoad := ld.start(ctx, workers, seed)
	defer waitLoad()
	defer cancel()

	sched := &chaosSchedule{cluster: c, rng: rand.New(rand.NewPCG(seed, 0)), ttl: ttl, log: t.Logf}
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.run(ctx) }()

	enough := realEventually(4*time.Minute, func() bool {
		return ctx.Err() != nil || ld.cycles.Load() >= minCycles && sched.episodes.Load() >= minEpisodes
	})
	cancel()
	schedErr := <-schedDone
	waitLoad()
	elapsed := time.Since(start)

	t.Logf("seed %d: %v, %d fault episodes, faults injected: %s", seed, elapsed.Round(time.Second),
		sched.episodes.Load(), sched.counts())
	t.Logf("wake-up: %d woken attempts, %d of them won, %d lost", wakes.woken.Load(), wakes.wokenWon.Load(), wakes.wokenLost.Load())
	if wakes.wokenWon.Load() == 0 {
		t.Errorf("no woken attempt won: wake-up on release went unexercised under faults")
	}
	ld.verdict(t)
	if schedErr != nil {
		t.Errorf("fault schedule: %v", schedErr)
	}
	if !enough || ld.cycles.Load() < minCycles || sched.episodes.Load() < minEpisodes {
		t.Errorf("liveness: %d cycles and %d episodes in %v, want %d and %d",
			ld.cycles.Load(), sched.episodes.Load(), elapsed, minCycles, minEpisodes)
	}
	if t.Failed() {
		t.Logf("replay with %s=%d", chaosSeedEnv, seed)
	}
}

// A chaosSchedule injects faults in episodes: it faults one, two or
// (rarely, leaving no majority) three nodes, holds, heals them, and pauses.
// Every choice comes from rng, so a seed replays the same schedule.
type chaosSchedule struct {
	cluster  *redistest.Cluster
	rng      *rand.Rand
	ttl      time.Duration
	log      func(string, ...any)
	episodes atomic.Int64

	mu       sync.Mutex
	injected map[string]int
}

var chaosFaultKinds = []string{"kill", "pause", "partition", "restart"}

// run injects faults until ctx ends, then heals everything. It returns the
// first harness error; faults themselves are not errors.
func (s *chaosSchedule) run(ctx context.Context) error {
	for ctx.Err() == nil {
		k := 1 + s.rng.IntN(2) // one or two nodes: a majority survives
		if s.rng.IntN(7) == 0 {
			k = 3 // no majority for a while
		}
		nodes := s.rng.Perm(len(s.cluster.Nodes))[:k]
		kinds := make([]string, k)
		for j := range kinds {
			kinds[j] = chaosFaultKinds[s.rng.IntN(len(chaosFaultKinds))]
		}
		hold := 200*time.Millisecond + time.Duration(s.rng.Int64N(int64(time.Second)))
		gap := 100*time.Millisecond + time.Duration(s.rng.Int64N(int64(300*time.Millisecond)))

		var heals []func() error
		var err error
		for j, i := range nodes {
			var heal func() error
			heal, err = s.inject(s.cluster.Nodes[i], kinds[j])
			if heal != nil {
				heals = append(heals, heal)
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			s.episodes.Add(1)
			sleepCtx(ctx, hold)
		}
		for _, heal := range heals { // heal even when ctx has ended
			if herr := heal(); herr != nil && err == nil {
				err = herr
			}
		}
		if err != nil {
			return err
		}
		sleepCtx(ctx, gap)
	}
	return nil
}

// inject applies one fault to n and returns what undoes it.
func (s *chaosSchedule) inject(n *redistest.Node, kind string) (heal func() error, err error) {
	s.mu.Lock()
	if s.injected == nil {
		s.injected = map[string]int{}
	}
	s.injected[kind]++
	s.mu.Unlock()

	// A node without persistence must stay down longer than the ttl, so that
	// every key it held has expired when it returns.
	downFor := time.Duration(0)
	if !n.Durable {
		downFor = s.ttl + 100*time.Millisecond
	}
	switch kind {
	case "kill":
		if err := n.Kill(); err != nil {
			return nil, err
		}
		killed := time.Now()
		return func() error {
			time.Sleep(time.Until(killed.Add(downFor)))
			return n.Start()
		}, nil
	case "restart":
		if err := n.Kill(); err != nil {
			return nil, err
		}
		time.Sleep(downFor)
		return nil, n.Start()
	case "pause":
		if err := n.Pause(); err != nil {
			return nil, err
		}
		return n.Unpause, nil
	case "partition":
		if err := n.Disconnect(); err != nil {
			return nil, err
		}
		return n.Reconnect, nil
	}
	return nil, fmt.Errorf("unknown fault %q", kind)
}

func (s *chaosSchedule) counts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	total := 0
	for _, k := range chaosFaultKinds {
		parts = append(parts, fmt.Sprintf("%d %s", s.injected[k], k))
		total += s.injected[k]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// Fencing on real nodes: successive locks taken by different clients, while
// nodes are killed and partitioned, get strictly increasing tokens.
func TestChaosFencingSequential(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	const nodeTimeout = 150 * time.Millisecond
	clients := make([]*redlock.Client, 3)
	for i := range clients {
		clients[i] = realClient(t, c.Addrs(), redlock.WithFencing(), redlock.WithNodeTimeout(nodeTimeout),
			redlock.WithRetryDelay(5*time.Millisecond, 30*time.Millisecond))
	}
	// Each step faults up to two nodes (never a majority) and heals the rest.
	steps := []struct {
		kill, cut []int
	}{
		{nil, nil}, {[]int{0}, nil}, {[]int{0, 1}, nil}, {nil, []int{3, 4}}, {[]int{2}, []int{4}},
		{nil, []int{0, 1}}, {[]int{4}, []int{1}}, {[]int{3}, nil}, {nil, nil},
	}
	ctx := context.Background()
	var last uint64
	for i, step := range steps {
		for j, n := range c.Nodes {
			switch {
			case slices.Contains(step.kill, j):
				chaosMust(t, n.Kill())
			case slices.Contains(step.cut, j):
				chaosMust(t, n.Disconnect())
			}
		}
		for round := range 3 {
			client := clients[(i+round)%len(clients)]
			l, err := client.Lock(ctx, "chaos:fenced", 5*time.Second)
			if err != nil {
				t.Fatalf("step %d (kill %v, cut %v): Lock: %v", i, step.kill, step.cut, err)
			}
			if l.Token() <= last {
				t.Fatalf("step %d: token %d after %d", i, l.Token(), last)
			}
			last = l.Token()
			// Unlock may be called again after a failure (its doc); a node
			// that times out on a loaded machine must not end the test.
			err = l.Unlock(ctx)
			for retry := 0; err != nil && !errors.Is(err, redlock.ErrLockLost) && retry < 3; retry++ {
				t.Logf("step %d: Unlock: %v; again", i, err)
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Fatalf("step %d: Unlock: %v", i, err)
			}
		}
		for j, n := range c.Nodes {
			switch {
			case slices.Contains(step.kill, j):
				chaosMust(t, n.Start())
				chaosMust(t, n.WaitReady(10*time.Second))
			case slices.Contains(step.cut, j):
				chaosMust(t, n.Reconnect())
			}
		}
	}
	t.Logf("%d locks through kills and partitions, tokens strictly increasing, last %d", 3*len(steps), last)
}

// A GC pause on real nodes: the holder stalls past its validity, a second
// client takes the lock and writes; when the first wakes, the guarded
// resource (fence.Set, on a real Redis) rejects its write.
func TestChaosFencingPausedHolder(t *testing.T) {
	t.Parallel() // chaosStart says why
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	data := redistest.Start(t) // the protected resource: a plain Redis, not a lock node
	conn, err := redis.Dial("tcp", data.Addr)
	chaosMust(t, err)
	defer conn.Close()
	dataPool := redigo.NewPool(data.Addr)
	defer dataPool.Close()

	const ttl = 500 * time.Millisecond
	stalled := realClient(t, c.Addrs(), redlock.WithFencing(), redlock.WithNodeTimeout(150*time.Millisecond))
	fresh := realClient(t, c.Addrs(), redlock.WithFencing(), redlock.WithNodeTimeout(150*time.Millisecond),
		redlock.WithTries(100), redlock.WithRetryDelay(20*time.Millisecond, 50*time.Millisecond))
	ctx := context.Background()

	old, err := stalled.Lock(ctx, "chaos:gc", ttl)
	chaosMust(t, err)
	chaosMust(t, fence.Set(ctx, dataPool, "doc", old.Token(), "from the first holder"))

	// The stall: the holder does nothing until its keys have expired on
	// every node and the other client has taken over. Lock retries until
	// then, so the hand-over does not depend on how long the stall is.
	newer, err := fresh.Lock(ctx, "chaos:gc", 10*time.Second)
	chaosMust(t, err)
	if !time.Now().After(old.Until()) {
		t.Fatalf("second holder granted while the first was still valid for %v", time.Until(old.Until()))
	}
	chaosMust(t, fence.Set(ctx, dataPool, "doc", newer.Token(), "from the second holder"))

	// The first holder wakes and writes as if it still held the lock.
	err = fence.Set(ctx, dataPool, "doc", old.Token(), "stale")
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write after the pause: got %v, want fence.ErrStale", err)
	}
	got, err := redis.String(conn.Do("GET", "doc"))
	chaosMust(t, err)
	if got != "from the second holder" {
		t.Fatalf("resource holds %q", got)
	}
	if !errors.Is(old.Extend(ctx, ttl), redlock.ErrExpired) {
		t.Fatal("the stalled holder could still extend")
	}
	chaosMust(t, newer.Unlock(ctx))
	t.Logf("tokens %d then %d; the stalled holder's write was rejected", old.Token(), newer.Token())
}

func chaosMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

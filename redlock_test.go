package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

const otherToken = "someone-else"

// Every subset of refusing nodes: the lock is granted exactly when the nodes
// left free form a majority, and a refused attempt leaves no key of ours.
func TestQuorumEveryRefusingSubset(t *testing.T) {
	for n := 1; n <= 6; n++ {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			c := newCluster(t, n)
			client := c.client(t)
			quorum := n/2 + 1
			for mask := 0; mask < 1<<n; mask++ {
				key := fmt.Sprintf("subset-%d", mask)
				for i := range n {
					if mask&(1<<i) != 0 {
						require.NoError(t, c.nodes[i].Set(key, otherToken))
					}
				}
				free := n - bits.OnesCount(uint(mask))
				l, err := client.TryLock(context.Background(), key, time.Second)

				c.settle(t)
				if free >= quorum {
					require.NoError(t, err, "mask %05b: %d of %d free", mask, free, n)
					assert.Equal(t, free, c.count(key, l.Value()), "mask %05b: every free node holds our token", mask)
					require.NoError(t, l.Unlock(context.Background()))
					c.settle(t)
				} else {
					require.ErrorIs(t, err, redlock.ErrNotObtained, "mask %05b: %d of %d free", mask, free, n)
					assert.Nil(t, l)
				}
				// Refusing nodes keep the other holder's token; the rest hold nothing.
				for i, v := range c.values(key) {
					if mask&(1<<i) != 0 {
						assert.Equal(t, otherToken, v, "mask %05b node %d", mask, i)
					} else {
						assert.Empty(t, v, "mask %05b node %d still holds a key", mask, i)
					}
				}
			}
		})
	}
}

// Every subset of failed nodes for N=5, for each kind of failure: the lock is
// granted exactly when a majority works, and the error names every failed
// node.
func TestQuorumEveryFailingSubset(t *testing.T) {
	const n = 5
	kinds := map[string]fault{"down": failing, "lost reply": lostReply, "error reply": errorReply}
	for name, kind := range kinds {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, n)
			client := c.client(t)
			for mask := 0; mask < 1<<n; mask++ {
				for i, p := range c.pools {
					p.set(healthy)
					if mask&(1<<i) != 0 {
						p.set(kind)
					}
				}
				key := fmt.Sprintf("failing-%d", mask)
				failed := bits.OnesCount(uint(mask))
				l, err := client.TryLock(context.Background(), key, time.Second)
				for _, p := range c.pools {
					p.set(healthy)
				}
				if failed <= 2 {
					require.NoError(t, err, "mask %05b", mask)
					require.NoError(t, l.Unlock(context.Background()))
				} else {
					require.ErrorIs(t, err, redlock.ErrNotObtained, "mask %05b", mask)
					want := map[int]bool{}
					for i := range n {
						if mask&(1<<i) != 0 {
							want[i] = true
						}
					}
					assert.Equal(t, want, nodeErrors(err, nil), "mask %05b: %v", mask, err)
				}
				// A lost reply still set the key; the release on every node that
				// may hold it must have removed it again.
				c.settle(t)
				assert.Equal(t, make([]string, n), c.values(key), "mask %05b leaves keys behind", mask)
			}
		})
	}
}

// A node that hangs until its context ends does not hold up a lock that a
// majority granted.
func TestHangingMinorityDoesNotDelayLock(t *testing.T) {
	for _, kind := range []fault{hanging, stuck} {
		c := newCluster(t, 5)
		const timeout = time.Second
		client := c.client(t, redlock.WithNodeTimeout(timeout))
		c.pools[1].set(kind)
		c.pools[3].set(kind)

		start := time.Now()
		l, err := client.TryLock(context.Background(), "hang", 10*time.Second)
		elapsed := time.Since(start)
		require.NoError(t, err)
		assert.Less(t, elapsed, timeout/2, "Lock waited for the hanging nodes")

		start = time.Now()
		require.NoError(t, l.Extend(context.Background(), 10*time.Second))
		require.NoError(t, l.Unlock(context.Background()))
		assert.Less(t, time.Since(start), timeout/2, "Extend or Unlock waited for the hanging nodes")
		// The hanging nodes are still busy, so look at the others only.
		require.Eventually(t, func() bool {
			v := c.values("hang")
			return v[0] == "" && v[2] == "" && v[4] == ""
		}, 5*time.Second, time.Millisecond)
	}
}

// With more than N − quorum nodes hanging, an attempt fails within its bound:
// one node timeout to acquire and one to release the nodes that never
// answered. The pool of the stuck kind ignores its context, so the bound is
// the coordinator's own.
func TestHangingMajorityFailsWithinBound(t *testing.T) {
	for _, kind := range []fault{hanging, stuck} {
		c := newCluster(t, 5)
		const timeout = 100 * time.Millisecond
		client := c.client(t, redlock.WithNodeTimeout(timeout))
		for _, i := range []int{0, 2, 4} {
			c.pools[i].set(kind)
		}

		start := time.Now()
		_, err := client.TryLock(context.Background(), "hang", time.Second)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		assert.Equal(t, map[int]bool{0: true, 2: true, 4: true}, nodeErrors(err, redlock.ErrNodeTimeout), "%v", err)
		assert.Len(t, regexp.MustCompile(`node \d+:`).FindAllString(err.Error(), -1), 3, "each node once: %v", err)
		assert.GreaterOrEqual(t, elapsed, timeout, "failed before the nodes had their time")
		assert.Less(t, elapsed, 2*timeout+time.Second, "failed attempt exceeded its bound")
		assert.Equal(t, make([]string, 5), c.values("hang"), "released every node that answered")
	}
}

// Nodes that answer just after the deadline, ignoring their context: the
// coordinator's timer decides, and their late answers, which arrive while
// the attempt releases, must not be counted twice.
func TestLateMajorityCountedOnce(t *testing.T) {
	c := newCluster(t, 5)
	const timeout = 100 * time.Millisecond
	client := c.client(t, redlock.WithNodeTimeout(timeout))
	for _, i := range []int{0, 2, 4} {
		var calls atomic.Int32
		c.pools[i].onGet(func() {
			if calls.Add(1) == 1 { // only the SET is late; the release is not
				time.Sleep(timeout + 30*time.Millisecond)
			}
		})
	}
	_, err := client.TryLock(context.Background(), "late", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Len(t, regexp.MustCompile(`node \d+:`).FindAllString(err.Error(), -1), 3, "each node once: %v", err)
	assert.Equal(t, map[int]bool{0: true, 2: true, 4: true}, nodeErrors(err, redlock.ErrNodeTimeout))
}

// A real TCP node that accepts connections and never answers: every call
// returns within the node timeout plus slack, on the majority's answers.
func TestFrozenNode(t *testing.T) {
	c := newCluster(t, 4)
	frozen := redigo.NewPool(redistest.StartFrozen(t).Addr())
	t.Cleanup(func() { frozen.Close() })
	pools := []redlock.Pool{c.pools[0], c.pools[1], frozen, c.pools[2], c.pools[3]}
	const timeout = 200 * time.Millisecond
	client, err := redlock.New(pools, redlock.WithNodeTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	bound := timeout + 500*time.Millisecond
	ctx := context.Background()
	for i := range 3 {
		start := time.Now()
		l, err := client.TryLock(ctx, fmt.Sprintf("frozen-%d", i), time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Second))
		require.NoError(t, l.Unlock(ctx))
		assert.Less(t, time.Since(start), bound, "Lock+Extend+Unlock with one frozen node")
	}

	// With the frozen node, three refusals make a majority impossible.
	for _, m := range c.nodes[:3] {
		require.NoError(t, m.Set("frozen-held", otherToken))
	}
	start := time.Now()
	_, err = client.TryLock(ctx, "frozen-held", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Less(t, time.Since(start), 2*timeout+500*time.Millisecond)
}

// The validity window follows validity = ttl − elapsed − drift, with
// drift = ttl×factor + 2ms, on the injected clock.
func TestValidityArithmetic(t *testing.T) {
	c := newCluster(t, 3)
	clock := newFakeClock()
	var perCall atomic.Int64 // how far each node call moves the clock
	for _, p := range c.pools {
		p.onGet(func() { clock.Advance(time.Duration(perCall.Load())) })
	}

	cases := []struct {
		ttl    time.Duration
		factor float64
		drift  time.Duration
	}{
		{time.Second, 0.01, 12 * time.Millisecond},
		{10 * time.Second, 0.01, 102 * time.Millisecond},
		{10 * time.Second, 0, 2 * time.Millisecond},
		{time.Second, 0.5, 502 * time.Millisecond},
		{1500*time.Millisecond + 700*time.Microsecond, 0.01, 17 * time.Millisecond}, // ttl truncated to 1500ms
	}
	for _, tc := range cases {
		client := c.client(t, redlock.WithClock(clock), redlock.WithDriftFactor(tc.factor))
		perCall.Store(int64(10 * time.Millisecond))
		start := clock.Now()
		l, err := client.TryLock(context.Background(), "validity", tc.ttl)
		require.NoError(t, err, "%+v", tc)
		// The window runs from before the first send, whatever the elapsed time.
		ttl := tc.ttl.Truncate(time.Millisecond)
		assert.Equal(t, start.Add(ttl-tc.drift), l.Until(), "%+v", tc)
		require.NoError(t, l.Unlock(context.Background()))
		c.settle(t)

		// A majority that answers only once validity has run out does not count,
		// and the keys it set are released.
		perCall.Store(int64((ttl - tc.drift) / 2))
		_, err = client.TryLock(context.Background(), "validity", tc.ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "%+v", tc)
		assert.Contains(t, err.Error(), "validity window closed")
		assert.Equal(t, make([]string, 3), c.values("validity"), "%+v", tc)
	}
}

// A ttl no greater than the drift allowance can never be valid.
func TestTTLMustExceedDrift(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithClock(newFakeClock()))                // no time passes
	_, err := client.TryLock(context.Background(), "k", 2*time.Millisecond) // drift is 2.02ms
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = client.TryLock(context.Background(), "k", 3*time.Millisecond)
	require.NoError(t, err)
}

// Extend moves the validity window forward; after expiry it touches nothing.
func TestExtend(t *testing.T) {
	c := newCluster(t, 3)
	clock := newFakeClock()
	client := c.client(t, redlock.WithClock(clock))
	ctx := context.Background()

	l, err := client.TryLock(ctx, "extend", time.Second)
	require.NoError(t, err)
	clock.Advance(500 * time.Millisecond)
	extendStart := clock.Now()
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	c.settle(t)
	assert.Equal(t, extendStart.Add(5*time.Second-52*time.Millisecond), l.Until())
	for _, m := range c.nodes {
		assert.Equal(t, 5*time.Second, m.TTL("extend"))
	}

	// Only a majority counts: with two of three nodes down the window stays,
	// and an extension to a shorter ttl shortens it, since the one node that
	// answered now expires sooner.
	until := l.Until()
	c.pools[0].set(failing)
	c.pools[1].set(failing)
	err = l.Extend(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Equal(t, map[int]bool{0: true, 1: true}, nodeErrors(err, errNodeDown))
	assert.Equal(t, until, l.Until())
	err = l.Extend(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Equal(t, clock.Now().Add(time.Second-12*time.Millisecond), l.Until())
	c.pools[0].set(healthy)
	c.pools[1].set(healthy)

	// Past the window, Extend reports expiry and sends nothing.
	clock.Advance(time.Second)
	before := c.gets()
	require.ErrorIs(t, l.Extend(ctx, time.Second), redlock.ErrExpired)
	assert.Equal(t, before, c.gets(), "Extend after expiry made a network call")
}

// An Extend whose majority answers only after the old window closed returns
// ErrExpired and does not move Until forward: the lock was unproven for a
// while, whatever the nodes say now.
func TestExtendThatOutlivesTheWindow(t *testing.T) {
	c := newCluster(t, 3)
	clock := newFakeClock()
	client := c.client(t, redlock.WithClock(clock))
	ctx := context.Background()
	l, err := client.TryLock(ctx, "outlive", time.Second)
	require.NoError(t, err)
	old := l.Until()
	for _, p := range c.pools {
		p.onGet(func() { clock.Advance(400 * time.Millisecond) }) // three calls: past the window
	}
	require.ErrorIs(t, l.Extend(ctx, 10*time.Second), redlock.ErrExpired)
	assert.Equal(t, old, l.Until())
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after validity ran out")
	}
}

// An Extend to a shorter ttl never shortens a key: an older Extend landing
// late must not cut short a key that a newer one counted on.
func TestExtendNeverShortensKeys(t *testing.T) {
	c := newCluster(t, 3)
	clock := newFakeClock()
	client := c.client(t, redlock.WithClock(clock))
	ctx := context.Background()
	l, err := client.TryLock(ctx, "long", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, time.Second))
	c.settle(t)
	for _, m := range c.nodes {
		assert.Equal(t, 10*time.Second, m.TTL("long"))
	}
	// The client's own window follows the extension it asked for: shorter.
	assert.Equal(t, clock.Now().Add(time.Second-12*time.Millisecond), l.Until())
}

// After expiry, the keys are gone and another client holds the lock: Extend
// and Unlock report ErrExpired and leave the new owner's keys alone.
func TestAfterExpiryNewOwnerIsUntouched(t *testing.T) {
	c := newCluster(t, 5)
	clock := newFakeClock()
	client := c.client(t, redlock.WithClock(clock))
	ctx := context.Background()

	old, err := client.TryLock(ctx, "expiry", time.Second)
	require.NoError(t, err)
	c.settle(t)
	clock.Advance(2 * time.Second)
	for _, m := range c.nodes {
		m.FastForward(2 * time.Second)
	}
	owner, err := c.client(t).TryLock(ctx, "expiry", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	require.Equal(t, 5, c.count("expiry", owner.Value()))

	require.ErrorIs(t, old.Extend(ctx, time.Minute), redlock.ErrExpired)
	require.ErrorIs(t, old.Unlock(ctx), redlock.ErrExpired)
	c.settle(t)
	assert.Equal(t, 5, c.count("expiry", owner.Value()), "the old holder touched the new owner's keys")
	for _, m := range c.nodes {
		assert.Equal(t, time.Minute, m.TTL("expiry"))
	}
}

// Unlock deletes only this lock's token, even where another holder's key sits.
func TestUnlockNeverDeletesAnotherToken(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "mine", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	// Two nodes lost our key (say, a restart) and another client took them.
	require.NoError(t, c.nodes[1].Set("mine", otherToken))
	require.NoError(t, c.nodes[4].Set("mine", otherToken))

	require.NoError(t, l.Unlock(ctx))
	c.settle(t)
	assert.Equal(t, []string{"", otherToken, "", "", otherToken}, c.values("mine"))
	assert.True(t, l.Until().IsZero())

	// A released lock cannot be extended, and unlocking again says so.
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redlock.ErrReleased)
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, redlock.ErrReleased)
	require.NotErrorIs(t, err, redlock.ErrExpired, "the lock did not expire: it was released")
	c.settle(t)
	assert.Equal(t, []string{"", otherToken, "", "", otherToken}, c.values("mine"))
}

// Unlock right after Lock, while a minority SET is still on its way: the
// release must not overtake the SET on that node, or the SET would land
// after it and leave an orphan key that blocks the node for a whole ttl.
func TestUnlockBeforeSlowSetLands(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	gate := make(chan struct{})
	var calls atomic.Int32
	c.pools[2].onGet(func() {
		if calls.Add(1) == 1 { // hold back only the SET
			<-gate
		}
	})
	l, err := client.TryLock(ctx, "slow", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx)) // returns on nodes 0 and 1
	close(gate)                       // node 2's SET goes on, then its release
	c.settle(t)
	assert.Equal(t, []string{"", "", ""}, c.values("slow"))
}

// Unlock right after Lock, before the goroutine that sends a minority SET
// has even run: the release reaches that node first, so the SET's goroutine
// must release the node again once its SET returns.
func TestUnlockBeforeSetIsSent(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	warm, err := client.TryLock(ctx, "warm", time.Minute) // caches the release script
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	c.settle(t)

	ran := make(chan string, 10)
	c.pools[2].onDone(func(cmd string) { ran <- cmd })
	held := make(chan struct{})
	undo := redlock.HoldNodeStart(client, 2, held)
	l, err := client.TryLock(ctx, "unsent", time.Minute)
	require.NoError(t, err)
	undo() // Unlock's goroutine for node 2 runs at once
	require.NoError(t, l.Unlock(ctx))
	require.Equal(t, "EVALSHA", <-ran, "the release ran on node 2 first")
	close(held) // now node 2's SET goes out, after the release
	c.settle(t)
	assert.Equal(t, []string{"", "", ""}, c.values("unsent"))
}

// Extend stops waiting as soon as ctx is cancelled, even while nodes hang;
// its calls finish in the background. Unlock does not: its release is
// always sent and waited for up to one node timeout, and its error says the
// release was not confirmed, with ctx's error.
func TestCancelWhileNodesHang(t *testing.T) {
	c := newCluster(t, 3)
	const timeout = 2 * time.Second
	client := c.client(t, redlock.WithNodeTimeout(timeout))
	l, err := client.TryLock(context.Background(), "cancel", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	c.pools[0].set(hanging)
	c.pools[1].set(hanging)
	// In this order: after Unlock has begun, the lock no longer counts as
	// held, and Extend would return ErrExpired without sending anything.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	err = l.Extend(ctx, time.Minute)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), timeout/2, "Extend waited for the hanging nodes after cancel")

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	err = l.Unlock(ctx)
	took := time.Since(start)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "release not confirmed")
	assert.GreaterOrEqual(t, took, timeout/2, "Unlock gave up on its release when ctx was cancelled")
	assert.Less(t, took, timeout+time.Second, "Unlock outlasted one node timeout")
	assert.Equal(t, "", c.values("cancel")[2], "the answering node was not released")
}

// Unlock that reaches fewer than a majority reports the nodes it missed.
func TestUnlockWithoutMajority(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	c.pools[0].set(failing)
	c.pools[2].set(failing)
	err = l.Unlock(ctx)
	require.Error(t, err)
	assert.Equal(t, map[int]bool{0: true, 2: true}, nodeErrors(err, errNodeDown))
	// The releases may have reached nodes whose replies were lost: the lock
	// no longer counts as held, and Extend says so.
	assert.True(t, l.Until().IsZero(), "a failed Unlock must stop counting the lock as held")
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redlock.ErrExpired)

	c.pools[0].set(healthy)
	c.pools[2].set(healthy)
	require.NoError(t, l.Unlock(ctx))
	c.settle(t)
	assert.Equal(t, []string{"", "", ""}, c.values("k"))
}

// Scripts fall back from EVALSHA to EVAL on a node that lost its script cache.
func TestScriptCacheFlushed(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "flush", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, time.Minute)) // caches the script
	for _, m := range c.nodes {
		conn, err := redis.Dial("tcp", m.Addr())
		require.NoError(t, err)
		_, err = conn.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		conn.Close()
	}
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Unlock(ctx))
	c.settle(t)
	assert.Equal(t, []string{"", "", ""}, c.values("flush"))
}

// A context that has ended surfaces through errors.Is, and an ended context
// sends nothing.
func TestContext(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := client.Lock(cancelled, "ctx", time.Second)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Zero(t, c.gets(), "a cancelled Lock made a network call")

	// Lock keeps retrying a held key until its deadline.
	for _, m := range c.nodes {
		require.NoError(t, m.Set("ctx", otherToken))
	}
	// 500ms: retries are 1 to 5ms apart, so even a loaded machine fits
	// several attempts.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.client(t, redlock.WithTries(1_000_000)).Lock(ctx, "ctx", time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Greater(t, c.gets(), 3, "Lock did not retry")

	// Cancelled while nodes hang: the call returns with the cause.
	c.pools[0].set(hanging)
	c.pools[1].set(hanging)
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = client.TryLock(ctx, "ctx-hang", time.Second)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, redlock.ErrNotObtained)

	// Unlock and Extend honour ctx too.
	c.pools[0].set(healthy)
	c.pools[1].set(healthy)
	l, err := client.TryLock(context.Background(), "ctx-held", time.Second)
	require.NoError(t, err)
	require.ErrorIs(t, l.Extend(cancelled, time.Second), context.Canceled)
	// Unlock's release is sent whatever ctx says (engine.go, releaseRound).
	require.NoError(t, l.Unlock(cancelled))
	require.ErrorIs(t, l.Unlock(context.Background()), redlock.ErrReleased)
}

// Lock retries until the holder lets go.
func TestLockRetriesUntilReleased(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithTries(1000))
	ctx := context.Background()
	first, err := client.TryLock(ctx, "retry", time.Minute)
	require.NoError(t, err)
	_, err = client.TryLock(ctx, "retry", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)

	got := make(chan error, 1)
	go func() {
		l, err := client.Lock(ctx, "retry", time.Minute)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it fail a few attempts; the result does not depend on it
	require.NoError(t, first.Unlock(ctx))
	require.NoError(t, <-got)
}

// A hundred clients race for one key; exactly one wins. Simultaneous
// attempts can split the vote so that none wins a round; the random retry
// delay breaks the tie, and every attempt after the winner's is refused.
func TestRaceExactlyOneWinner(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t, redlock.WithTries(20), redlock.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
	const racers = 100
	var (
		wg      sync.WaitGroup
		winners atomic.Int32
		other   atomic.Int32
		start   = make(chan struct{})
	)
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := client.Lock(context.Background(), "race", time.Minute)
			switch {
			case err == nil:
				winners.Add(1)
			case !errors.Is(err, redlock.ErrNotObtained):
				other.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.EqualValues(t, 1, winners.Load())
	assert.Zero(t, other.Load(), "errors other than ErrNotObtained")
}

// Tokens are 128 random bits, fresh for every attempt.
func TestTokens(t *testing.T) {
	c := newCluster(t, 1)
	client := c.client(t)
	seen := map[string]bool{}
	for i := range 200 {
		l, err := client.TryLock(context.Background(), fmt.Sprint("tok", i), time.Second)
		require.NoError(t, err)
		assert.Len(t, l.Value(), 22, "base64 of 16 bytes")
		assert.False(t, seen[l.Value()], "token repeated")
		seen[l.Value()] = true
	}

	boom := errors.New("no entropy")
	client = c.client(t, redlock.WithTokenFunc(func() (string, error) { return "", boom }))
	_, err := client.TryLock(context.Background(), "tok", time.Second)
	require.ErrorIs(t, err, boom)
	client = c.client(t, redlock.WithTokenFunc(func() (string, error) { return "", nil }))
	_, err = client.TryLock(context.Background(), "tok", time.Second)
	require.ErrorContains(t, err, "empty token")
}

// Bad input gets a clear redlock error, never a panic and never a network
// call.
func TestBadInput(t *testing.T) {
	c := newCluster(t, 3)
	pools := []redlock.Pool{c.pools[0], c.pools[1], c.pools[2]}
	var nilPool *redigo.Pool

	newCases := map[string]struct {
		pools []redlock.Pool
		opts  []redlock.Option
	}{
		"no pools":             {nil, nil},
		"nil pool":             {[]redlock.Pool{c.pools[0], nil}, nil},
		"typed nil pool":       {[]redlock.Pool{nilPool}, nil},
		"65 pools":             {slices.Repeat([]redlock.Pool{c.pools[0]}, 65), nil},
		"zero tries":           {pools, []redlock.Option{redlock.WithTries(0)}},
		"negative drift":       {pools, []redlock.Option{redlock.WithDriftFactor(-0.1)}},
		"drift of one":         {pools, []redlock.Option{redlock.WithDriftFactor(1)}},
		"NaN drift":            {pools, []redlock.Option{redlock.WithDriftFactor(math.NaN())}},
		"zero node timeout":    {pools, []redlock.Option{redlock.WithNodeTimeout(0)}},
		"negative timeout":     {pools, []redlock.Option{redlock.WithNodeTimeout(-time.Second)}},
		"min delay over max":   {pools, []redlock.Option{redlock.WithRetryDelay(time.Second, time.Millisecond)}},
		"negative retry delay": {pools, []redlock.Option{redlock.WithRetryDelay(-time.Second, time.Millisecond)}},
		"nil clock":            {pools, []redlock.Option{redlock.WithClock(nil)}},
		"nil token func":       {pools, []redlock.Option{redlock.WithTokenFunc(nil)}},
		"nil option":           {pools, []redlock.Option{nil}},
		"same pool twice":      {[]redlock.Pool{c.pools[0], c.pools[1], c.pools[0]}, nil},
		"same address twice": {[]redlock.Pool{
			redigo.NewPool(c.nodes[0].Addr()), redigo.NewPool(c.nodes[1].Addr()), redigo.NewPool(c.nodes[0].Addr()),
		}, nil},
		"overflowing retry range": {pools, []redlock.Option{redlock.WithRetryDelay(0, math.MaxInt64)}},
	}
	for name, tc := range newCases {
		client, err := redlock.New(tc.pools, tc.opts...)
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Nil(t, client, name)
		if err != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: "), "%s: %v", name, err)
		}
	}

	client := c.client(t)
	ctx := context.Background()
	held, err := client.TryLock(ctx, "held", time.Second)
	require.NoError(t, err)
	before := c.gets()
	callCases := map[string]func() error{
		"empty key":         func() error { _, err := client.Lock(ctx, "", time.Second); return err },
		"zero ttl":          func() error { _, err := client.TryLock(ctx, "k", 0); return err },
		"negative ttl":      func() error { _, err := client.TryLock(ctx, "k", -time.Second); return err },
		"ttl under drift":   func() error { _, err := client.TryLock(ctx, "k", time.Millisecond); return err },
		"sub-ms ttl":        func() error { _, err := client.TryLock(ctx, "k", time.Microsecond); return err },
		"nil ctx":           func() error { _, err := client.TryLock(nil, "k", time.Second); return err }, //nolint:staticcheck
		"extend zero ttl":   func() error { return held.Extend(ctx, 0) },
		"extend nil ctx":    func() error { return held.Extend(nil, time.Second) }, //nolint:staticcheck
		"unlock nil ctx":    func() error { return held.Unlock(nil) },              //nolint:staticcheck
		"extend under drft": func() error { return held.Extend(ctx, 2*time.Millisecond) },
		"extend a nil lock": func() error { var l *redlock.Lock; return l.Extend(ctx, time.Second) },
		"unlock a nil lock": func() error { var l *redlock.Lock; return l.Unlock(ctx) },
	}
	for name, call := range callCases {
		err := call()
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		if err != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: "), "%s: %v", name, err)
		}
	}
	assert.Equal(t, before, c.gets(), "bad input made a network call")

	// The nil *Lock of a failed Lock holds nothing, and says so.
	var none *redlock.Lock
	assert.True(t, none.Until().IsZero())
	assert.Empty(t, none.Key()+none.Value())
	assert.Zero(t, none.Token())
	select {
	case <-none.Done():
	default:
		t.Error("Done of the nil *Lock is not closed")
	}
}

// Errors read on one line and keep every cause reachable.
func TestErrorShape(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	c.pools[0].set(failing)
	c.pools[2].set(failing)
	_, err := client.TryLock(context.Background(), "shape", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, errNodeDown)
	var ne *redlock.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, 0, ne.Node, "causes come in node order")
	// The attempt fails once two nodes failed, whether or not node 1 answered.
	assert.Regexp(t,
		`^redlock: lock not obtained: [01] agreed, 0 refused, 2 failed of 3 nodes; 2 needed; node 0: test: node down; node 2: test: node down$`,
		err.Error())
}

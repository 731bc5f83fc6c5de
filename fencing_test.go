package redlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
)

// Successive locks on a key get strictly increasing fencing tokens, even as
// each is granted by a different majority of nodes.
func TestFencingTokensIncreaseAcrossMajorities(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t, redlock.WithFencing())
	ctx := context.Background()
	down := [][]int{{}, {0, 1}, {3, 4}, {1, 2}, {0, 4}, {2, 3}, {0, 2}, {}}
	var last uint64
	for _, nodes := range down {
		for _, i := range nodes {
			c.pools[i].set(failing)
		}
		l, err := client.TryLock(ctx, "fenced", time.Minute)
		require.NoError(t, err, "down %v", nodes)
		assert.Greater(t, l.Token(), last, "down %v", nodes)
		last = l.Token()
		require.NoError(t, l.Unlock(ctx))
		for _, i := range nodes {
			c.pools[i].set(healthy)
		}
		c.settle(t)
	}
	assert.Equal(t, uint64(len(down)), last, "no token was skipped on this path")
}

// A failed acquisition may raise counters on a minority; later tokens still
// exceed every token granted before.
func TestFencingAfterFailedAcquisition(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithFencing())
	ctx := context.Background()
	first, err := client.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, first.Unlock(ctx))
	c.settle(t)

	// Round 1 wins on nodes 0 and 1; node 1 then fails, so round 2 reaches
	// only node 0 and the attempt is lost, leaving node 0's counter raised.
	var calls int
	c.pools[1].onGet(func() {
		calls++
		if calls == 2 {
			c.pools[1].set(failing)
		}
	})
	c.pools[2].set(failing)
	_, err = client.TryLock(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	// Node 1 is down, so its key stays until the ttl; node 0's is released.
	assert.Empty(t, c.values("k")[0], "the lost attempt released node 0")
	c.pools[1].before.Store(nil)
	c.pools[1].set(healthy)
	c.pools[2].set(healthy)

	second, err := client.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	assert.Greater(t, second.Token(), first.Token())
}

// A node whose round-1 answer came after the token was computed, and whose
// counter has reached the token since, must not count in round 2: the
// token would not exceed what that node has seen.
func TestFencingIgnoresCounterAhead(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithFencing())
	warm, err := client.TryLock(context.Background(), "warm", time.Minute) // caches the scripts
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(context.Background()))
	c.settle(t)
	require.NoError(t, c.nodes[2].Set("redlock:fence:{k}", "5")) // another holder's token
	gate := make(chan struct{})
	var calls1, calls2 atomic.Int32
	c.pools[2].onGet(func() {
		if calls2.Add(1) == 1 { // node 2's SET waits until round 2 has begun
			<-gate
		}
	})
	c.pools[1].onGet(func() {
		if calls1.Add(1) == 2 { // round 2 begins: node 1 fails from now on
			c.pools[1].set(failing)
			close(gate)
		}
	})
	_, err = client.TryLock(context.Background(), "k", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), "node 2: fencing counter not below the token")
	c.settle(t)
	v := c.values("k") // node 1 was down for the release: its key waits for the ttl
	assert.Equal(t, []string{"", ""}, []string{v[0], v[2]}, "the lost attempt released nodes 0 and 2")
}

func TestNoFencingByDefault(t *testing.T) {
	c := newCluster(t, 3)
	l, err := c.client(t).TryLock(context.Background(), "k", time.Minute)
	require.NoError(t, err)
	assert.Zero(t, l.Token())
	c.settle(t)
	for _, m := range c.nodes {
		assert.False(t, m.Exists("redlock:fence:{k}"), "a counter was written without WithFencing")
	}
}

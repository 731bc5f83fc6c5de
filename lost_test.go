package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
)

// Unlock within the validity window still reports a lock whose key a
// majority no longer held: the critical section may not have been
// exclusive.
func TestUnlockReportsLostExclusion(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t)
	ctx := context.Background()

	for name, damage := range map[string]func(i int){
		"flushed":     func(i int) { c.nodes[i].FlushAll() },
		"overwritten": func(i int) { require.NoError(t, c.nodes[i].Set("lost", "someone else")) },
	} {
		t.Run(name, func(t *testing.T) {
			l, err := client.TryLock(ctx, "lost", time.Minute)
			require.NoError(t, err)
			c.settle(t)
			for _, i := range []int{0, 2, 4} {
				damage(i)
			}
			require.True(t, time.Now().Before(l.Until()), "the lock is still within its window")
			err = l.Unlock(ctx)
			require.ErrorIs(t, err, redlock.ErrLockLost)
			assert.Contains(t, err.Error(), "3 of 5 nodes")
			c.settle(t)
			assert.Empty(t, c.values("lost")[1]+c.values("lost")[3], "Unlock still released the nodes that held the key")
			for _, m := range c.nodes {
				m.FlushAll()
			}
		})
	}

	// Two of five gone: a majority still held the key; no loss.
	l, err := client.TryLock(ctx, "kept", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	c.nodes[0].FlushAll()
	c.nodes[1].FlushAll()
	require.NoError(t, l.Unlock(ctx))
}

// Extend says which case it hit: a majority without the key is a loss,
// not just a failed extension.
func TestExtendReportsLoss(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "gone", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	c.nodes[0].FlushAll()
	c.pools[2].set(failing)
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.NotErrorIs(t, err, redlock.ErrLockLost, "one refusal and one failure do not prove a loss")
	assert.True(t, time.Now().Before(l.Until()), "a failed extension keeps the old window")

	c.pools[2].set(healthy)
	c.nodes[1].FlushAll()
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, redlock.ErrLockLost, "two of three without the key prove it")
	assert.False(t, time.Now().Before(l.Until()), "a proven loss ends the window: Until %v ahead", time.Until(l.Until()))
	select {
	case <-l.Done():
	default:
		t.Error("Done is still open after a proven loss")
	}
}

// A retry of an Unlock that reached too few nodes counts the nodes it
// released the first time, and does not mistake them for a loss.
func TestUnlockRetryIsNotALoss(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "retry", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	c.pools[1].set(failing)
	c.pools[2].set(failing)
	err = l.Unlock(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, redlock.ErrLockLost)
	c.settle(t)
	assert.Empty(t, c.values("retry")[0], "node 0 was released")

	c.pools[1].set(healthy)
	c.pools[2].set(healthy)
	require.NoError(t, l.Unlock(ctx), "node 0, released before, counts for the retry")
}

// A retry of an Unlock whose releases ran but whose replies were lost finds
// the key gone on those nodes: its own doing, not a loss.
func TestUnlockRetryAfterLostReplies(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	warm, err := client.TryLock(ctx, "warm", time.Minute) // caches the release script
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	l, err := client.TryLock(ctx, "lost-replies", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	c.pools[0].set(lostReply)
	c.pools[1].set(lostReply)
	err = l.Unlock(ctx)
	require.Error(t, err, "no release confirmed by a majority")
	require.NotErrorIs(t, err, redlock.ErrLockLost)
	c.settle(t)
	assert.Equal(t, []string{"", ""}, c.values("lost-replies")[:2], "the releases ran")

	c.pools[0].set(healthy)
	c.pools[1].set(healthy)
	require.NoError(t, l.Unlock(ctx), "the retry must not report its own deletions as a loss")
}

// Errors read as one line with the package prefix once, and a walk of the
// tree by the standard Unwrap methods alone (no errors.As) finds the
// NodeError of every failed node.
func TestErrorsAreOneLineAndWalkable(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t, redlock.WithTries(1))
	ctx := context.Background()
	l, err := client.TryLock(ctx, "shape", time.Minute)
	require.NoError(t, err)
	c.settle(t)
	for _, i := range []int{0, 1, 2} {
		c.nodes[i].FlushAll()
	}
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	msg := err.Error()
	assert.NotContains(t, msg, "\n")
	assert.Equal(t, 1, strings.Count(msg, "redlock: "), "one prefix: %s", msg)
	assert.Contains(t, msg, "lock lost")

	// Three nodes down: the attempt fails with a NodeError for each, which
	// a walk by the standard Unwrap methods alone (no errors.As) finds.
	for _, i := range []int{2, 3, 4} {
		c.pools[i].set(failing)
	}
	_, err = client.TryLock(ctx, "shape:2", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	msg = err.Error()
	assert.NotContains(t, msg, "\n")
	assert.Equal(t, 1, strings.Count(msg, "redlock: "), "one prefix: %s", msg)
	found := map[int]bool{}
	var walk func(error)
	walk = func(e error) {
		if ne, ok := e.(*redlock.NodeError); ok {
			found[ne.Node] = true
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	assert.Equal(t, map[int]bool{2: true, 3: true, 4: true}, found)
	for _, i := range []int{2, 3, 4} {
		c.pools[i].set(healthy)
	}

	// Do's error when fn fails and the lock is lost too: one line, both
	// reachable.
	boom := errors.New("boom")
	err = client.Do(ctx, "shape:do", 300*time.Millisecond, func(ctx context.Context) error {
		for _, m := range c.nodes {
			m.FlushAll()
		}
		<-ctx.Done()
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	assert.NotContains(t, err.Error(), "\n")
	// fn's own error comes first, as fn wrote it; the loss that follows
	// keeps the package prefix, once (it read "boom; lock lost: ...").
	assert.Equal(t, 1, strings.Count(err.Error(), "redlock: "), "one prefix: %s", err)
	assert.True(t, strings.HasPrefix(err.Error(), "boom; redlock: lock lost: "), "fn's error, then the loss: %s", err)
}

// Proclaim's error, when too few nodes take the new value, carries the
// NodeError of each node that failed, as every other call's does (it had
// none: the publish round's causes were dropped).
func TestProclaimErrorNamesTheNodes(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	ld, err := client.Election("proclaim:nodes").Campaign(ctx, "a")
	require.NoError(t, err)
	defer func() { _ = ld.Resign(ctx) }()
	c.pools[1].set(failing)
	c.pools[2].set(failing)
	err = ld.Proclaim(ctx, "b")
	c.pools[1].set(healthy)
	c.pools[2].set(healthy)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, errNodeDown)
	assert.Equal(t, 1, strings.Count(err.Error(), "redlock: "), "one prefix: %s", err)
	found := realNodeErrors(err)
	assert.Contains(t, found, 1, "node 1's failure: %v", err)
	assert.Contains(t, found, 2, "node 2's failure: %v", err)
}

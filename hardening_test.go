package redlock_test

// Tests for defects found in review (issue 13); each failed before its fix.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
)

// cancelOnReading is the system clock that cancels a context on its nth
// reading: a caller whose deadline passes at that moment.
type cancelOnReading struct {
	readings atomic.Int32
	at       int32
	cancel   context.CancelFunc
}

func (c *cancelOnReading) Now() time.Time {
	if c.readings.Add(1) == c.at {
		c.cancel()
	}
	return time.Now()
}

// A fenced Lock whose context ends between its two rounds must release the
// majority that round 1 won: every lost attempt releases what it acquired.
func TestFencedLockCancelledBetweenRounds(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Reading 1 is the attempt's start; reading 2 checks round 1's majority
	// against the window, just before round 2 would be sent.
	clock := &cancelOnReading{at: 2, cancel: cancel}
	client := c.client(t, redlock.WithFencing(), redlock.WithClock(clock))

	_, err := client.TryLock(ctx, "between", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 2, clock.readings.Load(), "the context was not cancelled between the rounds")
	c.settle(t)
	assert.Equal(t, []string{"", "", ""}, c.values("between"), "the lost attempt left its key on the nodes")

	other, err := c.client(t, redlock.WithFencing()).TryLock(context.Background(), "between", time.Minute)
	require.NoError(t, err, "the key stayed locked after the lost attempt")
	require.NoError(t, other.Unlock(context.Background()))
}

// When the caller's deadline ends an Extend or an Unlock, ctx.Err() stays
// reachable, even when the node timer, set to the same instant, fires first.
func TestDeadlineStaysReachableFromExtendAndUnlock(t *testing.T) {
	c := newCluster(t, 3)
	const d = 20 * time.Millisecond
	// Attempts retry, so that a loaded machine that misses the short node
	// timeout while all nodes are healthy still gets its lock.
	client := c.client(t, redlock.WithNodeTimeout(d), redlock.WithTries(100))
	hang := func(f fault) {
		c.pools[1].set(f)
		c.pools[2].set(f)
	}
	for i := range 20 {
		hang(healthy)
		c.settle(t)
		// A key per round: the failed Unlock below leaves its key until
		// the ttl, and this test is not about freeing it.
		l, err := client.Lock(context.Background(), fmt.Sprint("deadline:", i), time.Minute)
		require.NoError(t, err)
		hang(hanging)

		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = l.Extend(ctx, time.Minute)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Extend %d", i)
		assert.ErrorIs(t, err, redlock.ErrNotObtained, "Extend %d", i)

		ctx, cancel = context.WithTimeout(context.Background(), d)
		err = l.Unlock(ctx)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Unlock %d", i)

	}
	hang(healthy)
}

func TestRetryDelayRangeThatOverflows(t *testing.T) {
	c := newCluster(t, 1)
	_, err := redlock.New([]redlock.Pool{c.pools[0]}, redlock.WithRetryDelay(0, math.MaxInt64))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = redlock.New([]redlock.Pool{c.pools[0]}, redlock.WithRetryDelay(1, math.MaxInt64))
	require.NoError(t, err, "a range of MaxInt64 values fits")
}

// scriptedClock returns the times queued in it, one per reading, and then
// the last one again.
type scriptedClock struct {
	mu    sync.Mutex
	queue []time.Time
	last  time.Time
}

func (c *scriptedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 {
		c.last, c.queue = c.queue[0], c.queue[1:]
	}
	return c.last
}

func (c *scriptedClock) push(ts ...time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, ts...)
}

// An Extend whose majority was checked just before the window closed, and
// that returns after it closed, must not move Until forward again.
func TestUntilNeverMovesForwardOncePassed(t *testing.T) {
	c := newCluster(t, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &scriptedClock{last: t0}
	client := c.client(t, redlock.WithClock(clock))
	l, err := client.TryLock(context.Background(), "until", time.Second)
	require.NoError(t, err)
	old := l.Until()

	// Extend reads the clock at its start, when its majority is counted
	// (just inside the window), and when it records the result (past it).
	clock.push(old.Add(-100*time.Millisecond), old.Add(-time.Millisecond), old.Add(time.Millisecond))
	err = l.Extend(context.Background(), time.Second)
	require.ErrorIs(t, err, redlock.ErrExpired)
	assert.Equal(t, old, l.Until(), "Until moved after it had passed")
}

// Do's error and the cause of fn's context agree about a loss, whichever of
// Do's paths notices it, when fn returns right around the end of validity.
func TestDoCauseAgreesWithError(t *testing.T) {
	doNoLeaks(t)
	for i := range 12 {
		nodes := doStart(t, 3)
		c := nodes.client(redlock.WithNodeTimeout(20 * time.Millisecond))
		const ttl = 150 * time.Millisecond
		var fnCtx context.Context
		// Returns from 3 ms before Until to 3 ms after it.
		offset := time.Duration(i-6) * 500 * time.Microsecond
		err := c.Do(context.Background(), "cause", ttl, func(ctx context.Context) error {
			fnCtx = ctx
			l := redlock.HeldLock(ctx)
			for _, m := range nodes.nodes {
				m.Close() // every extension fails from now on
			}
			time.Sleep(time.Until(l.Until().Add(offset)))
			return nil
		})
		lostErr := errors.Is(err, redlock.ErrLockLost)
		lostCause := errors.Is(context.Cause(fnCtx), redlock.ErrLockLost)
		if lostErr != lostCause {
			t.Errorf("offset %v: Do's error %v, fn's cause %v: they disagree about the loss", offset, err, context.Cause(fnCtx))
		}
	}
}

// If ctx is cancelled first, fn's cause stays ctx's, and a loss that follows
// while fn winds down shows in Do's error: the documented exception.
func TestDoParentCancelledThenLost(t *testing.T) {
	doNoLeaks(t)
	nodes := doStart(t, 3)
	c := nodes.client()
	const ttl = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fnCtx context.Context
	err := c.Do(ctx, "parent-first", ttl, func(fc context.Context) error {
		fnCtx = fc
		cancel()
		<-fc.Done()
		for _, m := range nodes.nodes {
			m.FlushAll() // the key vanishes: the next extension is refused
		}
		deadline := time.Now().Add(2 * ttl)
		for time.Now().Before(deadline) && redlock.HeldLock(fc).Until().After(time.Now()) {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	})
	assert.ErrorIs(t, err, redlock.ErrLockLost, "the loss while fn wound down is not in Do's error")
	assert.ErrorIs(t, context.Cause(fnCtx), context.Canceled)
	assert.NotErrorIs(t, context.Cause(fnCtx), redlock.ErrLockLost)
}

package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

func TestRetryStrategies(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		s    redlock.RetryStrategy
		want []time.Duration // exact delays for tries 1, 2, ...
	}{
		{"constant", redlock.ConstantRetry(5 * ms), []time.Duration{5 * ms, 5 * ms, 5 * ms}},
	} {
		for i, want := range tc.want {
			assert.Equal(t, want, tc.s(i+1), "%s, try %d", tc.name, i+1)
		}
	}
	// Exponential with full jitter: within [0, min(max, base·2^(try−1))],
	// reaching the ceiling's neighbourhood, and never past max even for
	// tries whose ceiling would overflow.
	exp := redlock.ExponentialRetry(ms, 100*ms)
	for try, ceiling := range map[int]time.Duration{1: ms, 2: 2 * ms, 3: 4 * ms, 7: 64 * ms, 8: 100 * ms, 70: 100 * ms, 1 << 30: 100 * ms} {
		var top time.Duration
		for range 2000 {
			d := exp(try)
			require.True(t, d >= 0 && d <= ceiling, "try %d: delay %v outside [0, %v]", try, d, ceiling)
			top = max(top, d)
		}
		assert.Greater(t, top, ceiling/2, "try %d: never near the ceiling %v", try, ceiling)
	}
}

// Lock pauses as its strategy says, and stops when the strategy gives up.
func TestLockFollowsItsStrategy(t *testing.T) {
	c := newCluster(t, 3)
	holder := c.client(t)
	_, err := holder.TryLock(context.Background(), "strategy", time.Minute)
	require.NoError(t, err)
	c.settle(t) // the holder's stragglers are not this test's commands

	var asked atomic.Int32
	giveUpAfter3 := redlock.RetryStrategy(func(try int) time.Duration {
		asked.Add(1)
		if try >= 3 {
			return -1
		}
		return time.Millisecond
	})
	client := c.client(t, redlock.WithRetryStrategy(giveUpAfter3), redlock.WithTries(100))
	before := c.gets()
	_, err = client.Lock(context.Background(), "strategy", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.EqualValues(t, 3, asked.Load(), "the strategy was asked after each failed attempt")
	assert.Equal(t, 3*3, c.gets()-before, "three attempts on three nodes")

	_, err = redlock.New([]redlock.Pool{c.pools[0]}, redlock.WithRetryStrategy(nil))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	// The last of WithRetryStrategy and WithRetryDelay wins.
	_, err = redlock.New([]redlock.Pool{c.pools[0]}, redlock.WithRetryStrategy(nil), redlock.WithRetryDelay(0, 1))
	require.NoError(t, err)
}

// A majority of nodes that refuse the command itself ends Lock at once,
// with the cause, instead of retrying for its whole budget.
func TestLockFailsFastOnErrorsThatAreNotContention(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithTries(1000), redlock.WithRetryDelay(10*time.Millisecond, 10*time.Millisecond))
	c.pools[0].set(errorReply) // NOPERM
	c.pools[2].set(errorReply)
	start := time.Now()
	_, err := client.Lock(context.Background(), "hopeless", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	var rerr driver.ReplyError
	require.ErrorAs(t, err, &rerr)
	assert.Equal(t, "NOPERM", rerr.Code())
	assert.Contains(t, err.Error(), "not retried")
	assert.Less(t, time.Since(start), time.Second, "Lock retried a hopeless failure")

	// One such node of three leaves a majority possible: Lock retries, and
	// wins once the key is free.
	c.pools[2].set(healthy)
	other := c.client(t)
	held, err := other.TryLock(context.Background(), "contended", time.Minute)
	require.NoError(t, err)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = held.Unlock(context.Background())
	}()
	l, err := client.Lock(context.Background(), "contended", time.Minute)
	require.NoError(t, err, "a minority of refusing nodes must not stop the retries")
	require.NoError(t, l.Unlock(context.Background()))

	// Node failures that may pass (down, timing out) are retried.
	c.pools[0].set(failing)
	c.pools[2].set(failing)
	quick := c.client(t, redlock.WithTries(4), redlock.WithRetryDelay(time.Millisecond, time.Millisecond))
	before := c.gets()
	_, err = quick.Lock(context.Background(), "down", time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.GreaterOrEqual(t, c.gets()-before, 4*3, "failures that may pass were not retried")
}

// A token function that fails is not contention: no retry, and the error
// wraps ErrNotObtained and the function's error.
func TestTokenFunctionFailureIsNotRetried(t *testing.T) {
	c := newCluster(t, 3)
	boom := errors.New("no entropy")
	var calls atomic.Int32
	client := c.client(t, redlock.WithTries(32), redlock.WithTokenFunc(func() (string, error) {
		calls.Add(1)
		return "", boom
	}))
	_, err := client.Lock(context.Background(), "token", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, boom)
	assert.EqualValues(t, 1, calls.Load(), "the token function was retried")
	assert.Zero(t, c.gets(), "a failed token function sent commands")
}

package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

func TestGuard(t *testing.T) {
	var g fence.Guard
	var wrote []uint64
	write := func(tok uint64) error { return g.Do(tok, func() error { wrote = append(wrote, tok); return nil }) }
	require.NoError(t, write(3))
	require.NoError(t, write(3), "the same holder may write again")
	require.NoError(t, write(5))
	require.ErrorIs(t, write(4), fence.ErrStale)
	require.ErrorIs(t, write(0), redlock.ErrInvalid)
	assert.Equal(t, []uint64{3, 3, 5}, wrote)
	assert.Equal(t, uint64(5), g.Highest())

	boom := errors.New("disk full")
	require.ErrorIs(t, g.Do(6, func() error { return boom }), boom)
}

// A Guard keeps a token whose write failed: the holders of lower tokens are
// stale whether or not the write took effect.
func TestGuardKeepsTokenOfFailedWrite(t *testing.T) {
	var g fence.Guard
	boom := errors.New("disk full")
	require.ErrorIs(t, g.Do(6, func() error { return boom }), boom)
	assert.Equal(t, uint64(6), g.Highest())
	ran := false
	require.ErrorIs(t, g.Do(5, func() error { ran = true; return nil }), fence.ErrStale)
	assert.False(t, ran, "a stale write ran")
}
func TestSet(t *testing.T) {
	m := miniredis.RunT(t)
	pool := redigo.NewPool(m.Addr())
	defer pool.Close()
	ctx := context.Background()
	require.NoError(t, fence.Set(ctx, pool, "doc", 7, "v7"))
	require.ErrorIs(t, fence.Set(ctx, pool, "doc", 6, "v6"), fence.ErrStale)
	require.NoError(t, fence.Set(ctx, pool, "doc", 7, "v7b"))
	require.ErrorIs(t, fence.Set(ctx, pool, "doc", 0, "v0"), redlock.ErrInvalid)
	require.ErrorIs(t, fence.Set(ctx, nil, "doc", 8, "v8"), redlock.ErrInvalid)
	got, _ := m.Get("doc")
	assert.Equal(t, "v7b", got)

	// After SCRIPT FLUSH (or a restart) the script is sent again.
	m.FlushAll()
	conn, err := redis.Dial("tcp", m.Addr())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	require.NoError(t, fence.Set(ctx, pool, "doc", 9, "v9"))
	got, _ = m.Get("doc")
	assert.Equal(t, "v9", got)
}

// Set keeps its bounds: an ended ctx fails at once with its error, a node
// that never answers costs ctx's deadline, and without a deadline the
// documented five seconds.
func TestSetBounds(t *testing.T) {
	frozen := redistest.StartFrozen(t)
	pool := redigo.NewPool(frozen.Addr())
	defer pool.Close()

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, fence.Set(ended, pool, "doc", 1, "v"), context.Canceled)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := fence.Set(ctx, pool, "doc", 1, "v")
	require.Error(t, err)
	assert.Less(t, time.Since(began), time.Second, "a frozen node held Set past its ctx")

	if testing.Short() {
		t.Skip("the five-second default bound is checked without -short")
	}
	began = time.Now()
	require.Error(t, fence.Set(context.Background(), pool, "doc", 1, "v"))
	took := time.Since(began)
	assert.Greater(t, took, 4*time.Second, "returned before the default bound: %v", took)
	assert.Less(t, took, 8*time.Second, "a frozen node held Set past the default bound: %v", took)
}

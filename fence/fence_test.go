package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
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

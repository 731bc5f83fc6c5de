package redlock_test

// The semaphore, the RW lock and election on real redis-server nodes: the
// defects of issue 21, each shown by a test that fails without its fix.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
)

// scriptedTokens returns a token function that returns the given tokens in
// turn ("" for a fresh random one), and fresh ones once they run out.
func scriptedTokens(tokens ...string) func() (string, error) {
	var mu sync.Mutex
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		var tok string
		if len(tokens) > 0 {
			tok, tokens = tokens[0], tokens[1:]
		}
		if tok != "" {
			return tok, nil
		}
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b), nil
	}
}

// A token function that repeats itself must not get a second permit under
// the same token: ZADD would re-score the member, and one node slot would
// count for two holders. K=2 on 4 nodes (quorum 3): before the fix, the
// repeat was granted, the node slots then still had room for a third
// holder, and three permits were valid at once.
func TestRealSemaphoreRefusesRepeatedToken(t *testing.T) {
	addrs := realNodes(t, 4)
	c := realClient(t, addrs, redlock.WithTokenFunc(scriptedTokens("dup", "dup")))
	s := mustSemaphore(t, c, "repeat", 2)
	require.Equal(t, 3, s.Quorum())
	ctx := context.Background()

	first, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	again, err := s.TryAcquire(ctx, time.Minute)
	if err == nil {
		third, err := s.TryAcquire(ctx, time.Minute)
		t.Fatalf("a repeated token was granted a second permit; a third holder then got in too (%v, err %v): 3 valid permits with K=2", third != nil, err)
	}
	assert.Nil(t, again)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), "already a holder's")
	assert.Contains(t, err.Error(), "WithTokenFunc")

	// The first holder's member is intact on every node that admitted it:
	// the refused attempt's undo did not remove it.
	key := redlock.SemaphoreKey("repeat")
	for i, addr := range addrs {
		conn := realConn(t, addr)
		require.True(t, realEventually(2*time.Second, func() bool {
			members, err := redis.Strings(conn.Do("ZRANGE", key, 0, -1))
			return err == nil && len(members) == 1 && members[0] == "dup"
		}), "node %d must hold the first holder's member, and only it", i)
	}
	second, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err, "the second of K=2 permits is free")
	_, err = s.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a third permit of K=2")
	require.NoError(t, first.Release(ctx))
	require.NoError(t, second.Release(ctx))
}

// On 3 of 5 nodes at maxmemory with noeviction, every primitive's
// acquisition fails with OOM there, as the mutex's SET does, and writes
// nothing on them. Before the fix, the semaphore's and the RW lock's
// scripts began with a write that frees memory (ZREMRANGEBYSCORE), which
// disables Redis's OOM check for the rest of the script: TryAcquire,
// TryRLock and a writer's TryLock all succeeded. An extension of a held
// reader still goes through, as a mutex's does.
func TestRealPrimitivesRefuseOnOOM(t *testing.T) {
	addrs := realNodes(t, 5)
	c := realClient(t, addrs)
	ctx := context.Background()
	reader, err := c.RWMutex("oom-held").TryRLock(ctx, time.Minute)
	require.NoError(t, err)

	full := addrs[:3]
	for _, addr := range full {
		conn := realConn(t, addr)
		_, err := conn.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
		require.NoError(t, err)
		_, err = conn.Do("CONFIG", "SET", "maxmemory", "1")
		require.NoError(t, err)
	}
	sizes := func() []int64 {
		var out []int64
		for _, addr := range full {
			n, err := redis.Int64(realConn(t, addr).Do("DBSIZE"))
			require.NoError(t, err)
			out = append(out, n)
		}
		return out
	}
	before := sizes()

	refused := func(what string, err error) {
		t.Helper()
		require.Error(t, err, "%s on 3 of 5 full nodes", what)
		assert.ErrorIs(t, err, redlock.ErrNotObtained, what)
		causes := realNodeErrors(err)
		for i := range full {
			if assert.Contains(t, causes, i, "%s: node %d's cause", what, i) {
				assert.Contains(t, causes[i].Error(), "OOM", "%s: node %d", what, i)
			}
		}
	}
	p, err := mustSemaphore(t, c, "oom-sem", 1).TryAcquire(ctx, time.Minute)
	refused("TryAcquire", err)
	assert.Nil(t, p)
	rw := c.RWMutex("oom-rw")
	l, err := rw.TryRLock(ctx, time.Minute)
	refused("TryRLock", err)
	assert.Nil(t, l)
	l, err = rw.TryLock(ctx, time.Minute)
	refused("writer's TryLock", err)
	assert.Nil(t, l)
	l, err = rw.Lock(ctx, time.Minute) // a waiting writer's intent mark is a write too
	refused("writer's Lock", err)
	assert.Nil(t, l)
	l, err = c.TryLock(ctx, "oom-mutex", time.Minute)
	refused("the mutex's TryLock", err)
	assert.Nil(t, l)
	assert.Equal(t, before, sizes(), "the full nodes were written to")

	require.NoError(t, reader.Extend(ctx, time.Minute), "a held reader is extended on full nodes, as a mutex is")
	require.NoError(t, reader.Unlock(ctx))
}

// A semaphore's keys are its own: a mutex on the same name is another lock,
// on other keys. Before the fix the semaphore's sorted set was the bare key,
// so a semaphore failed with WRONGTYPE on a name a mutex held, and a mutex
// on a name a semaphore held was refused (and retried) as if locked.
func TestRealSemaphoreKeysApartFromMutex(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs, redlock.WithKeyPrefix("app:"))
	ctx := context.Background()

	l, err := c.TryLock(ctx, "mix", time.Minute)
	require.NoError(t, err)
	p, err := mustSemaphore(t, c, "mix", 1).TryAcquire(ctx, time.Minute)
	require.NoError(t, err, "a semaphore on a mutex's name")
	require.NoError(t, l.Unlock(ctx))

	l, err = c.TryLock(ctx, "mix", time.Minute)
	require.NoError(t, err, "a mutex on a held semaphore's name")
	require.NoError(t, l.Unlock(ctx))

	// The set is where SemaphoreKey says, with the prefix inside it.
	key := redlock.SemaphoreKey("app:mix")
	assert.Equal(t, "redlock:sem:{app:mix}", key)
	for i, addr := range addrs {
		conn := realConn(t, addr)
		require.True(t, realEventually(2*time.Second, func() bool {
			_, err := redis.Float64(conn.Do("ZSCORE", key, p.Value()))
			return err == nil
		}), "node %d holds the permit's token in %s", i, key)
	}
	require.NoError(t, p.Release(ctx))
}

// Writers of an RWMutex on a Client WithFencing get fencing tokens from the
// writer key's quorum counters, growing in the order writers are granted,
// as the mutex's do. Before the fix, Token() was 0. Readers get none.
func TestRealRWMutexWriterFencing(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs, redlock.WithFencing())
	ctx := context.Background()
	rw := c.RWMutex("fenced")
	var last uint64
	for i := range 3 {
		w, err := rw.TryLock(ctx, time.Minute)
		require.NoError(t, err)
		require.Greater(t, w.Token(), last, "writer %d's fencing token", i)
		last = w.Token()
		require.NoError(t, w.Unlock(ctx))
		r, err := rw.TryRLock(ctx, time.Minute)
		require.NoError(t, err)
		assert.Zero(t, r.Token(), "a reader has no fencing token")
		require.NoError(t, r.Unlock(ctx))
	}
	// The counter is stored on every node under the writer key's FenceKey.
	writer, _, _ := redlock.RWNames("fenced")
	for i, addr := range addrs {
		conn := realConn(t, addr)
		require.True(t, realEventually(2*time.Second, func() bool {
			v, err := redis.Uint64(conn.Do("GET", c.FenceKey(writer)))
			return err == nil && v == last
		}), "node %d's counter is not the last token %d", i, last)
	}
	// A Client without fencing still gets 0.
	w, err := realClient(t, addrs).RWMutex("fenced").TryLock(ctx, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, w.Token())
	require.NoError(t, w.Unlock(ctx))
}

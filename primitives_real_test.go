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
	s := c.Semaphore("repeat", 2)
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
	key := "repeat"
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

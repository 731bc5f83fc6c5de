package redlock_test

// Members with replicas (issue 20): a primary's vote is only as durable as
// its replicas' copy of the key. Each test runs a primary whose replica
// replicates through a redistest.Relay, holds the replication stream back
// at the moment that matters, then fails over at once: the primary is
// killed, whatever the link held is dropped, and the replica is promoted
// (REPLICAOF NO ONE), as Sentinel or a Cluster would promote it.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// failOver kills m's primary, drops what its link held back, and promotes
// the replica.
func failOver(t *testing.T, m *redistest.Replicated) {
	t.Helper()
	m.Primary.Stop()
	m.Link.Close()
	require.NoError(t, m.Replica.Promote())
}

// replicaClient is a client of one member, m's primary, whose WAIT has a
// generous node timeout to run in: a replica on a loaded machine may take
// hundreds of milliseconds to acknowledge.
func replicaClient(t *testing.T, m *redistest.Replicated, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return realClient(t, []string{m.Primary.Addr}, append([]redlock.Option{
		redlock.WithNodeTimeout(2 * time.Second), redlock.WithTries(1)}, opts...)...)
}

// Without WithReplicaAcks a vote can vanish in a failover: the primary said
// yes, the replica never got the key, and the promoted replica grants the
// lock to the next caller. This shows the hazard the option exists for,
// and that the test's failover is deterministic.
func TestRealFailoverLosesUnacknowledgedVote(t *testing.T) {
	m := redistest.StartReplicated(t)
	c := replicaClient(t, m)
	ctx := context.Background()
	m.Link.Hold()
	l, err := c.Lock(ctx, "real:failover", time.Minute)
	require.NoError(t, err, "without replica acks the primary's yes is enough")
	failOver(t, m)
	assert.Equal(t, "", realGet(t, realConn(t, m.Replica.Addr), "real:failover"),
		"the promoted replica has the key: the relay did not hold replication back")

	// The lock is still valid on the holder's clock, and yet a second
	// client gets it from the promoted replica.
	other := realClient(t, []string{m.Replica.Addr}, redlock.WithTries(1))
	l2, err := other.Lock(ctx, "real:failover", time.Minute)
	require.NoError(t, err)
	assert.True(t, l.Until().After(time.Now()) && l2.Until().After(time.Now()), "two holders at once")
}

// With WithReplicaAcks(1) the vote counts only once the replica has the
// key: while replication is held back the lock is not granted (and the
// primary is released); once it flows, the lock is granted, and a failover
// right after the grant keeps the key on the promoted replica. Extend and
// the fencing counter likewise.
func TestRealReplicaAcksSurviveFailover(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		name := "plain"
		opts := []redlock.Option{redlock.WithReplicaAcks(1)}
		if fencing {
			name = "fencing"
			opts = append(opts, redlock.WithFencing())
		}
		t.Run(name, func(t *testing.T) {
			m := redistest.StartReplicated(t)
			c := replicaClient(t, m, opts...)
			ctx := context.Background()
			const key = "real:acked"
			primary := realConn(t, m.Primary.Addr)

			m.Link.Hold()
			began := time.Now()
			_, err := c.Lock(ctx, key, time.Minute)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "granted although the replica does not have the key")
			require.ErrorIs(t, err, redlock.ErrReplicaAcks)
			// One attempt: the WAIT within one node timeout, then the release.
			assert.Less(t, time.Since(began), 6*time.Second)
			assert.Equal(t, "", realGet(t, primary, key), "the failed attempt left its key on the primary")

			m.Link.Release()
			m.Sync(t)
			l, err := c.Lock(ctx, key, time.Minute)
			require.NoError(t, err)
			if fencing {
				require.NotZero(t, l.Token())
			}
			// Extend while replication is held back fails: the replica
			// would not have the new ttl. (A longer ttl: the script's
			// PEXPIRE GT writes nothing, and so needs no ack, if the
			// expiry it asks for is not later.)
			m.Link.Hold()
			require.ErrorIs(t, l.Extend(ctx, 2*time.Minute), redlock.ErrReplicaAcks)

			failOver(t, m)
			replica := realConn(t, m.Replica.Addr)
			assert.Equal(t, l.Value(), realGet(t, replica, key), "the promoted replica lost the granted key")
			if fencing {
				counter, err := redis.Uint64(replica.Do("GET", c.FenceKey(key)))
				require.NoError(t, err)
				assert.Equal(t, l.Token(), counter, "the promoted replica's fencing counter is behind the token")
			}
			// The promoted member refuses a second holder.
			other := realClient(t, []string{m.Replica.Addr}, redlock.WithTries(1))
			_, err = other.Lock(ctx, key, time.Minute)
			assert.ErrorIs(t, err, redlock.ErrNotObtained)
		})
	}
}

// A member whose replicas are fewer than WithReplicaAcks asks for never
// votes: the lock is refused with ErrReplicaAcks within the node timeout,
// rather than hanging in WAIT.
func TestRealReplicaAcksMoreThanReplicas(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs, redlock.WithReplicaAcks(1), redlock.WithTries(1),
		redlock.WithNodeTimeout(500*time.Millisecond))
	began := time.Now()
	_, err := c.Lock(context.Background(), "real:noreplicas", time.Minute)
	require.ErrorIs(t, err, redlock.ErrReplicaAcks)
	assert.Less(t, time.Since(began), 2*time.Second)
	causes := realNodeErrors(err)
	assert.Len(t, causes, 3)
	for i, cause := range causes {
		assert.True(t, errors.Is(cause, redlock.ErrReplicaAcks), "node %d: %v", i, cause)
	}
	for _, addr := range addrs {
		assert.Equal(t, "", realGet(t, realConn(t, addr), "real:noreplicas"), "%s kept the key", addr)
	}
}

// A negative count is refused by New, before any network call.
func TestReplicaAcksNegativeInvalid(t *testing.T) {
	_, err := redlock.New(realPools(t, []string{"127.0.0.1:1"}), redlock.WithReplicaAcks(-1))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = redlock.New(realPools(t, []string{"127.0.0.1:1"}), redlock.WithReplicaAcks(0))
	require.NoError(t, err)
}

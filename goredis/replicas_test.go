package goredis_test

// Members with replicas, through go-redis: a Sentinel-managed primary
// reached by a failover client, and a Redis Cluster whose primaries have
// replicas, each failing over while a lock is held (issue 20).

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
)

// startFastSentinel starts a Sentinel (quorum 1) that monitors m's primary
// as "mymaster", declares it down after 300 ms, and fails over to m's
// replica. It returns the Sentinel's address once the Sentinel knows the
// replica. The Sentinel stops when t ends.
func startFastSentinel(t *testing.T, m *redistest.Replicated) string {
	t.Helper()
	s := redistest.StartSentinel(t, fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1", m.Primary.Port),
		"sentinel down-after-milliseconds mymaster 300", "sentinel failover-timeout mymaster 3000")
	addr := s.Addr
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sentinel.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		replicas, err := sentinel.Replicas(context.Background(), "mymaster").Result()
		if err == nil && len(replicas) == 1 && replicas[0]["port"] == strconv.Itoa(m.Replica.Port) {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not know the replica: %v %v\n%s", addr, replicas, err, s.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitPromoted waits until the Sentinel at addr names the replica as the
// master.
func waitPromoted(t *testing.T, addr string, replica *redistest.Server) {
	t.Helper()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sentinel.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := sentinel.GetMasterAddrByName(context.Background(), "mymaster").Result()
		if err == nil && net.JoinHostPort(got[0], got[1]) == replica.Addr {
			if role, _ := replica.Info("role"); role == "master" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s: %v %v", replica.Addr, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func failoverPool(t *testing.T, sentinel string) redlock.Pool {
	t.Helper()
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{sentinel},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { client.Close() })
	return goredis.NewNamedPool(client, "mymaster")
}

// A Sentinel failover while a lock is held: the member is one go-redis
// failover client. The primary is killed with replication held back (the
// key written on the primary, not yet on the replica), and Sentinel
// promotes the replica. Without WithReplicaAcks the lock was granted and
// the promoted master does not have it: a second client gets the same
// lock while the first still holds it. With WithReplicaAcks(1) the lock is
// not granted until the replica has it, and it survives the failover.
func TestSentinelFailoverDuringHeldLock(t *testing.T) {
	requireRedis(t)
	for _, acks := range []int{0, 1} {
		t.Run(fmt.Sprintf("WithReplicaAcks(%d)", acks), func(t *testing.T) {
			m := redistest.StartReplicated(t)
			sentinel := startFastSentinel(t, m)
			opts := []redlock.Option{redlock.WithNodeTimeout(2 * time.Second), redlock.WithTries(1),
				redlock.WithReplicaAcks(acks), redlock.WithFencing()}
			c, err := redlock.New([]redlock.Pool{failoverPool(t, sentinel)}, opts...)
			require.NoError(t, err)
			ctx := context.Background()
			const key = "sentinel:held"

			m.Link.Hold()
			l, err := c.Lock(ctx, key, time.Minute)
			if acks > 0 {
				require.ErrorIs(t, err, redlock.ErrReplicaAcks, "granted while the replica lacks the key")
				m.Link.Release()
				m.Sync(t)
				l, err = c.Lock(ctx, key, time.Minute)
				require.NoError(t, err)
				m.Link.Hold()
			} else {
				require.NoError(t, err)
			}

			m.Primary.Stop()
			m.Link.Close()
			waitPromoted(t, sentinel, m.Replica)

			// Through the same failover client, now on the promoted master.
			direct := redis.NewClient(&redis.Options{Addr: m.Replica.Addr})
			defer direct.Close()
			got, _ := direct.Get(ctx, key).Result()
			counter, _ := direct.Get(ctx, c.FenceKey(key)).Uint64()
			other, err := redlock.New([]redlock.Pool{failoverPool(t, sentinel)}, redlock.WithTries(1),
				redlock.WithNodeTimeout(time.Second), redlock.WithFencing())
			require.NoError(t, err)
			l2, err2 := other.Lock(ctx, key, time.Minute)
			if acks == 0 {
				// The hazard: the vote vanished, and the fencing counter
				// went back with it, so the token repeats.
				assert.Equal(t, "", got, "the relay did not hold the key back")
				require.NoError(t, err2, "the promoted master refused a second holder")
				assert.Equal(t, l.Token(), l2.Token(), "a failover that loses the counter repeats the token")
				return
			}
			assert.Equal(t, l.Value(), got, "the promoted master lost the granted key")
			assert.Equal(t, l.Token(), counter, "the promoted master's fencing counter is behind the token")
			assert.ErrorIs(t, err2, redlock.ErrNotObtained, "a second holder got the lock after the failover")
			// The promoted master has no replica left: with acks it cannot
			// vote (Extend fails) until a replica joins it.
			assert.ErrorIs(t, l.Extend(ctx, 2*time.Minute), redlock.ErrReplicaAcks)
		})
	}
}

// A Redis Cluster member whose primaries have replicas: with
// WithReplicaAcks(1) the lock is not granted while the key's replica is
// frozen (SIGSTOP), and is granted once it runs; its primary killed right
// after the grant, the cluster promotes the replica, and the lock stays on
// that member: the key is there with the token and a second holder is
// refused. The WAIT goes to the key's primary (goredis routes it there).
func TestClusterReplicaAcksKeepLockAfterFailover(t *testing.T) {
	requireRedis(t)
	if ok, why := redistest.ClusterAvailable(); !ok {
		t.Skip(why)
	}
	rc := redistest.StartRedisClusterReplicas(t, 3)
	var seeds []string
	for _, s := range rc.Primaries {
		seeds = append(seeds, s.Addr)
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, ContextTimeoutEnabled: true, MaxRedirects: 3})
	t.Cleanup(func() { client.Close() })
	c, err := redlock.New([]redlock.Pool{goredis.NewPool(client)}, redlock.WithReplicaAcks(1),
		redlock.WithNodeTimeout(2*time.Second), redlock.WithTries(1), redlock.WithFencing())
	require.NoError(t, err)
	ctx := context.Background()
	const key = "cluster:acked"
	owner := rc.Owner(t, key)
	replica := replicaOf(t, rc, owner)

	// One key per primary, each refused while its own replica is frozen:
	// a WAIT sent to another primary (a keyless command, which a
	// ClusterClient routes anywhere) would count that primary's replica.
	probes := map[*redistest.Server]string{}
	for i := 0; len(probes) < len(rc.Primaries) && i < 1000; i++ {
		k := fmt.Sprintf("cluster:probe:%d", i)
		if p := rc.Owner(t, k); probes[p] == "" {
			probes[p] = k
		}
	}
	for p, k := range probes {
		r := replicaOf(t, rc, p)
		require.NoError(t, r.Freeze())
		_, err = c.Lock(ctx, k, time.Minute)
		require.NoError(t, r.Thaw())
		require.ErrorIs(t, err, redlock.ErrReplicaAcks, "%s granted while its replica %s was frozen", k, r.Addr)
		require.NoError(t, redistest.SyncReplicas(p.Addr, 1, 10*time.Second))
	}
	require.NoError(t, replica.Freeze())
	_, err = c.Lock(ctx, key, time.Minute)
	require.NoError(t, replica.Thaw())
	require.ErrorIs(t, err, redlock.ErrReplicaAcks, "granted while the key's replica was frozen")
	require.NoError(t, redistest.SyncReplicas(owner.Addr, 1, 10*time.Second))

	l, err := c.Lock(ctx, key, time.Minute)
	require.NoError(t, err)
	owner.Stop() // right after the grant
	deadline := time.Now().Add(30 * time.Second)
	for role, _ := replica.Info("role"); role != "master"; role, _ = replica.Info("role") {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not promote %s", replica.Addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	direct := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer direct.Close()
	got, err := direct.Get(ctx, key).Result()
	require.NoError(t, err, "the promoted replica lost the key")
	assert.Equal(t, l.Value(), got)
	counter, _ := direct.Get(ctx, c.FenceKey(key)).Uint64()
	assert.Equal(t, l.Token(), counter)

	other, err := redlock.New([]redlock.Pool{goredis.NewPool(client)}, redlock.WithTries(3),
		redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	_, err = other.TryLock(ctx, key, time.Minute)
	assert.ErrorIs(t, err, redlock.ErrNotObtained, "a second holder got the lock after the failover")
}

// replicaOf returns the replica of primary in rc.
func replicaOf(t *testing.T, rc *redistest.RedisCluster, primary *redistest.Server) *redistest.Server {
	t.Helper()
	for _, r := range rc.Replicas {
		port, _ := r.Info("master_port")
		if port == strconv.Itoa(primary.Port) {
			return r
		}
	}
	t.Fatalf("no replica of %s", primary.Addr)
	return nil
}

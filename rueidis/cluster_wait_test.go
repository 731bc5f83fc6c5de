package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// nodeDo sends one command to the server at addr on a connection of its
// own.
func nodeDo(t *testing.T, addr string, args ...any) any {
	t.Helper()
	c, err := redis.Dial("tcp", addr, redis.DialReadTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(args[0].(string), args[1:]...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

// clusterPair returns a Pool on a new Redis Cluster of three primaries
// (with a replica each if replicas), the primary that owns key, another
// primary, and the slot of key, once the client's slot map is warm.
func clusterPair(t *testing.T, replicas bool, key string) (rc *redistest.RedisCluster, p *redlockrueidis.Pool, src, dst *redistest.Server, slot int64) {
	t.Helper()
	requireRedis(t, true)
	if replicas {
		rc = redistest.StartRedisClusterReplicas(t, 3)
	} else {
		rc = redistest.StartRedisCluster(t, 3)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: rc.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	p = redlockrueidis.NewPool(client)
	exec(t, p, driver.Command{Name: "GET", Args: []any{key}, NumKeys: 1}) // the slot map, and a connection
	src = rc.Owner(t, key)
	for _, s := range rc.Primaries {
		if s != src {
			dst = s
			break
		}
	}
	slot, err = redis.Int64(nodeDo(t, src.Addr, "CLUSTER", "KEYSLOT", key), nil)
	if err != nil {
		t.Fatal(err)
	}
	return rc, p, src, dst, slot
}

// With redlock.WithReplicaAcks, a write and its WAIT go on one connection
// to the write's primary. Here the key's slot has moved to another primary
// whose only replica is frozen, and the client's slot map is stale: the
// write meets MOVED. Following it for the write alone, as the client's
// DoMulti does, sent the write to the new primary while WAIT, which has no
// key, answered on the old one's connection with its replica's count: a
// vote counted for a write that no replica held.
func TestClusterWaitAfterMoved(t *testing.T) {
	const key = "acks:moved"
	rc, p, src, dst, slot := clusterPair(t, true, key)
	dstID, err := redis.String(nodeDo(t, dst.Addr, "CLUSTER", "MYID"), nil)
	if err != nil {
		t.Fatal(err)
	}
	nodeDo(t, dst.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	nodeDo(t, dst.Addr, "CLUSTER", "BUMPEPOCH")
	nodeDo(t, src.Addr, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	var replica *redistest.Server
	for _, r := range rc.Replicas {
		if port, _ := r.Info("master_port"); port == fmt.Sprint(dst.Port) {
			replica = r
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", dst.Addr)
	}
	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Thaw() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	replies := make([]driver.Reply, 2)
	err = p.Exec(ctx, []driver.Command{
		{Name: "SET", Args: []any{key, "token", "NX", "PX", int64(60000)}, NumKeys: 1},
		{Name: "WAIT", Args: []any{int64(1), int64(300)}},
	}, replies)
	t.Logf("Exec: %v; replies %+v", err, replies)
	if err == nil && replies[0].Err == nil && replies[1].Value == int64(1) {
		t.Errorf("the write was acknowledged by 1 replica, but the only replica of its primary %s is frozen", dst.Addr)
	}

	c, err := redlock.New([]redlock.Pool{p}, redlock.WithReplicaAcks(1), redlock.WithNodeTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := c.TryLock(context.Background(), "{"+key+"}:lock", time.Minute); err == nil {
		t.Errorf("TryLock with WithReplicaAcks(1) held while the key's only replica is frozen")
		_ = l.Unlock(context.Background())
	} else if !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("TryLock: %v, want ErrNotObtained", err)
	}
}

// A write and its WAIT to a slot being migrated: the write's ASK is its
// error reply, a vote not won. (rueidis v1.0.79 panicked on the batch in
// the client's DoMulti, index out of range, crashing the process.)
func TestClusterWaitDuringMigration(t *testing.T) {
	const key = "acks:migrating"
	_, p, src, dst, slot := clusterPair(t, false, key)
	srcID, err := redis.String(nodeDo(t, src.Addr, "CLUSTER", "MYID"), nil)
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := redis.String(nodeDo(t, dst.Addr, "CLUSTER", "MYID"), nil)
	if err != nil {
		t.Fatal(err)
	}
	nodeDo(t, dst.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	nodeDo(t, src.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	replies := make([]driver.Reply, 2)
	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("Exec panicked: %v", v)
			}
		}()
		err = p.Exec(ctx, []driver.Command{
			{Name: "SET", Args: []any{"{" + key + "}:lock", "token", "NX", "PX", int64(60000)}, NumKeys: 1},
			{Name: "WAIT", Args: []any{int64(0), int64(100)}},
		}, replies)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if replies[0].Err == nil {
		t.Errorf("the write to a migrating slot answered %v, want its ASK as an error reply", replies[0].Value)
	}
	t.Logf("replies %+v", replies)
}

package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
	"github.com/quorumlock/redlock/goredis"
)

// Lock over three masters through go-redis clients, with the options that
// keep a member that is down cheap (see "A node that is down" in the
// package doc). The masters here are in-process (miniredis); in production
// each client points at its own independent Redis master.
func Example() {
	// At the start of main, before any client exists (go-redis's logger is
	// a global read without a lock), drop the line go-redis logs for every
	// failed dial to a member that is down; redlock's Observer reports node
	// failures instead:
	//
	//	redis.SetLogger(goredis.QuietLogger(log.Printf))

	var pools []redlock.Pool
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		client := redis.NewClient(&redis.Options{
			Addr: m.Addr(),
			// Let the node timeout bound each socket read and write.
			ContextTimeoutEnabled: true,
			// One dial per attempt: go-redis's 5 dials, 100 ms apart,
			// outlast the default node timeout (50 ms) anyway.
			DialerRetries: 1,
			// Bound what ctx does not: a TLS dial, a wait for a connection.
			DialTimeout: 250 * time.Millisecond,
			PoolTimeout: 250 * time.Millisecond,
		})
		defer client.Close()
		pools = append(pools, goredis.NewPool(client))
	}

	// With a majority down, Lock gives up after 5 tries: at most
	// 5 × (node timeout + 250 ms retry delay). Nodes in this process, on a
	// busy test machine, may need more than the default node timeout
	// (50 ms): 1 s here.
	locker, err := redlock.New(pools, redlock.WithTries(5), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lock, err := locker.Lock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lock.Key())
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// holding invoice:42
	// released
}

// A Sentinel-managed master is one member of the quorum. The failover
// client's options name no server, so the Pool gets a name for errors.
func ExampleNewNamedPool() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "lock-a",
		SentinelAddrs:         []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	pool := goredis.NewNamedPool(client, "lock-a")
	fmt.Println(pool.Name())
	// Output: lock-a
}

// A whole Redis Cluster is one member of the quorum; go-redis routes each
// command to its key's slot.
func ExampleNewPool_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	pool := goredis.NewPool(client)
	fmt.Println(pool.Name())
	// Output: 10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000
}

// Fencing with go-redis on both sides: the lock's token guards writes to
// data kept in another Redis, which refuses a writer whose lock has passed
// to a newer holder (package fence).
func Example_fencing() {
	var pools []redlock.Pool
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		defer client.Close()
		pools = append(pools, goredis.NewPool(client))
	}
	store, err := miniredis.Run() // where the protected data lives
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	data := redis.NewClient(&redis.Options{Addr: store.Addr()})
	defer data.Close()
	resource := goredis.NewPool(data)

	// A node timeout of 1 s, for nodes in this process on a busy machine.
	locker, err := redlock.New(pools, redlock.WithFencing(), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	first, err := locker.Lock(ctx, "doc:7", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Say the first holder stalls past its validity, and a second takes
	// over (here the first lets go, to keep the example short).
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := locker.Lock(ctx, "doc:7", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second write:", fence.Set(ctx, resource, "doc:7", second.Token(), "v2"))
	err = fence.Set(ctx, resource, "doc:7", first.Token(), "v1")
	fmt.Println("stale write refused:", errors.Is(err, fence.ErrStale))
	v, _ := data.Get(ctx, "doc:7").Result()
	fmt.Println("stored:", v)
	// Output:
	// second write: <nil>
	// stale write refused: true
	// stored: v2
}

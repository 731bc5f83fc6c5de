package rueidis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// Lock over three masters, each reached through a rueidis client. Here the
// masters are in-process stand-ins (miniredis); in production each is an
// independent Redis master, and its client is the one the program already
// uses for everything else.
func Example() {
	var pools []redlock.Pool
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		client, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{m.Addr()},
			ForceSingleClient: true, // one master: no cluster discovery
			DisableCache:      true, // redlock reads no cached value
		})
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		pools = append(pools, redlockrueidis.NewPool(client))
	}

	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50 ms).
	locker, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lock, err := locker.Lock(ctx, "report:2024-06", 10*time.Second)
	if err != nil {
		log.Fatal(err) // redlock.ErrNotObtained: held elsewhere, or no majority
	}
	fmt.Println("holding", lock.Key())
	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// holding report:2024-06
	// released
}

// Each quorum member may be a whole Redis Cluster, or a Sentinel-managed
// master with its replicas: one member, one Pool, whatever its size.
func ExampleNewPool_clusterAndSentinel() {
	cluster, err := rueidis.NewClient(rueidis.ClientOption{
		// Seeds: rueidis finds the rest of the cluster, and routes each
		// command by the slot of its key.
		InitAddress: []string{"cluster-a-1:6379", "cluster-a-2:6379", "cluster-a-3:6379"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	failover, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{"sentinel-1:26379", "sentinel-2:26379", "sentinel-3:26379"},
		Sentinel:    rueidis.SentinelOption{MasterSet: "locks-b"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer failover.Close()
	b := redlockrueidis.NewPool(failover)
	b.Addr = "sentinel:locks-b" // the current primary's address would go stale

	standalone, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{"redis-c:6379"},
		ForceSingleClient: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer standalone.Close()

	locker, err := redlock.New([]redlock.Pool{
		redlockrueidis.NewPool(cluster), b, redlockrueidis.NewPool(standalone),
	}, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
}

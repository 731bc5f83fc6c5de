package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redigo"
)

// exampleNodes starts n in-process Redis nodes and returns pools for them and
// a function that stops them. In production each pool points at its own
// independent Redis master.
func exampleNodes(n int) ([]redlock.Pool, func()) {
	var (
		pools []redlock.Pool
		stops []func()
	)
	for range n {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		p := redigo.NewPool(m.Addr())
		pools = append(pools, p)
		stops = append(stops, func() { p.Close(); m.Close() })
	}
	return pools, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// Acquire a lock on a majority of five nodes, do the work while it is
// valid, and release it.
func Example() {
	pools, stop := exampleNodes(5)
	defer stop()

	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	lock, err := client.Lock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		log.Fatal(err) // ErrNotObtained: held elsewhere, or no majority
	}
	fmt.Println("holding", lock.Key())

	// The lock is exclusive until lock.Until(); extend it before then if the
	// work may take longer.
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		log.Fatal(err) // stop working: exclusion can no longer be proven
	}

	if err := lock.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// holding invoice:42
	// released
}

// While one client holds a key, another's single attempt is refused.
func ExampleClient_TryLock() {
	pools, stop := exampleNodes(3)
	defer stop()
	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	held, err := client.TryLock(ctx, "report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	_, err = client.TryLock(ctx, "report", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained))

	if err := held.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	again, err := client.TryLock(ctx, "report", time.Minute)
	fmt.Println(err == nil)
	_ = again.Unlock(ctx)
	// Output:
	// true
	// true
}

// Bad arguments are rejected before any network call.
func ExampleNew() {
	_, err := redlock.New(nil)
	fmt.Println(err)
	fmt.Println(errors.Is(err, redlock.ErrInvalid))
	// Output:
	// redlock: invalid argument: no pools
	// true
}

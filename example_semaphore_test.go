package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/redlock"
)

// At most two workers at once: two permits of a semaphore on five nodes.
// Each permit needs ⌊2·5/3⌋+1 = 4 nodes, not a majority, so one node may
// fail.
func ExampleClient_Semaphore() {
	pools, stop := exampleNodes(5)
	defer stop()
	// A quorum of 4 of 5 waits for the fourth-fastest node, not the third:
	// give slow nodes room (the default node timeout is 50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	sem, err := client.Semaphore("licences", 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("quorum", sem.Quorum(), "of 5; tolerates", sem.FaultTolerance(), "failed node")

	first, err := sem.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	second, err := sem.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = sem.TryAcquire(ctx, 10*time.Second)
	fmt.Println("third:", errors.Is(err, redlock.ErrNotObtained))

	// Each permit counts until its Until(); extend it before then if the
	// work may take longer.
	if err := first.Extend(ctx, 10*time.Second); err != nil {
		log.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	third, err := sem.TryAcquire(ctx, 10*time.Second)
	fmt.Println("after a release:", err == nil)
	_ = second.Unlock(ctx)
	_ = third.Unlock(ctx)

	// A configuration that tolerates no failed node is refused when the
	// semaphore is made, unless asked for with AllowNoFaultTolerance.
	_, err = client.Semaphore("licences", 4)
	fmt.Println("4 permits on 5 nodes:", errors.Is(err, redlock.ErrInvalid))
	// Output:
	// quorum 4 of 5; tolerates 1 failed node
	// third: true
	// after a release: true
	// 4 permits on 5 nodes: true
}

// Semaphore.Do holds a permit, extending it, while fn runs, and cancels
// fn's context if the permit is lost.
func ExampleSemaphore_Do() {
	pools, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sem, err := client.Semaphore("crawler", 1)
	if err != nil {
		log.Fatal(err)
	}
	err = sem.Do(context.Background(), 10*time.Second, func(ctx context.Context) error {
		fmt.Println("crawling with one of 1 permits")
		return ctx.Err() // nil while the permit holds
	})
	fmt.Println("done:", err)
	// Output:
	// crawling with one of 1 permits
	// done: <nil>
}

// A permit may count for more than one of the K: here K=3, and a Semaphore
// of weight 2 on the same key shares the three permits with one of weight 1.
func ExampleWithWeight() {
	pools, stop := exampleNodes(5)
	defer stop()
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	big, err := client.Semaphore("gpus", 3, redlock.WithWeight(2))
	if err != nil {
		log.Fatal(err)
	}
	small, err := client.Semaphore("gpus", 3)
	if err != nil {
		log.Fatal(err)
	}

	two, err := big.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	one, err := small.TryAcquire(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", big.Weight()+small.Weight(), "of", big.Permits())
	_, err = small.TryAcquire(ctx, 10*time.Second)
	fmt.Println("one more:", errors.Is(err, redlock.ErrNotObtained))
	_ = two.Unlock(ctx)
	_ = one.Unlock(ctx)

	// A weight above K is refused when the semaphore is made.
	_, err = client.Semaphore("gpus", 3, redlock.WithWeight(4))
	fmt.Println("weight 4 of 3:", errors.Is(err, redlock.ErrInvalid))
	// Output:
	// held: 3 of 3
	// one more: true
	// weight 4 of 3: true
}

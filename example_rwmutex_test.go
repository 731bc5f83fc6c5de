package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/redlock"
)

// Readers share a read-write lock; a writer waits until they have gone, and
// then excludes everyone.
func ExampleRWMutex() {
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
	rw := client.RWMutex("catalog")

	r1, err := rw.RLock(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := rw.RLock(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers hold", rw.Key())

	_, err = rw.TryLock(ctx, 10*time.Second)
	fmt.Println("writer beside readers:", errors.Is(err, redlock.ErrNotObtained))

	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := rw.TryLock(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("writer holds it alone")

	_, err = rw.TryRLock(ctx, 10*time.Second)
	fmt.Println("reader beside the writer:", errors.Is(err, redlock.ErrNotObtained))
	if err := w.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// two readers hold catalog
	// writer beside readers: true
	// writer holds it alone
	// reader beside the writer: true
}

// RDo holds the lock for reading while fn runs, extending it, and cancels
// fn's context if the lock is lost; Do does the same for writing.
func ExampleRWMutex_RDo() {
	pools, stop := exampleNodes(3)
	defer stop()
	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	rw := client.RWMutex("catalog")
	err = rw.RDo(context.Background(), 10*time.Second, func(ctx context.Context) error {
		fmt.Println("reading while held:", redlock.HeldLock(ctx) != nil)
		return nil
	})
	fmt.Println(err)
	// Output:
	// reading while held: true
	// <nil>
}

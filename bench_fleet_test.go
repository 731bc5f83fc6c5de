package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
	"github.com/quorumlock/redlock/redigo"
)

// BenchmarkBesideWaiters: the sweep's uncontended case at 64 callers, while
// other Clients each wait for a key that a holder keeps: what a process's
// release notices cost the rest of a fleet. Each waiter's subscription
// hears the releases of its key (wake.go, "Channels per key"), not the 64
// callers' releases, which go out on channels no one hears.
func BenchmarkBesideWaiters(b *testing.B) {
	pools := benchNodes(b, 5)
	mine := benchRedlock(benchClient(b, pools))
	run := 0 // b.Run calls each case's function again for each b.N it tries
	for _, waiters := range []int{0, 1, 8} {
		b.Run(fmt.Sprintf("N=5/callers=64/waiters=%d", waiters), func(b *testing.B) {
			// Set up and torn down within each call of the function: the
			// holder and waiters of a call end before the next begins,
			// and each call's keys are its own.
			run++
			ctx, cancel := context.WithCancel(context.Background())
			holder := benchClient(b, pools)
			var (
				started sync.WaitGroup
				left    atomic.Int32 // waiters whose Lock returned
				held    []*redlock.Lock
			)
			defer func() {
				b.StopTimer()
				cancel()
				started.Wait()
				for _, l := range held {
					if err := l.Unlock(context.Background()); err != nil {
						b.Errorf("Unlock %s: %v", l.Key(), err)
					}
				}
				_ = holder.Close()
				waitPubsubClients(b, pools, 0) // the waiters' subscriptions are closed
			}()
			for i := range waiters {
				key := fmt.Sprintf("beside:%d:held:%d", run, i)
				l, err := holder.Lock(ctx, key, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, l)
				w := benchClient(b, pools, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
				started.Add(1)
				go func() {
					defer started.Done()
					defer w.Close()
					l, err := w.Lock(ctx, key, time.Minute)
					left.Add(1)
					if err == nil {
						_ = l.Unlock(context.Background())
					}
				}()
			}
			waitPubsubClients(b, pools, waiters) // every waiter's subscription is open on every node
			benchkit.Callers(b, mine, 64)
			if n := left.Load(); n != 0 {
				b.Fatalf("%d of %d waiters stopped waiting during the run", n, waiters)
			}
		})
	}
}

// waitPubsubClients waits until each node has want connections in pub/sub
// mode.
func waitPubsubClients(b *testing.B, pools []*redigo.Pool, want int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pools {
		for pubsubClients(b, p) != want {
			if time.Now().After(deadline) {
				b.Fatalf("%d connections in pub/sub mode on %s, want %d", pubsubClients(b, p), p.Addr, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// pubsubClients counts the connections of p's node in pub/sub mode.
func pubsubClients(b *testing.B, p interface{ Get() redis.Conn }) int {
	b.Helper()
	c := p.Get()
	defer c.Close()
	list, err := redis.String(c.Do("CLIENT", "LIST", "TYPE", "pubsub"))
	if err != nil {
		b.Fatal(err)
	}
	return strings.Count(list, "\n")
}

package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
)

// BenchmarkBesideWaiters: the sweep's uncontended case at 64 callers, while
// other Clients each wait for a key that a holder keeps: what a process's
// release notices cost the rest of a fleet. Each waiter's subscription
// hears the releases of its key (wake.go, "Channels per key"), not the 64
// callers' releases, which go out on channels no one hears.
func BenchmarkBesideWaiters(b *testing.B) {
	pools := benchNodes(b, 5)
	mine := benchRedlock(benchClient(b, pools))
	for _, waiters := range []int{0, 1, 8} {
		b.Run(fmt.Sprintf("N=5/callers=64/waiters=%d", waiters), func(b *testing.B) {
			// Set up and torn down within each run of the function (which
			// b.Run calls with growing b.N): the holder and waiters of a
			// run end before the next one starts.
			ctx, cancel := context.WithCancel(context.Background())
			holder := benchClient(b, pools)
			done := make(chan struct{}, waiters)
			var held []*redlock.Lock
			defer func() {
				b.StopTimer()
				cancel()
				for range waiters {
					<-done
				}
				for _, l := range held {
					_ = l.Unlock(context.Background())
				}
				_ = holder.Close()
			}()
			for i := range waiters {
				key := fmt.Sprintf("beside:held:%d", i)
				l, err := holder.Lock(ctx, key, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, l)
				w := benchClient(b, pools, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)))
				go func() {
					defer func() { done <- struct{}{} }()
					defer w.Close()
					if l, err := w.Lock(ctx, key, time.Minute); err == nil {
						_ = l.Unlock(context.Background())
					}
				}()
			}
			// Every waiter's subscription is open on every node.
			deadline := time.Now().Add(10 * time.Second)
			for _, p := range pools {
				for pubsubClients(b, p) < waiters {
					if time.Now().After(deadline) {
						b.Fatalf("%d subscriptions open on %s, want %d", pubsubClients(b, p), p.Addr, waiters)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			benchkit.Callers(b, mine, 64)
		})
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

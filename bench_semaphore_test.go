package redlock_test

// Benchmarks of the semaphore (docs/semaphore.md) against the mutex in the
// same run, on the same local redis-server nodes (see bench_test.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
)

func benchSemaphore(s *redlock.Semaphore) benchkit.Op {
	return func(ctx context.Context, key string) error {
		p, err := s.TryAcquire(ctx, benchTTL)
		if err != nil {
			return err
		}
		return p.Unlock(ctx)
	}
}

// BenchmarkSemaphoreAcquireRelease: TryAcquire+Release on N=5, one caller
// and eight, next to the mutex's TryLock+Unlock. Each op uses a key of its
// own: a fresh semaphore per key, so that no op waits for another.
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	pools := benchNodes(b, 5)
	c := benchClient(b, pools)
	mutex := benchRedlock(c)
	sem := func(k int) benchkit.Op {
		return func(ctx context.Context, key string) error {
			return benchSemaphore(mustSemaphore(b, c, key, k))(ctx, key)
		}
	}
	for _, p := range []int{0, 8} {
		run := func(b *testing.B, op benchkit.Op) {
			if p == 0 {
				benchkit.Serial(b, op)
			} else {
				benchkit.Parallel(b, op, p)
			}
		}
		par := "serial"
		if p > 0 {
			par = fmt.Sprint(p)
		}
		b.Run(fmt.Sprintf("N=5/p=%s/impl=mutex", par), func(b *testing.B) { run(b, mutex) })
		for _, k := range []int{1, 2, 3} {
			b.Run(fmt.Sprintf("N=5/p=%s/impl=semaphore-K=%d", par, k), func(b *testing.B) { run(b, sem(k)) })
		}
	}
}

// BenchmarkSemaphoreWeighted: TryAcquire+Release of one permit on N=5,
// serial. "free": a fresh key per op, K=16, the permit of weight 1 or 16.
// "held": one key whose K=32 permits are held 15 at a time, by 15 holders
// of weight 1 or by one of weight 15, and a permit of weight 1. The acquire
// script adds up the live members' weights, so its cost follows the number
// of members, not the weight they hold. The held keys keep 17 permits free,
// so that an orphan member (a reply that timed out) does not block the ops
// that follow it until its ttl. Every case needs all five nodes (quorum 5),
// so it runs with AllowNoFaultTolerance.
func BenchmarkSemaphoreWeighted(b *testing.B) {
	pools := benchNodes(b, 5)
	c := benchClient(b, pools)
	ctx := context.Background()
	free := func(w int) benchkit.Op {
		return func(ctx context.Context, key string) error {
			return benchSemaphore(mustSemaphore(b, c, key, 16, redlock.AllowNoFaultTolerance(), redlock.WithWeight(w)))(ctx, key)
		}
	}
	held := func(b *testing.B, key string, holders, w int) benchkit.Op {
		for range holders {
			p, err := mustSemaphore(b, c, key, 32, redlock.AllowNoFaultTolerance(), redlock.WithWeight(w)).TryAcquire(ctx, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Unlock(context.Background()) })
		}
		s := benchSemaphore(mustSemaphore(b, c, key, 32, redlock.AllowNoFaultTolerance()))
		return func(ctx context.Context, _ string) error { return s(ctx, key) }
	}
	b.Run("N=5/free/K=16/w=1", func(b *testing.B) { benchkit.Serial(b, free(1)) })
	b.Run("N=5/free/K=16/w=16", func(b *testing.B) { benchkit.Serial(b, free(16)) })
	b.Run("N=5/held=15x1/K=32/w=1", func(b *testing.B) { benchkit.Serial(b, held(b, "weighted-15x1", 15, 1)) })
	b.Run("N=5/held=1x15/K=32/w=1", func(b *testing.B) { benchkit.Serial(b, held(b, "weighted-1x15", 1, 15)) })
}

// BenchmarkSemaphoreContention: 16 goroutines on one key, each retrying
// Acquire (1-3ms apart) until it holds a permit, then releasing it at once.
// handoffs/s is permits granted per second. The mutex, retrying Lock the
// same way, is the K=1 reference. K=4 on N=5 needs every node (quorum 5),
// so it runs with AllowNoFaultTolerance.
func BenchmarkSemaphoreContention(b *testing.B) {
	pools := benchNodes(b, 5)
	const workers = 16
	c := benchClient(b, pools, redlock.WithTries(10000), redlock.WithRetryDelay(time.Millisecond, 3*time.Millisecond))
	b.Run(fmt.Sprintf("N=5/w=%d/impl=mutex", workers), func(b *testing.B) {
		benchkit.Contention(b, func(ctx context.Context, key string) error {
			l, err := c.Lock(ctx, key, benchTTL)
			if err == nil {
				err = l.Unlock(ctx)
			}
			return err
		}, workers)
	})
	for _, k := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("N=5/w=%d/impl=semaphore-K=%d", workers, k), func(b *testing.B) {
			benchkit.Contention(b, func(ctx context.Context, key string) error {
				p, err := mustSemaphore(b, c, key, k, redlock.AllowNoFaultTolerance()).Acquire(ctx, benchTTL)
				if err == nil {
					err = p.Unlock(ctx)
				}
				return err
			}, workers)
		})
	}
}

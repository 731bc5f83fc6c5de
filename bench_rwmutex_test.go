package redlock_test

// Benchmarks of the read-write lock against the mutex on the same local
// redis-server nodes (bench_test.go's), and of a writer's wait under a
// stream of readers. docs/benchmarks.md has the figures and the command.

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
)

// BenchmarkRWMutex: one caller, acquire+release on a fresh key at N=5: the
// mutex, a reader (RLock+Unlock) and a writer (Lock+Unlock).
func BenchmarkRWMutex(b *testing.B) {
	c := benchClient(b, benchNodes(b, 5))
	b.Run("N=5/impl=mutex", func(b *testing.B) { benchkit.Serial(b, benchRedlock(c)) })
	b.Run("N=5/impl=rlock", func(b *testing.B) {
		benchkit.Serial(b, func(ctx context.Context, key string) error {
			l, err := c.RWMutex(key).TryRLock(ctx, benchTTL)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		})
	})
	b.Run("N=5/impl=wlock", func(b *testing.B) {
		benchkit.Serial(b, func(ctx context.Context, key string) error {
			l, err := c.RWMutex(key).TryLock(ctx, benchTTL)
			if err != nil {
				return err
			}
			return l.Unlock(ctx)
		})
	})
}

// BenchmarkRWMutexWriterWait: eight readers re-lock one key without pause,
// each holding 5ms; each iteration times one writer's Lock until it holds
// the lock, with its intent mark and without it (capped at one second: a
// writer that waited that long counts as starved). wait-ms is the mean.
func BenchmarkRWMutexWriterWait(b *testing.B) {
	pools := benchNodes(b, 5)
	for _, intent := range []bool{true, false} {
		name := "intent=on"
		if !intent {
			name = "intent=off"
		}
		b.Run("N=5/"+name, func(b *testing.B) {
			c := benchClient(b, pools, redlock.WithTries(1<<20), redlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond))
			rw := c.RWMutex("bench:rw:" + name)
			if !intent {
				rw = redlock.WithoutIntent(rw)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			for range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					for ctx.Err() == nil {
						if l, err := rw.RLock(ctx, time.Second); err == nil {
							time.Sleep(5 * time.Millisecond)
							_ = l.Unlock(context.WithoutCancel(ctx))
						}
					}
				}()
			}
			defer func() {
				stop()
				for range 8 {
					<-done
				}
			}()
			time.Sleep(50 * time.Millisecond) // let the stream start
			var total time.Duration
			n, starved := 0, 0
			for b.Loop() {
				n++
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				start := time.Now()
				l, err := rw.Lock(wctx, time.Second)
				total += time.Since(start)
				cancel()
				if err != nil {
					starved++
					continue
				}
				_ = l.Unlock(ctx)
			}
			b.ReportMetric(float64(total)/float64(n)/1e6, "wait-ms")
			b.ReportMetric(float64(starved)/float64(n), "starved/op")
		})
	}
}

package redlock_test

// Benchmarks of leader election against the mutex on the same local
// redis-server nodes, in the same run (docs/benchmarks.md, "Leader
// election"):
//
//	go test -run '^$' -bench 'Election' -count 6 -benchtime 2000x .

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
)

// benchElection is one Campaign, won at once on a fresh election, and its
// Resign: two fenced rounds, the publish of the value, and the release.
func benchElection(c *redlock.Client) benchkit.Op {
	return func(ctx context.Context, key string) error {
		ld, err := c.Election(key, redlock.WithElectionTTL(benchTTL)).Campaign(ctx, "bench")
		if err != nil {
			return err
		}
		return ld.Resign(ctx)
	}
}

// BenchmarkElection: N=5, one caller, Campaign+Resign against the mutex's
// Lock+Unlock, plain and fenced; then k candidates taking turns to lead one
// election against k callers taking turns on one lock (handoffs/s).
func BenchmarkElection(b *testing.B) {
	pools := benchNodes(b, 5)
	plain := benchClient(b, pools)
	fenced := benchClient(b, pools, redlock.WithFencing())
	b.Run("N=5/impl=mutex", func(b *testing.B) { benchkit.Serial(b, benchRedlock(plain)) })
	b.Run("N=5/impl=fenced", func(b *testing.B) { benchkit.Serial(b, benchRedlock(fenced)) })
	b.Run("N=5/impl=election", func(b *testing.B) { benchkit.Serial(b, benchElection(plain)) })

	retry := []redlock.Option{redlock.WithTries(10000), redlock.WithRetryDelay(time.Millisecond, 3*time.Millisecond)}
	contended := benchClient(b, pools, retry...)
	for _, k := range []int{2, 8} {
		b.Run(fmt.Sprintf("N=5/k=%d/impl=mutex", k), func(b *testing.B) {
			benchkit.Contention(b, func(ctx context.Context, key string) error {
				l, err := contended.Lock(ctx, key, benchTTL)
				if err == nil {
					err = l.Unlock(ctx)
				}
				return err
			}, k)
		})
		b.Run(fmt.Sprintf("N=5/k=%d/impl=election", k), func(b *testing.B) {
			benchkit.Contention(b, benchElection(contended), k)
		})
	}
}

package goredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlocktest"
)

// BenchmarkExec measures one Exec on a local redis-server: a single SET,
// and a batch of eight, as the core's pipes send them.
func BenchmarkExec(b *testing.B) {
	requireRedis(b)
	s := redistest.Start(b)
	pool := goredis.NewPool(newClient(b, redlocktest.Server{Addr: s.Addr}))
	for _, n := range []int{1, 8} {
		cmds := make([]driver.Command, n)
		for i := range cmds {
			cmds[i] = driver.Command{Name: "SET", Args: []any{"bench", "token", "PX", int64(1000)}, NumKeys: 1}
		}
		replies := make([]driver.Reply, n)
		b.Run(map[int]string{1: "single", 8: "batch8"}[n], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if err := pool.Exec(ctx, cmds, replies); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}

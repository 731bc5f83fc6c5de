package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/internal/benchkit"
	"github.com/quorumlock/redlock/internal/redistest"
)

var nodeCounts = []int{1, 3, 5, 7}

// BenchmarkUncontended: one caller, Lock then Unlock on a fresh key per
// iteration. ns/op is the latency a user sees for an uncontended critical
// section with no work in it.
func BenchmarkUncontended(b *testing.B) {
	pools := newPools(b, startNodes(b, maxNodes))
	for _, n := range nodeCounts {
		for _, im := range impls {
			b.Run(fmt.Sprintf("N=%d/impl=%s", n, im.name), func(b *testing.B) {
				benchkit.Serial(b, im.new(pools[:n]).lockUnlock)
			})
		}
	}
}

// BenchmarkParallel: b.RunParallel over distinct keys, with
// b.SetParallelism(p): p×GOMAXPROCS goroutines, 2, 16, 64 and 128 on 2
// CPUs. ops/s is the throughput of one client process.
func BenchmarkParallel(b *testing.B) {
	pools := newPools(b, startNodes(b, maxNodes))
	for _, n := range nodeCounts {
		for _, p := range []int{1, 8, 32, 64} {
			for _, im := range impls {
				b.Run(fmt.Sprintf("N=%d/p=%d/impl=%s", n, p, im.name), func(b *testing.B) {
					benchkit.Parallel(b, im.new(pools[:n]).lockUnlock, p)
				})
			}
		}
	}
}

// BenchmarkSweep: N=5, exactly k goroutines over distinct keys (k = 1, 2,
// 8, 64, 512), each implementation on the same pools. ops/s against k is
// the throughput curve of docs/benchmarks.md.
func BenchmarkSweep(b *testing.B) {
	pools := newPools(b, startNodes(b, 5))
	for _, k := range []int{1, 2, 8, 64, 512} {
		for _, im := range impls {
			l := im.new(pools)
			b.Run(fmt.Sprintf("N=5/callers=%d/impl=%s", k, im.name), func(b *testing.B) {
				benchkit.Callers(b, l.lockUnlock, k)
			})
		}
	}
}

// BenchmarkContention: k goroutines take turns on one key, each retrying
// until it holds the lock. handoffs/s is how often the lock changes hands.
func BenchmarkContention(b *testing.B) {
	pools := newPools(b, startNodes(b, maxNodes))
	for _, n := range []int{3, 5} {
		for _, k := range []int{2, 8} {
			for _, im := range impls[1:] { // the floor has no retry logic
				b.Run(fmt.Sprintf("N=%d/k=%d/impl=%s", n, k, im.name), func(b *testing.B) {
					benchkit.Contention(b, im.new(pools[:n]).handoff, k)
				})
			}
		}
	}
}

// BenchmarkSlowNode: N=5 with node 0 behind a toxiproxy that delays its
// replies by 10ms, against the same five nodes without the delay.
func BenchmarkSlowNode(b *testing.B) {
	addrs := startNodes(b, 5)
	fast := newPools(b, addrs)
	slowAddrs := append([]string{startSlowProxy(b, addrs[0], 10*time.Millisecond)}, addrs[1:]...)
	checkSlow(b, slowAddrs[0], 10*time.Millisecond)
	slow := newPools(b, slowAddrs)
	for _, im := range impls {
		for _, f := range []struct {
			name  string
			pools []*redis.Pool
		}{{"none", fast}, {"slow10ms", slow}} {
			b.Run(fmt.Sprintf("N=5/fault=%s/impl=%s", f.name, im.name), func(b *testing.B) {
				benchkit.Serial(b, im.new(f.pools).lockUnlock)
			})
		}
	}
}

// BenchmarkFrozenNode: N=5 with node 0 a listener that accepts connections
// and never answers. The pools keep redlock.NewPool's one-second read
// timeout, which is all that bounds a library without its own per-node
// deadline.
func BenchmarkFrozenNode(b *testing.B) {
	addrs := startNodes(b, 5)
	frozen := redistest.StartFrozen(b)
	pools := newPools(b, append([]string{frozen.Addr()}, addrs[1:]...))
	for _, im := range impls[1:] { // the floor waits for every node
		b.Run(fmt.Sprintf("N=5/fault=frozen/impl=%s", im.name), func(b *testing.B) {
			benchkit.Serial(b, im.new(pools).lockUnlock)
		})
	}
}

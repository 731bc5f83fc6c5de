package bench

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/quorumlock/redlock"
	redlockgoredis "github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/benchkit"
)

// Slices of BenchmarkPaired: each op counts its successes for pairedRun
// after pairedWarm (benchkit.Paired), which is five of redsync's median
// latencies at 64 goroutines here (17 to 19 ms). A round of two ops is
// about 0.85 s.
const (
	pairedWarm = 100 * time.Millisecond
	pairedRun  = 300 * time.Millisecond
)

// BenchmarkPaired: the ratios of issue 22's targets measured alternately,
// in short slices (benchkit.Paired), one round per b.N; run it with
// -benchtime Nx for N rounds (make bench's -benchtime 1s gives two). Each
// driver at 64 goroutines (p=32 as in BenchmarkDrivers: 32 × GOMAXPROCS),
// redsync and redlock on the same client objects and five nodes; and N=1,
// one caller, bsm/redislock and redlock on one go-redis client, as in
// BenchmarkRedislock. The metric xredlock-p50 is the median of the rounds'
// ratios of redlock's successful ops/s to the other's.
func BenchmarkPaired(b *testing.B) {
	addrs := startNodes(b, 5)
	for _, d := range drivers {
		mine, theirs := d.dial(b, addrs)
		ops := []benchkit.Op{newRedsyncOver(theirs).lockUnlock, newRedlockOver(mine).lockUnlock}
		k := 32 * runtime.GOMAXPROCS(0)
		b.Run(fmt.Sprintf("driver=%s/N=5/p=32", d.name), func(b *testing.B) {
			benchkit.Paired(b, []string{"redsync", "redlock"}, ops, k, pairedWarm, pairedRun)
		})
	}

	c := newGoredisClient(b, addrs[0])
	rl, err := redlock.New([]redlock.Pool{redlockgoredis.NewPool(c)})
	if err != nil {
		b.Fatal(err)
	}
	ops := []benchkit.Op{redislockLocker{redislock.New(c)}.lockUnlock, redlockLocker{rl}.lockUnlock}
	b.Run("redislock/N=1/serial", func(b *testing.B) {
		benchkit.Paired(b, []string{"redislock", "redlock"}, ops, 1, pairedWarm, pairedRun)
	})
}

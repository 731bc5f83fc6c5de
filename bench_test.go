package redlock_test

// Benchmarks of this library against the floor: the same Redis commands sent
// in parallel on the same pools, with no library logic. They need
// redis-server on PATH and skip, saying so, without it. The comparison with
// redsync, the slow node and the method are in bench/ and
// docs/benchmarks.md; `make bench` runs both.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/benchkit"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

const benchTTL = 10 * time.Second

// benchNodes starts n redis-server processes and returns one NewPool each.
func benchNodes(b *testing.B, n int) []*redigo.Pool {
	b.Helper()
	if ok, why := redistest.Available(); !ok {
		b.Skip("no Redis nodes to benchmark against: " + why)
	}
	pools := make([]*redigo.Pool, n)
	for i, s := range redistest.StartN(b, n) {
		pools[i] = redigo.NewPool(s.Addr)
	}
	b.Cleanup(func() {
		for _, p := range pools {
			p.Close()
		}
	})
	return pools
}

func benchClient(b *testing.B, pools []*redigo.Pool, opts ...redlock.Option) *redlock.Client {
	ps := make([]redlock.Pool, len(pools))
	for i, p := range pools {
		ps[i] = p
	}
	c, err := redlock.New(ps, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchRedlock(c *redlock.Client) benchkit.Op {
	return func(ctx context.Context, key string) error {
		l, err := c.TryLock(ctx, key, benchTTL)
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	}
}

const benchFloorScript = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

// benchFloor sends SET NX PX to every node in parallel and waits for all,
// then the compare-and-delete script likewise.
func benchFloor(b *testing.B, pools []*redigo.Pool) benchkit.Op {
	hash := ""
	for _, p := range pools {
		c := p.Get()
		h, err := redis.String(c.Do("SCRIPT", "LOAD", benchFloorScript))
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		hash = h
	}
	const token = "0123456789abcdefghijkl" // a token's length, at no cost
	all := func(do func(redis.Conn) error) error {
		var wg sync.WaitGroup
		errs := make([]error, len(pools))
		for i, p := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := p.Get()
				errs[i] = do(c)
				c.Close()
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return func(ctx context.Context, key string) error {
		if err := all(func(c redis.Conn) error {
			_, err := c.Do("SET", key, token, "NX", "PX", benchTTL.Milliseconds())
			return err
		}); err != nil {
			return err
		}
		return all(func(c redis.Conn) error {
			_, err := c.Do("EVALSHA", hash, 1, key, token)
			return err
		})
	}
}

// BenchmarkLockUnlock: one caller, Lock+Unlock on a fresh key, against the
// floor on the same nodes.
func BenchmarkLockUnlock(b *testing.B) {
	pools := benchNodes(b, 7)
	for _, n := range []int{1, 3, 5, 7} {
		b.Run(fmt.Sprintf("N=%d/impl=floor", n), func(b *testing.B) {
			benchkit.Serial(b, benchFloor(b, pools[:n]))
		})
		b.Run(fmt.Sprintf("N=%d/impl=redlock", n), func(b *testing.B) {
			benchkit.Serial(b, benchRedlock(benchClient(b, pools[:n])))
		})
	}
}

// BenchmarkFencing: the cost of WithFencing's second round trip, against
// plain Lock+Unlock on the same nodes, one caller and eight.
func BenchmarkFencing(b *testing.B) {
	pools := benchNodes(b, 5)
	for _, n := range []int{3, 5} {
		plain := benchRedlock(benchClient(b, pools[:n]))
		fenced := benchRedlock(benchClient(b, pools[:n], redlock.WithFencing()))
		b.Run(fmt.Sprintf("N=%d/p=serial/impl=redlock", n), func(b *testing.B) { benchkit.Serial(b, plain) })
		b.Run(fmt.Sprintf("N=%d/p=serial/impl=fenced", n), func(b *testing.B) { benchkit.Serial(b, fenced) })
		b.Run(fmt.Sprintf("N=%d/p=8/impl=redlock", n), func(b *testing.B) { benchkit.Parallel(b, plain, 8) })
		b.Run(fmt.Sprintf("N=%d/p=8/impl=fenced", n), func(b *testing.B) { benchkit.Parallel(b, fenced, 8) })
	}
}

// BenchmarkParallel: b.RunParallel over distinct keys at parallelism 1, 8,
// 32 and 64: 2, 16, 64 and 128 goroutines on 2 CPUs.
func BenchmarkParallel(b *testing.B) {
	pools := benchNodes(b, 7)
	for _, n := range []int{1, 3, 5, 7} {
		for _, p := range []int{1, 8, 32, 64} {
			b.Run(fmt.Sprintf("N=%d/p=%d/impl=floor", n, p), func(b *testing.B) {
				benchkit.Parallel(b, benchFloor(b, pools[:n]), p)
			})
			b.Run(fmt.Sprintf("N=%d/p=%d/impl=redlock", n, p), func(b *testing.B) {
				benchkit.Parallel(b, benchRedlock(benchClient(b, pools[:n])), p)
			})
		}
	}
}

// sweepCallers are the caller counts of the throughput sweeps (issue 22).
var sweepCallers = []int{1, 2, 8, 64, 512}

// BenchmarkSweep: N=5, exactly k goroutines over distinct keys, for k in
// sweepCallers, against the floor on the same pools. ops/s against k is
// the throughput curve of docs/benchmarks.md.
func BenchmarkSweep(b *testing.B) {
	pools := benchNodes(b, 5)
	floor := benchFloor(b, pools)
	mine := benchRedlock(benchClient(b, pools))
	for _, k := range sweepCallers {
		b.Run(fmt.Sprintf("N=5/callers=%d/impl=floor", k), func(b *testing.B) { benchkit.Callers(b, floor, k) })
		b.Run(fmt.Sprintf("N=5/callers=%d/impl=redlock", k), func(b *testing.B) { benchkit.Callers(b, mine, k) })
	}
}

// BenchmarkContention: k goroutines take turns on one key; each Lock retries
// (1-3ms apart) until it holds the lock. handoffs/s is how often the lock
// changes hands.
func BenchmarkContention(b *testing.B) {
	pools := benchNodes(b, 5)
	for _, n := range []int{1, 3, 5} {
		for _, k := range []int{2, 8} {
			b.Run(fmt.Sprintf("N=%d/k=%d", n, k), func(b *testing.B) {
				c := benchClient(b, pools[:n], redlock.WithTries(10000), redlock.WithRetryDelay(time.Millisecond, 3*time.Millisecond))
				benchkit.Contention(b, func(ctx context.Context, key string) error {
					l, err := c.Lock(ctx, key, benchTTL)
					if err == nil {
						err = l.Unlock(ctx)
					}
					return err
				}, k)
			})
		}
	}
}

// BenchmarkFrozenNode: N=5, one node accepts connections and never answers.
// Every Lock+Unlock must return within the node timeout (50ms); max-µs
// shows it.
func BenchmarkFrozenNode(b *testing.B) {
	pools := benchNodes(b, 4)
	frozen := redigo.NewPool(redistest.StartFrozen(b).Addr())
	b.Cleanup(func() { frozen.Close() })
	all := append([]*redigo.Pool{frozen}, pools...)
	b.Run("N=5/impl=redlock", func(b *testing.B) {
		benchkit.Serial(b, benchRedlock(benchClient(b, all)))
	})
	b.Run("N=5/p=8/impl=redlock", func(b *testing.B) {
		benchkit.Parallel(b, benchRedlock(benchClient(b, all)), 8)
	})
}

// BenchmarkReplicaAcks: the cost of WithReplicaAcks(1), against plain
// Lock+Unlock, on the same three members, each a primary with one replica
// on loopback: one caller and eight. The acked SET is followed by WAIT 1 in
// its own batch, so its price is the replica's round trip (the primary
// asks it for an ack, REPLCONF GETACK, and waits for its answer).
func BenchmarkReplicaAcks(b *testing.B) {
	if ok, why := redistest.Available(); !ok {
		b.Skip("no Redis nodes to benchmark against: " + why)
	}
	pools := make([]*redigo.Pool, 3)
	for i := range pools {
		// Replicated directly, not through StartReplicated's relay, whose
		// extra hop would add to the price.
		p := redistest.Start(b)
		redistest.Start(b, "--replicaof", "127.0.0.1", strconv.Itoa(p.Port))
		if err := redistest.WaitReplicas(p.Addr, 1, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		pools[i] = redigo.NewPool(p.Addr)
		b.Cleanup(func() { pools[i].Close() })
	}
	plain := benchRedlock(benchClient(b, pools))
	acked := benchRedlock(benchClient(b, pools, redlock.WithReplicaAcks(1), redlock.WithNodeTimeout(time.Second)))
	b.Run("N=3/p=serial/impl=redlock", func(b *testing.B) { benchkit.Serial(b, plain) })
	b.Run("N=3/p=serial/impl=acked", func(b *testing.B) { benchkit.Serial(b, acked) })
	b.Run("N=3/p=8/impl=redlock", func(b *testing.B) { benchkit.Parallel(b, plain, 8) })
	b.Run("N=3/p=8/impl=acked", func(b *testing.B) { benchkit.Parallel(b, acked, 8) })
}

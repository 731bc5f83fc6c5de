package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-redsync/redsync/v4/redis/redigo"
	redsyncrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	redsyncvalkey "github.com/go-redsync/redsync/v4/redis/valkeygo"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeycompat"

	"github.com/quorumlock/redlock"
	redlockgoredis "github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/benchkit"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
	"github.com/quorumlock/redlock/valkeygo"
)

// A driver makes one client per node address, as its adapter's package doc
// recommends, and returns the same clients twice: as redlock Pools, through
// this repository's adapter, and as redsync Pools, through redsync's adapter
// for that driver. The two libraries then share every connection, and only
// the library differs.
type driver struct {
	name string
	dial func(b testing.TB, addrs []string) ([]redlock.Pool, []redsyncredis.Pool)
}

var drivers = []driver{
	{"redigo", dialRedigo},
	{"goredis", dialGoredis},
	{"rueidis", dialRueidis},
	{"valkeygo", dialValkey},
}

// dialRedigo: redlock.NewPool, as in the other cases of this suite.
func dialRedigo(b testing.TB, addrs []string) ([]redlock.Pool, []redsyncredis.Pool) {
	mine := make([]redlock.Pool, len(addrs))
	theirs := make([]redsyncredis.Pool, len(addrs))
	for i, p := range newPools(b, addrs) {
		mine[i] = redlockPool(p)
		theirs[i] = redigo.NewPool(p)
	}
	return mine, theirs
}

// newGoredisClient: go-redis v9 with ContextTimeoutEnabled, as the goredis
// adapter recommends, and its defaults otherwise (PoolSize 10 per
// GOMAXPROCS).
func newGoredisClient(b testing.TB, addr string) *goredislib.Client {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	return c
}

func dialGoredis(b testing.TB, addrs []string) ([]redlock.Pool, []redsyncredis.Pool) {
	mine := make([]redlock.Pool, len(addrs))
	theirs := make([]redsyncredis.Pool, len(addrs))
	for i, a := range addrs {
		c := newGoredisClient(b, a)
		mine[i] = redlockgoredis.NewPool(c)
		theirs[i] = redsyncgoredis.NewPool(c)
	}
	return mine, theirs
}

// dialRueidis: ForceSingleClient and DisableCache, as the rueidis adapter
// recommends for a standalone master, auto-pipelining on (the default).
// redsync's adapter takes the same client through rueidiscompat.
func dialRueidis(b testing.TB, addrs []string) ([]redlock.Pool, []redsyncredis.Pool) {
	mine := make([]redlock.Pool, len(addrs))
	theirs := make([]redsyncredis.Pool, len(addrs))
	for i, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{a},
			ForceSingleClient: true,
			DisableCache:      true,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		mine[i] = redlockrueidis.NewPool(c)
		theirs[i] = redsyncrueidis.NewPool(rueidiscompat.NewAdapter(c))
	}
	return mine, theirs
}

// dialValkey: as dialRueidis, for valkey-go.
func dialValkey(b testing.TB, addrs []string) ([]redlock.Pool, []redsyncredis.Pool) {
	mine := make([]redlock.Pool, len(addrs))
	theirs := make([]redsyncredis.Pool, len(addrs))
	for i, a := range addrs {
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress:       []string{a},
			ForceSingleClient: true,
			DisableCache:      true,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		mine[i] = valkeygo.NewPool(c)
		theirs[i] = redsyncvalkey.NewPool(valkeycompat.NewAdapter(c))
	}
	return mine, theirs
}

// BenchmarkDrivers: redlock through each driver's adapter against redsync
// through its adapter for the same driver, on the same five nodes and the
// same client objects. Serial is one caller's Lock+Unlock; p=1, p=32 and
// p=64 run 2, 64 and 128 goroutines (b.SetParallelism, with GOMAXPROCS=2)
// over distinct keys.
func BenchmarkDrivers(b *testing.B) {
	const n = 5
	addrs := startNodes(b, n)
	for _, d := range drivers {
		mine, theirs := d.dial(b, addrs)
		pair := []struct {
			name string
			l    locker
		}{{"redsync", newRedsyncOver(theirs)}, {"redlock", newRedlockOver(mine)}}
		for _, im := range pair {
			b.Run(fmt.Sprintf("driver=%s/N=%d/serial/impl=%s", d.name, n, im.name), func(b *testing.B) {
				benchkit.Serial(b, im.l.lockUnlock)
			})
		}
		for _, p := range []int{1, 32, 64} {
			for _, im := range pair {
				b.Run(fmt.Sprintf("driver=%s/N=%d/p=%d/impl=%s", d.name, n, p, im.name), func(b *testing.B) {
					parallelOK(b, im.l.lockUnlock, p)
				})
			}
		}
	}
}

// parallelOK is benchkit.Parallel that also reports okops/s: the
// operations that succeeded per second of wall time. Under load, a library
// with a short node timeout fails some operations quickly, and ops/s counts
// those too.
func parallelOK(b *testing.B, op benchkit.Op, p int) {
	var ok atomic.Int64
	start := time.Now()
	benchkit.Parallel(b, func(ctx context.Context, key string) error {
		err := op(ctx, key)
		if err == nil {
			ok.Add(1)
		}
		return err
	}, p)
	b.ReportMetric(float64(ok.Load())/time.Since(start).Seconds(), "okops/s")
}

// redislockLocker is github.com/bsm/redislock on one go-redis client:
// Obtain without retries (its default), then Release.
type redislockLocker struct{ c *redislock.Client }

func (r redislockLocker) lockUnlock(ctx context.Context, key string) error {
	l, err := r.c.Obtain(ctx, key, ttl, nil)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

// goredisFloor is the floor on one go-redis client: SET NX PX, then the
// compare-and-delete script by EVALSHA, from the calling goroutine, with no
// token, deadline or library logic.
type goredisFloor struct {
	c    *goredislib.Client
	hash string
}

func newGoredisFloor(b testing.TB, c *goredislib.Client) goredisFloor {
	h, err := c.ScriptLoad(context.Background(), floorRelease).Result()
	if err != nil {
		b.Fatal(err)
	}
	return goredisFloor{c, h}
}

func (f goredisFloor) lockUnlock(ctx context.Context, key string) error {
	ok, err := f.c.SetNX(ctx, key, floorToken, ttl).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("not set")
	}
	return f.c.EvalSha(ctx, f.hash, []string{key}, floorToken).Err()
}

// BenchmarkRedislock: N=1, one go-redis client (ContextTimeoutEnabled),
// shared by bsm/redislock, by redlock through the goredis adapter, and by
// the floor of the same commands sent straight from the caller.
func BenchmarkRedislock(b *testing.B) {
	c := newGoredisClient(b, startNodes(b, 1)[0])
	rl, err := redlock.New([]redlock.Pool{redlockgoredis.NewPool(c)})
	if err != nil {
		b.Fatal(err)
	}
	impls := []struct {
		name string
		op   benchkit.Op
	}{
		{"redislock", redislockLocker{redislock.New(c)}.lockUnlock},
		{"redlock", redlockLocker{rl}.lockUnlock},
		{"floor", newGoredisFloor(b, c).lockUnlock},
	}
	for _, im := range impls {
		b.Run("N=1/serial/impl="+im.name, func(b *testing.B) { benchkit.Serial(b, im.op) })
	}
	for _, p := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("N=1/p=%d/impl=%s", p, im.name), func(b *testing.B) {
				parallelOK(b, im.op, p)
			})
		}
	}
}

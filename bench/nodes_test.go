package bench

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
	"github.com/rs/zerolog"
)

// maxNodes is the largest N any case uses.
const maxNodes = 7

// startNodes starts n redis-server processes on loopback and returns their
// addresses. It skips the benchmark, with the reason, if redis-server is not
// installed. The servers stop when b ends.
func startNodes(b testing.TB, n int) []string {
	b.Helper()
	if ok, why := redistest.Available(); !ok {
		b.Skip(why)
	}
	addrs := make([]string, n)
	for i, s := range redistest.StartN(b, n) {
		addrs[i] = s.Addr
	}
	return addrs
}

// newPools returns one production-default pool (redlock.NewPool) per address.
// Every implementation in a run borrows from these same pools.
func newPools(b testing.TB, addrs []string) []*redis.Pool {
	pools := make([]*redis.Pool, len(addrs))
	for i, a := range addrs {
		rp := redigo.NewPool(a)
		pools[i] = rp.Pool
		madeByNewPool.Store(rp.Pool, rp)
	}
	b.Cleanup(func() {
		for _, p := range pools {
			madeByNewPool.Delete(p)
			p.Close()
		}
	})
	return pools
}

// startSlowProxy puts an in-process toxiproxy in front of upstream that
// delays every reply by latency, and returns the proxy's address.
func startSlowProxy(b testing.TB, upstream string, latency time.Duration) string {
	b.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "slow", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	toxic := `{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":` +
		strconv.FormatInt(latency.Milliseconds(), 10) + `}}`
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		b.Fatal(err)
	}
	return p.Listen
}

// checkSlow measures one PING through addr, to show the toxic is in place.
func checkSlow(b testing.TB, addr string, min time.Duration) {
	b.Helper()
	c, err := redis.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Do("PING"); err != nil {
		b.Fatal(err)
	}
	if d := time.Since(start); d < min {
		b.Fatalf("PING through the slow proxy took %v, want at least %v", d, min)
	}
}

// madeByNewPool maps each *redis.Pool of newPools to the *redigo.Pool
// that NewPool made around it, so that redlock uses that one: a redigo.Pool
// around a bare *redis.Pool does not declare driver.DeadlineHonorer.
var madeByNewPool sync.Map

// redlockPool returns the redigo.Pool NewPool made around p.
func redlockPool(p *redis.Pool) *redigo.Pool {
	if rp, ok := madeByNewPool.Load(p); ok {
		return rp.(*redigo.Pool)
	}
	return &redigo.Pool{Pool: p}
}

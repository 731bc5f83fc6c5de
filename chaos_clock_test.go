package redlock_test

// Clock rate: Redis nodes whose wall clock, the clock they expire keys by,
// runs faster than the client's. docs/chaos.md, "Clock rate", has the
// figures and the commands.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestChaosClockRate runs five redis-server processes under libfaketime,
// each clock at its own rate, while four workers contend for one key with
// a 1 s ttl (2 s in the last case). Every holder keeps its lock for its whole validity and never
// releases it (holdLoad), so each hand-over happens when the keys expire on
// a majority, by the nodes' clocks.
//
// Redlock promises exclusion while node clocks run at most the drift factor
// faster than the client's (clock.go): with ttl 1 s the allowance is
// 1 s × 0.01 + 2 ms = 12 ms, so every key the holder counted must live until
// start + 988 ms of real time, which holds for rates up to about 1.012.
//
//   - x1.004 keeps a PX 1000 key for 996 ms, and x1.008 for 992 ms: inside,
//     no violation. Slower clocks only keep keys longer.
//   - x1.5 keeps it for 667 ms: far outside, and the checker must find the
//     second holder.
//   - Two nodes at x2 among three at x1.004 break it too. The assumption is
//     about every node, not a majority: a holder often wins with the two
//     fast nodes and one other, because the previous holder's key was still
//     on the rest; when the fast nodes drop its key, a contender takes them
//     and the two nodes the holder never had.
//   - x1.008 with the client told to allow only 0.1%, and a 2 s ttl: the
//     keys live 1984 ms, validity ends at 1996 ms (the default allowance
//     would end it at 1978 ms). The checker must find that overlap, which
//     shows that the allowance is what keeps the x1.008 case safe.
func TestChaosClockRate(t *testing.T) {
	t.Parallel() // chaosStart says why
	// chaosStart's first step; this test starts its servers itself.
	stalls.watch(t)
	five := func(r float64) []float64 { return []float64{r, r, r, r, r} }
	cases := []struct {
		name  string
		rates []float64 // one per node
		ttl   time.Duration
		drift float64 // the client's drift factor; 0 means the default
		// unsafe: the rates break the client's assumption, and the checker
		// must find violations. Otherwise it must find none in minCycles.
		unsafe    bool
		minCycles int64
	}{
		{name: "all x1.004", rates: five(1.004), ttl: time.Second, minCycles: 10},
		{name: "all x1.008", rates: five(1.008), ttl: time.Second, minCycles: 10},
		{name: "two x0.5, three x1.004", rates: []float64{0.5, 1.004, 0.5, 1.004, 1.004}, ttl: time.Second, minCycles: 10},
		{name: "all x1.5", rates: five(1.5), ttl: time.Second, unsafe: true, minCycles: 20},
		{name: "two x2, three x1.004", rates: []float64{2, 1.004, 2, 1.004, 1.004}, ttl: time.Second, unsafe: true, minCycles: 20},
		{name: "all x1.008, 2 s ttl, drift factor 0.001", rates: five(1.008), ttl: 2 * time.Second, drift: 0.001, unsafe: true, minCycles: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			chaosClockRun(t, tc.rates, tc.ttl, tc.drift, tc.unsafe, tc.minCycles)
		})
	}
}

func chaosClockRun(t *testing.T, rates []float64, ttl time.Duration, drift float64, unsafe bool, minCycles int64) {
	const (
		workers     = 4
		nodeTimeout = 100 * time.Millisecond
		tries       = 50
		retryMin    = time.Millisecond
		retryMax    = 3 * time.Millisecond
	)
	servers := make([]*redistest.Server, len(rates))
	addrs := make([]string, len(rates))
	for i, r := range rates {
		servers[i] = redistest.StartClockRate(t, r)
		addrs[i] = servers[i].Addr
	}
	opts := []redlock.Option{redlock.WithNodeTimeout(nodeTimeout), redlock.WithTries(tries),
		redlock.WithRetryDelay(retryMin, retryMax)}
	if drift != 0 {
		opts = append(opts, redlock.WithDriftFactor(drift))
	}
	ld := &holdLoad{
		client:     realClient(t, addrs, opts...),
		key:        "chaos:clock",
		ttl:        ttl,
		lockBudget: chaosLockBudget(tries, false, nodeTimeout, retryMax),
		check:      newChaosChecker(),
	}
	clocks := chaosClocksStart(t, addrs)

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	start := time.Now()
	wait := ld.start(ctx, workers)
	defer wait()
	defer cancel()
	// An unsafe run stops at the first violation; a safe one must show the
	// minimum number of hand-overs without any.
	enough := realEventually(40*time.Second, func() bool {
		return ctx.Err() != nil || ld.cycles.Load() >= minCycles || unsafe && ld.check.violationCount() > 0
	})
	cancel()
	wait()
	elapsed := time.Since(start)

	measured := clocks.rates(t)
	t.Logf("node clock rates asked %v, measured %s; %v", rates, chaosFormatRates(measured), elapsed.Round(100*time.Millisecond))
	for i, m := range measured {
		// Each reading is off by at most a fraction of a millisecond, and
		// rates measures over at least 3 s.
		if diff := m - rates[i]; diff > 0.0015 || diff < -0.0015 {
			t.Errorf("node %d: clock ran at %.4f×, want %v×", i, m, rates[i])
		}
	}
	violations := ld.finish(t)
	if !enough {
		t.Errorf("liveness: %d cycles and %d violations in %v", ld.cycles.Load(), len(violations), elapsed)
	}
	switch {
	case unsafe && len(violations) == 0:
		t.Errorf("clocks outside the drift allowance, yet the checker found no second holder in %d cycles", ld.cycles.Load())
	case unsafe:
		t.Logf("as expected, %d violations, first: %s", len(violations), violations[0])
	case len(violations) > 0:
		t.Errorf("%d mutual exclusion violations with clocks inside the drift allowance:\n%s",
			len(violations), chaosReport(violations))
	}
	if !unsafe && ld.cycles.Load() < minCycles {
		t.Errorf("only %d hand-overs, want %d", ld.cycles.Load(), minCycles)
	}
}

// chaosClocks measures the rate of each node's clock over a run: TIME is
// read at the start and at the end, over at least chaosClockSpan, each
// reading placed at the middle of its round trip on the test's monotonic
// clock.
type chaosClocks struct {
	conns []redis.Conn
	real  []time.Time
	node  []time.Time
}

func chaosClocksStart(t *testing.T, addrs []string) *chaosClocks {
	t.Helper()
	c := &chaosClocks{}
	for _, a := range addrs {
		conn := realConn(t, a)
		r, n := chaosNodeTime(t, conn)
		c.conns = append(c.conns, conn)
		c.real = append(c.real, r)
		c.node = append(c.node, n)
	}
	return c
}

// chaosClockSpan is the shortest time over which chaosClocks measures.
const chaosClockSpan = 3 * time.Second

func (c *chaosClocks) rates(t *testing.T) []float64 {
	t.Helper()
	time.Sleep(time.Until(c.real[len(c.real)-1].Add(chaosClockSpan)))
	out := make([]float64, len(c.conns))
	for i, conn := range c.conns {
		r, n := chaosNodeTime(t, conn)
		out[i] = float64(n.Sub(c.node[i])) / float64(r.Sub(c.real[i]))
	}
	return out
}

// chaosNodeTime reads the node's TIME a few times and keeps the reading
// with the shortest round trip, the one the scheduler disturbed least.
func chaosNodeTime(t *testing.T, conn redis.Conn) (real, node time.Time) {
	t.Helper()
	best := time.Duration(-1)
	for range 7 {
		before := time.Now()
		v, err := redis.Int64s(conn.Do("TIME"))
		if err != nil || len(v) != 2 {
			t.Fatalf("TIME: %v %v", v, err)
		}
		if rtt := time.Since(before); best < 0 || rtt < best {
			best = rtt
			real, node = before.Add(rtt/2), time.Unix(v[0], v[1]*1000)
		}
	}
	return real, node
}

func chaosFormatRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%.4f", r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

package redlock_test

// Eviction: lock nodes with a small maxmemory, filled with junk while
// clients contend for a lock. docs/chaos.md, "Eviction", has the figures
// and the commands.

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestChaosEviction runs five local redis-server processes, of which three
// (a majority) have maxmemory 3mb and the policy under test, while a junk
// writer on each of the three fills it with 64 KB values and four workers
// contend for one key with a 500 ms ttl, each holder keeping its lock for
// its whole validity (holdLoad). A lock key evicted from the three nodes
// lets a contender take them while the holder still counts on them.
//
// Lock keys carry a ttl, so every volatile-* policy may evict them as well
// as every allkeys-* one: volatile-ttl takes them first (their ttl is the
// shortest), and with junk that has no ttl, volatile-lru, -lfu and -random
// have nothing else to take. Only noeviction keeps them: writes fail with
// OOM instead, an error reply never counts as agreement, and a lock that
// cannot be stored is not granted. The checker must find violations under
// every evicting policy and none under noeviction, where the run must also
// show OOM refusals and keep granting locks while the junk writer makes
// room now and then.
func TestChaosEviction(t *testing.T) {
	t.Parallel() // chaosStart says why
	// chaosStart's first step; this test starts its servers itself.
	stalls.watch(t)
	cases := []struct {
		policy  string
		junkTTL bool // junk keys get a 1 h ttl, so they are volatile too
	}{
		{policy: "noeviction"},
		{policy: "allkeys-lru"},
		{policy: "allkeys-lfu"},
		{policy: "allkeys-random"},
		{policy: "volatile-lru"},
		{policy: "volatile-lru", junkTTL: true},
		{policy: "volatile-lfu"},
		{policy: "volatile-random"},
		{policy: "volatile-ttl", junkTTL: true},
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (junk writers' pauses)", seed)
	for _, tc := range cases {
		name := tc.policy
		if tc.junkTTL {
			name += ", junk with ttl"
		}
		t.Run(name, func(t *testing.T) {
			chaosEvictionRun(t, tc.policy, tc.junkTTL, seed)
		})
	}
}

// chaosPressured is how many of the five nodes are under memory pressure: a
// majority, so that a lock key evicted from them no longer has one.
const chaosPressured = 3

func chaosEvictionRun(t *testing.T, policy string, junkTTL bool, seed uint64) {
	const (
		ttl         = 500 * time.Millisecond
		workers     = 4
		nodeTimeout = 100 * time.Millisecond
		tries       = 20
		retryMin    = 20 * time.Millisecond
		retryMax    = 40 * time.Millisecond
		minCycles   = 10 // noeviction: hand-overs required
		limit       = 20 * time.Second
	)
	safe := policy == "noeviction"
	pressured := []string{"--maxmemory", "3mb", "--maxmemory-policy", policy}
	addrs := make([]string, 5)
	for i := range addrs {
		var s *redistest.Server
		if i < chaosPressured {
			s = redistest.Start(t, pressured...)
		} else {
			s = redistest.Start(t)
		}
		addrs[i] = s.Addr
	}
	var oom atomic.Int64 // lock commands refused with OOM
	pools := realPools(t, addrs)
	for i, p := range pools {
		pools[i] = chaosOOMCounter{Pool: p, oom: &oom}
	}
	client, err := redlock.New(pools, redlock.WithNodeTimeout(nodeTimeout), redlock.WithTries(tries),
		redlock.WithRetryDelay(retryMin, retryMax))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	ld := &holdLoad{
		client:     client,
		key:        "chaos:eviction",
		ttl:        ttl,
		lockBudget: chaosLockBudget(tries, false, nodeTimeout, retryMax),
		check:      newChaosChecker(),
	}

	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	junk := make([]*chaosJunk, chaosPressured)
	junkDone := make(chan error, chaosPressured)
	for i := range junk {
		junk[i] = &chaosJunk{conn: realConn(t, addrs[i]), ttl: junkTTL, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		go func() { junkDone <- junk[i].run(ctx) }()
	}
	start := time.Now()
	wait := ld.start(ctx, workers)
	defer wait()
	defer cancel()

	enough := realEventually(limit, func() bool {
		if safe {
			return ctx.Err() != nil || ld.cycles.Load() >= minCycles && oom.Load() > 0
		}
		return ctx.Err() != nil || ld.check.violationCount() > 0
	})
	cancel()
	wait()
	for range junk {
		if err := <-junkDone; err != nil {
			t.Errorf("junk writer: %v", err)
		}
	}
	elapsed := time.Since(start)

	var evicted []int64
	for i := range chaosPressured {
		evicted = append(evicted, chaosInfoInt(t, addrs[i], "evicted_keys"))
	}
	var writes, ooms []int64
	for _, j := range junk {
		writes = append(writes, j.writes.Load())
		ooms = append(ooms, j.ooms.Load())
	}
	t.Logf("%s: %v; junk writes %v, junk OOM refusals %v, evicted keys %v on the pressured nodes; %d lock commands refused with OOM",
		policy, elapsed.Round(100*time.Millisecond), writes, ooms, evicted, oom.Load())
	violations := ld.finish(t)

	if safe {
		if len(violations) > 0 {
			t.Errorf("%d mutual exclusion violations under noeviction:\n%s", len(violations), chaosReport(violations))
		}
		for i, n := range evicted {
			if n != 0 {
				t.Errorf("node %d evicted %d keys under noeviction", i, n)
			}
		}
		if oom.Load() == 0 {
			t.Errorf("no lock command was refused with OOM: the nodes were never full")
		}
		if !enough || ld.cycles.Load() < minCycles {
			t.Errorf("liveness: %d hand-overs in %v, want %d", ld.cycles.Load(), elapsed, minCycles)
		}
		return
	}
	if len(violations) == 0 {
		t.Errorf("%s evicted %v keys, yet the checker found no second holder in %d cycles",
			policy, evicted, ld.cycles.Load())
		return
	}
	t.Logf("as expected, %d violations, first: %s", len(violations), violations[0])
}

// A chaosOOMCounter is a Pool that counts the OOM error replies its master
// sends back.
type chaosOOMCounter struct {
	redlock.Pool
	oom *atomic.Int64
}

func (p chaosOOMCounter) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	err := p.Pool.Exec(ctx, cmds, replies)
	if err == nil {
		for _, r := range replies {
			var rerr driver.ReplyError
			if errors.As(r.Err, &rerr) && rerr.Code() == "OOM" {
				p.oom.Add(1)
			}
		}
	}
	return err
}

// A chaosJunk fills one node with 64 KB values, one every 2 ms, each read
// once after it is written, as a cache's entries are. When the node refuses
// a write with OOM (noeviction, or a volatile-* policy with nothing
// volatile left), the node is full: for 20 to 200 ms the writer keeps it
// full with 256-byte values, one a millisecond while they are refused and
// one after another while they find room (Redis shrinks a client's query
// buffer once the big writes stop, which makes room; at one a millisecond
// they did not always fill it again, and in two runs of the whole suite no
// lock command met a full node in 20 s). Then it deletes the older half of its keys and leaves that room for 20 to
// 200 ms before it fills the node again. Lock commands are refused with OOM
// while a node is full and accepted while it has room.
type chaosJunk struct {
	conn redis.Conn
	ttl  bool
	rng  *rand.Rand

	writes, ooms atomic.Int64
}

var (
	chaosJunkBig   = strings.Repeat("j", 64<<10)
	chaosJunkSmall = strings.Repeat("j", 256)
)

func (j *chaosJunk) run(ctx context.Context) error {
	oldest, next := 0, 0 // junk:oldest .. junk:next-1 may exist
	pause := func() time.Duration {
		return 20*time.Millisecond + time.Duration(j.rng.Int64N(int64(180*time.Millisecond)))
	}
	// set writes the next junk key and reports whether the node was full.
	set := func(value string) (full bool, err error) {
		key := "junk:" + strconv.Itoa(next)
		args := []any{key, value}
		if j.ttl {
			args = append(args, "EX", 3600)
		}
		_, err = j.conn.Do("SET", args...)
		var rerr redis.Error
		if errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "OOM") {
			j.ooms.Add(1)
			return true, nil
		}
		if err != nil {
			return false, err
		}
		j.writes.Add(1)
		next++
		// Read it once: under LFU, a key read once is as warm as a lock key
		// that one contender has tried.
		_, err = j.conn.Do("GET", key)
		return false, err
	}
	for ctx.Err() == nil {
		full, err := set(chaosJunkBig)
		if err != nil {
			return err
		}
		if !full {
			sleepCtx(ctx, 2*time.Millisecond)
			continue
		}
		for end := time.Now().Add(pause()); ctx.Err() == nil && time.Now().Before(end); {
			full, err := set(chaosJunkSmall)
			if err != nil {
				return err
			}
			if full {
				sleepCtx(ctx, time.Millisecond)
			} // else there was room: fill it again at once
		}
		for mid := oldest + (next-oldest)/2; oldest < mid; oldest++ {
			if _, err := j.conn.Do("DEL", "junk:"+strconv.Itoa(oldest)); err != nil {
				return err
			}
		}
		sleepCtx(ctx, pause())
	}
	return nil
}

// chaosInfoInt returns an integer field of the node's INFO.
func chaosInfoInt(t *testing.T, addr, field string) int64 {
	t.Helper()
	info, err := redis.String(realConn(t, addr).Do("INFO"))
	if err != nil {
		t.Fatalf("INFO on %s: %v", addr, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s on %s: %q", field, addr, v)
			}
			return n
		}
	}
	t.Fatalf("INFO on %s has no %s", addr, field)
	return 0
}

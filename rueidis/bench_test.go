package rueidis_test

// The batching benchmark behind the package doc's choice: the core already
// groups concurrent callers' commands into batches per key lane, so Exec
// could send a batch by DoMulti (one write, replies in order), or command by
// command and leave the merging to rueidis's auto-pipelining. Run with
//
//	go test -run '^$' -bench Batching -count 6 .
//
// It needs redis-server on PATH and skips without it.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/benchkit"
	"github.com/quorumlock/redlock/internal/redistest"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// doEach sends a batch one command after another by Client.Do: a round
// trip each, merged with other lanes' commands by auto-pipelining.
type doEach struct{ *redlockrueidis.Pool }

func (p doEach) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for i := range cmds {
		if err := p.Pool.Exec(ctx, cmds[i:i+1], replies[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// doConcurrent sends each command of a batch by Client.Do on a goroutine
// of its own, for auto-pipelining to merge. It does not keep the batch's
// order, which the port requires: a reference, not a candidate.
type doConcurrent struct{ *redlockrueidis.Pool }

func (p doConcurrent) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if len(cmds) == 1 {
		return p.Pool.Exec(ctx, cmds, replies)
	}
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Pool.Exec(ctx, cmds[i:i+1], replies[i:i+1])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// counting counts Execs and commands, to report the mean batch size.
type counting struct {
	redlock.Pool
	execs, cmds *atomic.Int64
}

func (p counting) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.execs.Add(1)
	p.cmds.Add(int64(len(cmds)))
	return p.Pool.Exec(ctx, cmds, replies)
}

func BenchmarkBatching(b *testing.B) {
	if ok, why := redistest.Available(); !ok {
		b.Skip("no Redis nodes to benchmark against: " + why)
	}
	servers := redistest.StartN(b, 3)
	clients := func(b *testing.B, opt rueidis.ClientOption) []*redlockrueidis.Pool {
		pools := make([]*redlockrueidis.Pool, len(servers))
		for i, s := range servers {
			opt := opt
			opt.InitAddress = []string{s.Addr}
			opt.ForceSingleClient, opt.DisableCache = true, true
			c, err := rueidis.NewClient(opt)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			pools[i] = redlockrueidis.NewPool(c)
		}
		return pools
	}
	impls := []struct {
		name string
		opt  rueidis.ClientOption
		wrap func(*redlockrueidis.Pool) redlock.Pool
	}{
		{"domulti", rueidis.ClientOption{}, func(p *redlockrueidis.Pool) redlock.Pool { return p }},
		{"doeach", rueidis.ClientOption{}, func(p *redlockrueidis.Pool) redlock.Pool { return doEach{p} }},
		{"concurrent", rueidis.ClientOption{}, func(p *redlockrueidis.Pool) redlock.Pool { return doConcurrent{p} }},
		{"domulti-noautopipe", rueidis.ClientOption{DisableAutoPipelining: true}, func(p *redlockrueidis.Pool) redlock.Pool { return p }},
	}
	for _, par := range []int{0, 1, 8, 64} {
		for _, impl := range impls {
			case_ := "serial"
			if par > 0 {
				case_ = fmt.Sprintf("p=%d", par)
			}
			b.Run(fmt.Sprintf("%s/impl=%s", case_, impl.name), func(b *testing.B) {
				var execs, cmds atomic.Int64
				var pools []redlock.Pool
				for _, p := range clients(b, impl.opt) {
					pools = append(pools, counting{impl.wrap(p), &execs, &cmds})
				}
				c, err := redlock.New(pools)
				if err != nil {
					b.Fatal(err)
				}
				op := func(ctx context.Context, key string) error {
					l, err := c.TryLock(ctx, key, 10*time.Second)
					if err != nil {
						return err
					}
					return l.Unlock(ctx)
				}
				if par == 0 {
					benchkit.Serial(b, op)
				} else {
					benchkit.Parallel(b, op, par)
				}
				if n := execs.Load(); n > 0 {
					b.ReportMetric(float64(cmds.Load())/float64(n), "cmds/exec")
				}
			})
		}
	}
}

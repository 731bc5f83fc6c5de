package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/progress"
)

// Timing of the waiting line of run --wait.
const (
	waitShowAfter = 300 * time.Millisecond // a lock taken at once shows nothing
	waitRefresh   = time.Second            // one GET and PTTL per node per refresh
)

// A waitLine shows on a terminal that run --wait is waiting for the lock,
// for how long, and on which holder: one line, rewritten in place, read from
// the nodes with GET and PTTL through the run's own pools, each call bounded
// by the node timeout. It shows a prefix of the holder's token only (as
// status does): the whole token would let its reader release the lock.
type waitLine struct {
	w           io.Writer
	key         string
	wait        time.Duration
	pools       []redlock.Pool
	nodeTimeout time.Duration
	now         func() time.Time
	start       time.Time
	drawn       bool
}

// newWaitLine returns a waitLine writing to w if w is a terminal, and nil
// (nothing to show) otherwise: a cron log wants no progress line.
func newWaitLine(w io.Writer, cfg *runConfig, pools []redlock.Pool) *waitLine {
	f, ok := w.(*os.File)
	if !ok || !progress.IsTerminal(f) {
		return nil
	}
	return &waitLine{w: w, key: cfg.keyPrefix + cfg.key, wait: cfg.wait, pools: pools, nodeTimeout: cfg.nodeTimeout, now: time.Now, start: time.Now()}
}

// show refreshes the line until the returned stop is called, then erases
// it. stop waits for a refresh in flight, so that nothing is written after
// it returns; it is safe to call more than once. A nil waitLine shows
// nothing.
func (l *waitLine) show(ctx context.Context) (stop func()) {
	if l == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(waitShowAfter)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.refresh(ctx)
				t.Reset(waitRefresh)
			case <-ctx.Done():
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if l.drawn {
				io.WriteString(l.w, "\r\x1b[K")
			}
		})
	}
}

// refresh reads the holder and redraws the line.
func (l *waitLine) refresh(ctx context.Context) {
	line := l.line(ctx)
	if ctx.Err() != nil {
		return // stopped while reading: the lock is ours, or the wait is over
	}
	io.WriteString(l.w, "\r"+line+"\x1b[K")
	l.drawn = true
}

// line reads the key on every node and describes the wait.
func (l *waitLine) line(ctx context.Context) string {
	waited := l.now().Sub(l.start).Round(time.Second)
	return fmt.Sprintf("redlock run: waiting %v of %v for %q: %s", waited, l.wait, l.key, describeHolder(readHolder(ctx, l.pools, l.key, l.nodeTimeout)))
}

// readHolder reads the key and its ttl on every node at once, each node
// bounded by timeout.
func readHolder(ctx context.Context, pools []redlock.Pool, key string, timeout time.Duration) []keyStatus {
	out := make([]keyStatus, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			cmds := []driver.Command{
				{Name: "GET", Args: []any{key}, NumKeys: 1},
				{Name: "PTTL", Args: []any{key}, NumKeys: 1},
			}
			replies := make([]driver.Reply, len(cmds))
			s := &out[i]
			if s.err = p.Exec(ctx, cmds, replies); s.err != nil {
				return
			}
			v, err := replyValue(replies[0])
			if err != nil {
				s.err = err
				return
			}
			if v != nil {
				s.held, s.token = true, asString(v)
			}
			if v, err := replyValue(replies[1]); err != nil {
				s.ttlErr = err
			} else if ms, ok := v.(int64); ok {
				s.pttl = ms
			} else {
				s.ttlErr = fmt.Errorf("unexpected reply to PTTL: %v", v)
			}
		})
	}
	wg.Wait()
	return out
}

// describeHolder says who holds the key by the quorum rule, as status does,
// and for how long the holder's keys stand on a majority at most: the
// quorum-th longest remaining ttl among the nodes that hold its token.
func describeHolder(nodes []keyStatus) string {
	v := judge(nodes)
	switch v.kind {
	case verdictFree:
		return "free now, trying"
	case verdictUnknown:
		return fmt.Sprintf("holder unknown, %d of %d nodes did not answer", v.silent, v.n)
	case verdictSplit:
		return fmt.Sprintf("no token on a majority (%d of %d nodes hold one): an acquisition in progress, or keys left behind", v.holders, v.n)
	}
	var ttls []int64
	for _, s := range nodes {
		if s.err == nil && s.held && s.token == v.token && s.ttlErr == nil && s.pttl >= 0 {
			ttls = append(ttls, s.pttl)
		}
	}
	ttl := "ttl unknown"
	if len(ttls) >= v.quorum {
		slices.Sort(ttls)
		slices.Reverse(ttls)
		ttl = "ttl " + (time.Duration(ttls[v.quorum-1]) * time.Millisecond).Round(100*time.Millisecond).String()
	}
	return fmt.Sprintf("held by %s on %d of %d nodes, %s", tokenPrefix(v.token), v.count, v.n, ttl)
}

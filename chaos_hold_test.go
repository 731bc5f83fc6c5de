package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// A holdLoad is a set of workers contending for one key where every holder
// keeps its lock for the whole validity and never releases it, as a holder
// that needs all of its lease (or dies holding it) may. Each lock therefore
// ends only when its keys leave a majority of the nodes: by expiry, which
// the clock tests speed up, or by eviction. Contenders retry every few
// milliseconds, so a key that leaves a majority early is taken at once and
// the chaosChecker sees two holders.
//
// chaosLoad releases at once and so cannot expose keys that vanish early:
// the release would remove them first.
//
// A holder leaves its critical section only once Until has passed, so that
// the checker covers the whole validity window; the checker's summary
// therefore counts every cycle as an overrun.
type holdLoad struct {
	client     *redlock.Client
	key        string
	ttl        time.Duration
	lockBudget time.Duration
	check      *chaosChecker

	cycles, lockFails atomic.Int64
	maxLock           atomic.Int64 // nanoseconds

	mu         sync.Mutex
	unexpected []string
	causes     map[string]int // node failures by Redis error code, "other" for the rest
}

// holdLastWrite is how long before Until a holder makes its last write to
// the guarded resource.
const holdLastWrite = time.Millisecond

// start runs workers until ctx ends and returns a function that waits for
// them.
func (ld *holdLoad) start(ctx context.Context, workers int) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ld.worker(ctx, w)
		}()
	}
	return wg.Wait
}

func (ld *holdLoad) worker(ctx context.Context, id int) {
	for ctx.Err() == nil {
		var l *redlock.Lock
		var err error
		d := realTimed(func() { l, err = ld.client.Lock(ctx, ld.key, ld.ttl) })
		chaosRaise(&ld.maxLock, d)
		if d > ld.lockBudget {
			ld.unexpectedf("Lock took %v, more than its bound %v", d, ld.lockBudget)
		}
		if err != nil {
			ld.lockFails.Add(1)
			if !errors.Is(err, redlock.ErrNotObtained) {
				ld.unexpectedf("Lock: %v", err)
			}
			ld.noteCauses(err)
			continue
		}

		h := ld.check.enter(id, l)
		ld.check.write(h)
		sleepCtx(ctx, time.Until(l.Until())-holdLastWrite)
		if time.Now().Before(l.Until()) {
			ld.check.write(h)
		}
		sleepCtx(ctx, time.Until(l.Until()))
		ld.check.exit(h)
		ld.cycles.Add(1)
	}
}

// noteCauses counts the per-node causes in a failed Lock by Redis error
// code ("OOM", "NOSCRIPT"...), or "other" for failures that are not error
// replies: timeouts, broken connections.
func (ld *holdLoad) noteCauses(err error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.causes == nil {
		ld.causes = map[string]int{}
	}
	for _, cause := range realNodeErrors(err) {
		var rerr driver.ReplyError
		code := "other"
		if errors.As(cause, &rerr) {
			code = rerr.Code()
		}
		ld.causes[code]++
	}
}

func (ld *holdLoad) unexpectedf(format string, args ...any) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.unexpected = append(ld.unexpected, fmt.Sprintf(format, args...))
}

// finish logs the figures, fails t on any unexpected result, and returns the
// checker's violations for the caller to judge.
func (ld *holdLoad) finish(t *testing.T) []string {
	t.Helper()
	violations := ld.check.finish()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	t.Logf("%d cycles, %d failed locks (node failures by code: %v); max Lock %v (bound %v); checker: %s",
		ld.cycles.Load(), ld.lockFails.Load(), ld.causes,
		time.Duration(ld.maxLock.Load()).Round(time.Millisecond), ld.lockBudget, ld.check.summary())
	if len(ld.unexpected) > 0 {
		t.Errorf("%d unexpected results:\n%s", len(ld.unexpected), chaosReport(ld.unexpected))
	}
	return violations
}

// violationCount returns how many violations the checker has found so far,
// before the interval check that finish adds.
func (c *chaosChecker) violationCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.violations)
}

// chaosRaise keeps the larger of max and d in max.
func chaosRaise(max *atomic.Int64, d time.Duration) {
	for {
		old := max.Load()
		if int64(d) <= old || max.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

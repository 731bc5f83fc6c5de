package bench

import (
	"context"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestRedsyncFrozenNodeWithoutReadTimeout records what redsync does when one
// of five nodes freezes and its pools have redigo's defaults, which set no
// read timeout: redsync's redigo adapter passes its context only to the
// pool's GetContext, so nothing bounds the wait for the reply. The test
// waits a bounded time, then stops the frozen node to release it.
func TestRedsyncFrozenNodeWithoutReadTimeout(t *testing.T) {
	addrs := startNodes(t, 4)
	frozen := redistest.StartFrozen(t)
	pools := []*redis.Pool{}
	for _, a := range append([]string{frozen.Addr()}, addrs...) {
		pools = append(pools, &redis.Pool{
			MaxIdle: 8,
			DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", a)
			},
		})
	}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	rs := newRedsyncOn(pools)

	const wait = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait/3)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		m := rs.NewMutex("frozen:unbounded", redsync.WithExpiry(ttl), redsync.WithTries(1))
		done <- m.LockContext(ctx)
	}()
	select {
	case err := <-done:
		t.Logf("redsync returned after %v: %v", time.Since(start), err)
	case <-time.After(wait):
		t.Logf("redsync Lock still blocked after %v, its context expired %v ago; stopping the frozen node", wait, wait-wait/3)
		frozen.Stop()
		select {
		case err := <-done:
			t.Logf("redsync returned %v after the frozen node was stopped: %v", time.Since(start).Round(time.Millisecond), err)
		case <-time.After(wait):
			t.Errorf("redsync still blocked %v after the frozen node was stopped", wait)
		}
	}
}

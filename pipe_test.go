package redlock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// countingPool counts the batches sent through a Pool.
type countingPool struct {
	Pool
	mu      sync.Mutex
	borrows int
}

func (p *countingPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.mu.Lock()
	p.borrows++
	p.mu.Unlock()
	return p.Pool.Exec(ctx, cmds, replies)
}

func cmd(name string, args ...any) driver.Command { return driver.Command{Name: name, Args: args} }

// Every concurrent caller gets its own reply, in batches that share
// connections.
func TestPipeRepliesReachTheirCallers(t *testing.T) {
	s := redistest.Start(t)
	rp := redigo.NewPool(s.Addr)
	defer rp.Close()
	pool := &countingPool{Pool: rp}
	n := newNode(0, pool)

	const callers, rounds = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				want := strconv.Itoa(g) + ":" + strconv.Itoa(r)
				reply, err := n.command(context.Background(), time.Now().Add(time.Second), cmd("ECHO", want))
				if got, _ := reply.(string); err != nil || got != want {
					errs <- errors.New("ECHO " + want + " got " + got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if pool.borrows >= callers*rounds {
		t.Errorf("%d borrows for %d commands: no batching", pool.borrows, callers*rounds)
	}
	t.Logf("%d commands in %d batches", callers*rounds, pool.borrows)
}

// An error reply goes to its own caller only.
func TestPipeErrorReplyStaysWithItsCall(t *testing.T) {
	s := redistest.Start(t)
	rp := redigo.NewPool(s.Addr)
	defer rp.Close()
	n := newNode(0, rp)

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Second)
			if g%2 == 0 {
				_, err := n.command(context.Background(), deadline, cmd("NOSUCHCOMMAND"))
				if replyCode(err) != "ERR" {
					t.Errorf("bad command: err = %v, want a ReplyError", err)
				}
				return
			}
			if reply, err := n.command(context.Background(), deadline, cmd("PING")); reply != "PONG" || err != nil {
				t.Errorf("PING = %q, %v", reply, err)
			}
		}()
	}
	wg.Wait()
}

// A node that never answers fails every queued command at its deadline, and
// no caller hangs.
func TestPipeFrozenNodeFailsEveryCallInTime(t *testing.T) {
	rp := redigo.NewPool(redistest.StartFrozen(t).Addr())
	defer rp.Close()
	n := newNode(3, rp)

	const timeout = 50 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := n.command(context.Background(), time.Now().Add(timeout), cmd("PING"))
			var nerr *NodeError
			if !errors.As(err, &nerr) || nerr.Node != 3 || nerr.Addr != rp.Addr || !errors.Is(err, ErrNodeTimeout) {
				t.Errorf("err = %v, want a NodeError for node 3 at %s with ErrNodeTimeout", err, rp.Addr)
			}
		}()
	}
	wg.Wait()
	// At most the batch ahead and the caller's own, each one timeout.
	if d := time.Since(start); d > 2*timeout+50*time.Millisecond {
		t.Errorf("callers returned after %v, want at most about %v", d, 2*timeout)
	}
}

// A command whose deadline has passed is not sent.
func TestPipeSkipsExpiredCalls(t *testing.T) {
	pool := &countingPool{Pool: failingPool{}}
	n := newNode(0, pool)
	_, err := n.command(context.Background(), time.Now().Add(-time.Millisecond), cmd("PING"))
	if !errors.Is(err, ErrNodeTimeout) {
		t.Errorf("err = %v, want ErrNodeTimeout", err)
	}
	if pool.borrows != 0 {
		t.Errorf("%d borrows for an expired command, want 0", pool.borrows)
	}
}

type failingPool struct{}

func (failingPool) Exec(context.Context, []driver.Command, []driver.Reply) error {
	return errors.New("no connection")
}

// hangingPool never answers and ignores ctx, until released.
type hangingPool struct{ release chan struct{} }

func (p hangingPool) Exec(context.Context, []driver.Command, []driver.Reply) error {
	<-p.release
	return errors.New("released")
}

// The coordinator bounds every round by the node timeout even when a Pool
// ignores ctx, and a minority of such nodes delays no one.
func TestRoundBoundedWhenPoolIgnoresContext(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	hang := hangingPool{release: make(chan struct{})}
	defer close(hang.release)
	p1, p2 := redigo.NewPool(s1.Addr), redigo.NewPool(s2.Addr)
	defer p1.Close()
	defer p2.Close()
	const timeout = 100 * time.Millisecond

	for _, tc := range []struct {
		name  string
		pools []Pool
		won   bool
	}{
		{"minority hangs", []Pool{p1, hang, p2}, true},
		{"majority hangs", []Pool{p1, hang, &hangingPool{release: hang.release}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.pools, WithNodeTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l, err := c.TryLock(context.Background(), "k:"+tc.name, time.Second)
			d := time.Since(start)
			if tc.won {
				if err != nil {
					t.Fatalf("TryLock: %v", err)
				}
				if d > timeout/2 {
					t.Errorf("took %v: waited for the hanging node", d)
				}
				if err := l.Unlock(context.Background()); err != nil {
					t.Errorf("Unlock: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNodeTimeout) || !errors.Is(err, ErrNotObtained) {
				t.Errorf("err = %v, want ErrNotObtained with ErrNodeTimeout", err)
			}
			// One node timeout for the attempt, one for the undo, and
			// generous slack for a loaded machine running -race. Without
			// the coordinator's own bound the call would hang until the
			// test released the pool.
			if d < timeout || d > 2*timeout+500*time.Millisecond {
				t.Errorf("took %v, want between %v and about %v", d, timeout, 2*timeout)
			}
		})
	}
}

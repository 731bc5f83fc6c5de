package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/redigo"
)

// TestMain fails the run if any test leaves a goroutine behind. Node calls
// that Redlock stopped waiting for end within their node timeout, so the
// check's retries (up to a few seconds) cover them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A fault is how a faultPool misbehaves.
type fault int32

const (
	healthy    fault = iota
	failing          // GetContext fails at once: a node that is down
	hanging          // GetContext blocks until its context ends
	stuck            // GetContext ignores its context and blocks until the test ends
	lostReply        // commands run on the node, but the reply is lost
	errorReply       // the node answers every command with an error reply
)

var (
	errNodeDown  = errors.New("test: node down")
	errLostReply = errors.New("test: reply lost")
)

// A faultPool wraps a real pool and injects one fault at a time. It counts
// the batches sent through it, so tests can assert that no call was made.
type faultPool struct {
	inner   redlock.Pool
	fault   atomic.Int32
	gets    atomic.Int32
	thaw    chan struct{}                    // closed when the test ends; releases stuck calls
	before  atomic.Pointer[func()]           // if set, runs at the start of every Exec
	afterDo atomic.Pointer[func(cmd string)] // if set, runs for each command once its batch is answered
}

// onGet and onDone set the hooks. They are atomic, because node calls left in
// the background by an earlier operation may be reading them.
func (p *faultPool) onGet(f func())            { p.before.Store(&f) }
func (p *faultPool) onDone(f func(cmd string)) { p.afterDo.Store(&f) }

func (p *faultPool) set(f fault) { p.fault.Store(int32(f)) }

func (p *faultPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.gets.Add(1)
	if f := p.before.Load(); f != nil {
		(*f)()
	}
	switch fault(p.fault.Load()) {
	case failing:
		return errNodeDown
	case hanging:
		<-ctx.Done()
		return ctx.Err()
	case stuck:
		<-p.thaw
		return errNodeDown
	case lostReply: // the node runs the commands, and the replies are lost
		if err := p.inner.Exec(ctx, cmds, replies); err != nil {
			return err
		}
		return errLostReply
	case errorReply:
		// Like redigo, which returns an error reply as both a value and an
		// error: the value must not count.
		e := redis.Error("NOPERM this user has no permissions to run this command")
		for i := range replies {
			replies[i] = driver.Reply{Value: e, Err: driver.ReplyError(e)}
		}
		return nil
	}
	err := p.inner.Exec(ctx, cmds, replies)
	if after := p.afterDo.Load(); after != nil && err == nil {
		for _, c := range cmds {
			(*after)(c.Name)
		}
	}
	return err
}

// A cluster is n in-process Redis nodes (miniredis), each behind a faultPool.
type cluster struct {
	nodes   []*miniredis.Miniredis
	pools   []*faultPool
	clients []*redlock.Client // made by client, for settle
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{}
	// Cleanups run last-in first-out: release stuck calls, then wait for
	// every node call to end, so that none outlives the test.
	t.Cleanup(func() { c.settle(t) })
	thaw := make(chan struct{})
	t.Cleanup(func() { close(thaw) })
	for range n {
		m := miniredis.RunT(t)
		pool := redigo.NewPool(m.Addr())
		t.Cleanup(func() { pool.Close() })
		c.nodes = append(c.nodes, m)
		c.pools = append(c.pools, &faultPool{inner: pool, thaw: thaw})
	}
	return c
}

// client returns a Client over every node of the cluster. Unless opts say
// otherwise, it uses a node timeout generous enough for a loaded race-enabled
// run and short retry delays.
func (c *cluster) client(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]redlock.Pool, len(c.pools))
	for i, p := range c.pools {
		pools[i] = p
	}
	defaults := []redlock.Option{
		redlock.WithNodeTimeout(2 * time.Second),
		redlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond),
	}
	client, err := redlock.New(pools, append(defaults, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.clients = append(c.clients, client)
	return client
}

// values returns what key holds on each node, "" where it is absent.
func (c *cluster) values(key string) []string {
	vals := make([]string, len(c.nodes))
	for i, m := range c.nodes {
		vals[i], _ = m.Get(key)
	}
	return vals
}

// count returns on how many nodes key holds value.
func (c *cluster) count(key, value string) int {
	n := 0
	for _, v := range c.values(key) {
		if v == value {
			n++
		}
	}
	return n
}

// settle waits until no node call of the cluster's clients is running. Lock,
// Extend and Unlock return on a majority and let the other nodes finish in
// the background; tests that inspect every node wait for those first. It
// must not be used while a node is stuck.
func (c *cluster) settle(t testing.TB) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		for _, client := range c.clients {
			redlock.Settle(client)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("node calls still running after 10s")
	}
}

// gets returns the number of connections asked of all pools so far.
func (c *cluster) gets() int {
	n := 0
	for _, p := range c.pools {
		n += int(p.gets.Load())
	}
	return n
}

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// nodeErrors returns the nodes named by the *NodeErrors inside err whose cause
// matches target (any cause if target is nil).
func nodeErrors(err, target error) map[int]bool {
	nodes := map[int]bool{}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		var ne *redlock.NodeError
		if errors.As(e, &ne) && e == error(ne) {
			if target == nil || errors.Is(ne.Err, target) {
				nodes[ne.Node] = true
			}
			return
		}
		switch u := e.(type) {
		case interface{ WrappedErrors() []error }:
			for _, w := range u.WrappedErrors() {
				walk(w)
			}
		case interface{ Unwrap() []error }:
			for _, w := range u.Unwrap() {
				walk(w)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return nodes
}

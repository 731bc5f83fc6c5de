package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/redigo"
)

// Ping reports every node, bounded by the node timeout even when a node
// hangs, and says how far the deployment is from losing its quorum.
func TestPing(t *testing.T) {
	c := newCluster(t, 5)
	const timeout = 200 * time.Millisecond
	client := c.client(t, redlock.WithNodeTimeout(timeout))
	h, err := client.Ping(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 5, h.Up)
	assert.Equal(t, 2, h.Spare())
	assert.False(t, h.Degraded())

	c.pools[1].set(failing)
	c.pools[3].set(hanging)
	start := time.Now()
	h, err = client.Ping(context.Background())
	d := time.Since(start)
	require.NoError(t, err)
	assert.Less(t, d, timeout+500*time.Millisecond, "Ping waited past the node timeout")
	assert.Equal(t, 3, h.Up)
	assert.Equal(t, 0, h.Spare(), "three of five up survive no further failure")
	assert.True(t, h.Degraded())
	for i, n := range h.Nodes {
		assert.Equal(t, i, n.Node)
		switch i {
		case 1:
			assert.ErrorIs(t, n.Err, errNodeDown)
		case 3:
			assert.ErrorIs(t, n.Err, redlock.ErrNodeTimeout)
		default:
			assert.NoError(t, n.Err, "node %d", i)
		}
	}
	assert.Contains(t, h.String(), "3 of 5 nodes up, quorum 3, 0 more may fail")

	_, err = client.Ping(nil) //nolint:staticcheck
	assert.ErrorIs(t, err, redlock.ErrInvalid)

	// A node that has not answered when the caller's ctx ends is reported
	// with ctx's error, not as a node timeout: the node did not time out,
	// the caller stopped waiting (before the fix: ErrNodeTimeout).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	h, err = client.Ping(ctx)
	require.NoError(t, err)
	assert.ErrorIs(t, h.Nodes[3].Err, context.DeadlineExceeded, "the hanging node, with ctx's deadline: %v", h.Nodes[3].Err)
	assert.NotErrorIs(t, h.Nodes[3].Err, redlock.ErrNodeTimeout)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	h, err = client.Ping(cancelled)
	require.NoError(t, err)
	for _, i := range []int{0, 2, 3, 4} { // node 1 may have answered that it is down
		if err := h.Nodes[i].Err; err != nil {
			assert.ErrorIs(t, err, context.Canceled, "node %d with an ended ctx", i)
		}
	}
}

// Close waits for the releases that Unlock left running, so that a program
// that exits right after Unlock leaves no key behind, and then refuses new
// locks.
func TestCloseWaitsForBackgroundReleases(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithNodeTimeout(2*time.Second))
	l, err := client.TryLock(context.Background(), "close", time.Minute)
	require.NoError(t, err)
	c.settle(t)

	slow := make(chan struct{})
	c.pools[2].onGet(func() { <-slow }) // node 2's release waits
	require.NoError(t, l.Unlock(context.Background()), "Unlock returns on the majority")
	assert.Equal(t, l.Value(), c.values("close")[2], "node 2 released before its turn")

	closed := make(chan error, 1)
	go func() { closed <- client.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a release was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(slow)
	require.NoError(t, <-closed)
	assert.Equal(t, []string{"", "", ""}, c.values("close"), "a release was still running when Close returned")

	_, err = client.TryLock(context.Background(), "after", time.Second)
	assert.ErrorIs(t, err, redlock.ErrClosed)
	assert.Contains(t, err.Error(), "closed")
	require.NoError(t, client.Close(), "a second Close")
}

// Close gives up after one node timeout when a call does not end.
func TestCloseIsBounded(t *testing.T) {
	c := newCluster(t, 3)
	const timeout = 100 * time.Millisecond
	client := c.client(t, redlock.WithNodeTimeout(timeout))
	l, err := client.TryLock(context.Background(), "bounded", time.Minute)
	require.NoError(t, err)
	c.pools[2].set(stuck) // ignores its context until the test ends
	require.NoError(t, l.Unlock(context.Background()))
	start := time.Now()
	err = client.Close()
	assert.True(t, errors.Is(err, redlock.ErrNodeTimeout), "Close = %v, want ErrNodeTimeout", err)
	assert.Less(t, time.Since(start), 3*timeout+500*time.Millisecond, "Close's bound: three node timeouts")
}

// pingGate holds each batch that carries a PING until release is closed,
// and then tells errs whether the batch's context had ended.
type pingGate struct {
	redlock.Pool
	entered chan struct{}
	release chan struct{}
	errs    chan error
}

func (p *pingGate) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for _, c := range cmds {
		if c.Name == "PING" {
			p.entered <- struct{}{}
			<-p.release
			p.errs <- ctx.Err()
			break
		}
	}
	return p.Pool.Exec(ctx, cmds, replies)
}

// A Ping whose caller stopped waiting leaves its PINGs' context live until
// their deadline: a PING still queued in its node's pipe may lead a batch
// of other callers' commands, which go out under the leader's context, and
// a driver that honours cancellation (rueidis, go-redis) would not send
// them. (Ping cancelled that context as it returned.)
func TestPingAbandonedKeepsItsCommandsContext(t *testing.T) {
	m := miniredis.RunT(t)
	inner := redigo.NewPool(m.Addr())
	defer inner.Close()
	p := &pingGate{Pool: inner, entered: make(chan struct{}, 1), release: make(chan struct{}), errs: make(chan error, 1)}
	c, err := redlock.New([]redlock.Pool{p}, redlock.WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		_, _ = c.Ping(ctx)
	}()
	select {
	case <-p.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the PING did not reach the pool")
	}
	cancel()
	select {
	case <-pinged: // Ping returned: its caller stopped waiting
	case <-time.After(10 * time.Second):
		t.Fatal("Ping did not return once its ctx ended")
	}
	close(p.release)
	if err := <-p.errs; err != nil {
		t.Errorf("the PING's batch went to the pool with its context ended (%v) once Ping had returned", err)
	}
}

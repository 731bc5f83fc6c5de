package redlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// A Health is the state of a Client's nodes, as Ping found them.
type Health struct {
	Nodes  []NodeHealth // one per node, in the order of the pools given to New
	Quorum int          // nodes a lock needs, N/2+1
	Up     int          // nodes that answered PING
}

// NodeHealth is one node's answer to Ping.
type NodeHealth struct {
	Node    int           // index of the node's pool
	Addr    string        // the node's address, if its Pool is a driver.Namer
	Latency time.Duration // from sending PING to its answer, or to the failure
	Err     error         // nil if the node answered PONG; else a *NodeError
}

// Spare returns how many more nodes may fail before no lock can be granted:
// Up − Quorum. A negative value means the quorum is already lost; 0 means
// the deployment survives no further failure.
func (h Health) Spare() int { return h.Up - h.Quorum }

// Degraded reports whether some node did not answer, so that the deployment
// tolerates fewer failures than it was built for.
func (h Health) Degraded() bool { return h.Up < len(h.Nodes) }

func (h Health) String() string {
	return fmt.Sprintf("%d of %d nodes up, quorum %d, %d more may fail", h.Up, len(h.Nodes), h.Quorum, max(h.Spare(), 0))
}

// Ping sends PING to every node in parallel and reports each node's answer.
// Each node has the node timeout, or until ctx's deadline if that is sooner;
// a node that has not answered by then counts as failed with ErrNodeTimeout,
// or with ctx's error if ctx has ended (the caller stopped waiting; the
// node may be fine), so Ping takes at most one node timeout whatever the
// nodes do.
//
// Ping reports node failures in the Health, not as an error: its error is
// non-nil only for a nil ctx or a nil or zero Client (ErrInvalid), or a
// closed Client (ErrClosed). Use Health.Spare to see how far a deployment
// is from losing its quorum.
func (c *Client) Ping(ctx context.Context) (Health, error) {
	if err := c.usable(); err != nil {
		return Health{}, err
	}
	if ctx == nil {
		return Health{}, invalid("nil context")
	}
	if err := c.closedErr(); err != nil {
		return Health{}, err
	}
	h := Health{Nodes: make([]NodeHealth, len(c.nodes)), Quorum: c.quorum}
	deadline := c.nodeDeadline(ctx)
	// The PINGs' context ends at the deadline, or once the last has
	// returned: not when Ping returns because ctx ended. A PING still queued
	// in its node's pipe may lead a batch of other callers' commands, which
	// go out under the leader's context (pipe.go), and a driver that honours
	// its cancellation would not send them.
	opCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	var left atomic.Int32
	left.Store(int32(len(c.nodes)))
	end := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	answers := make(chan NodeHealth, len(c.nodes))
	c.calls.Add(len(c.nodes))
	start := time.Now()
	for _, nd := range c.nodes {
		go func() {
			defer c.calls.Done()
			defer end()
			reply, err := nd.command(opCtx, deadline, driver.Command{Name: "PING"})
			if err == nil && reply != "PONG" {
				err = nd.nodeError(fmt.Errorf("redlock: unexpected reply %v to PING", reply))
			}
			answers <- NodeHealth{Node: nd.index, Addr: nd.name, Latency: time.Since(start), Err: err}
		}()
	}
	answered := make([]bool, len(c.nodes))
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for range c.nodes {
		select {
		case a := <-answers:
			h.Nodes[a.Node], answered[a.Node] = a, true
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	// A node still silent when the caller's ctx ended did not time out: the
	// caller stopped waiting, and its health says so with ctx's error.
	silent := ErrNodeTimeout
	if err := ctxEnded(ctx); err != nil {
		silent = err
	}
	for i, nd := range c.nodes {
		if !answered[i] {
			h.Nodes[i] = NodeHealth{Node: i, Addr: nd.name, Latency: time.Since(start), Err: nd.nodeError(silent)}
		}
		if h.Nodes[i].Err == nil {
			h.Up++
		}
	}
	return h, nil
}

// Close closes the Client and ends what runs on it:
//   - calls that wait (Lock, the RWMutex's and the Semaphore's acquisitions,
//     Campaign) return at once, with an error wrapping ErrClosed and the
//     last attempt's causes (an RWMutex's waiter once it has removed its
//     wait mark, within a node timeout); an attempt in flight ends by its
//     node deadline, and if it wins, what it acquired is released;
//   - leaderships resign (their Done closes, Err wraps ErrClosed and
//     ErrLockLost) and Do loops stop extending, cancel fn's context with
//     that cause and release their lock or permit, all at once; a
//     leadership whose Resign has begun is left to that Resign, whose
//     release Close waits for as for a node call;
//   - every later call returns an error wrapping ErrClosed, Ping included,
//     except Unlock, Release and Resign, which still send their release:
//     nothing a closed Client held stays behind by its fault.
//
// Close then waits for the node calls that are still running, including
// those no caller waits for (the releases Unlock left for slow nodes), and
// for the acquisitions to return (one won just before Close began is
// released first), so that a program that exits right after Close leaves
// no key behind; an acquisition that had not yet sent its round when Close
// began sends nothing.
// Close returns within three node timeouts. Ordinarily it takes two at
// most: the releases it sends, and the calls in flight, end within one; the
// undo of an attempt that those calls lose, within one more. An RWMutex's
// waiting Lock or RLock then removes its wait mark from the nodes (it would
// hold readers back for its whole ttl otherwise), within a third; and the
// simulation (faulty links, paused processes) sees a mutex's calls outlast
// two in some schedules, so three is the bound Close keeps. If calls are
// still running then, it returns an error wrapping ErrNodeTimeout;
// otherwise nil; called from an Observer's KindNode event, or a
// KindSettled one reported from a node call, it always waits out the bound
// (observe.Observer), and so it does from a token function or
// RetryStrategy that an RWMutex's waiting Lock or RLock is running. Close
// does not close the pools: they belong to the caller. It is safe to call
// more than once; a nil or zero Client returns an error wrapping
// ErrInvalid.
func (c *Client) Close() error {
	// closeTimeouts is Close's bound in node timeouts: an attempt in
	// flight, its undo, and an RW waiter's removal of its wait mark.
	const closeTimeouts = 3
	if err := c.usable(); err != nil {
		return err
	}
	limit := closeTimeouts * c.nodeTimeout
	deadline := time.Now().Add(limit)
	c.startClose()
	if c.wake != nil && !c.wake.close(max(time.Until(deadline), 0)) {
		return fmt.Errorf("%w: release subscriptions still open after %v", ErrNodeTimeout, limit)
	}
	if !c.calls.wait(max(time.Until(deadline), 0)) {
		return fmt.Errorf("%w: node calls still running after %v", ErrNodeTimeout, limit)
	}
	return nil
}

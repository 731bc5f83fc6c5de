package redlock

import (
	"context"
	"errors"
	"fmt"
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
// so Ping takes at most one node timeout whatever the nodes do.
//
// Ping reports node failures in the Health, not as an error: its error is
// non-nil only for a nil ctx (ErrInvalid). Use Health.Spare to see how far a
// deployment is from losing its quorum.
func (c *Client) Ping(ctx context.Context) (Health, error) {
	if ctx == nil {
		return Health{}, invalid("nil context")
	}
	h := Health{Nodes: make([]NodeHealth, len(c.nodes)), Quorum: c.quorum}
	deadline := c.nodeDeadline(ctx)
	opCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	answers := make(chan NodeHealth, len(c.nodes))
	c.calls.Add(len(c.nodes))
	start := time.Now()
	for _, nd := range c.nodes {
		go func() {
			defer c.calls.Done()
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
	for i, nd := range c.nodes {
		if !answered[i] {
			h.Nodes[i] = NodeHealth{Node: i, Addr: nd.name, Latency: time.Since(start), Err: nd.nodeError(ErrNodeTimeout)}
		}
		if h.Nodes[i].Err == nil {
			h.Up++
		}
	}
	return h, nil
}

// Close waits for the node calls that are still running in the background,
// at most one node timeout, and then marks the client closed: Lock, TryLock
// and Do return an error wrapping ErrInvalid from then on. Extend and Unlock
// of locks already held still work.
//
// Unlock returns once a majority has answered and leaves the other releases
// to finish in the background; a program that exits right after Unlock
// (a cron job, the redlock command) should Close first, or its key stays on
// those nodes for a whole ttl. Close does not close the pools: they belong
// to the caller. It returns an error wrapping ErrNodeTimeout if calls were
// still running when it stopped waiting, and nil otherwise; it is safe to
// call more than once.
func (c *Client) Close() error {
	c.closed.Store(true)
	if c.wake != nil && !c.wake.close(c.nodeTimeout) {
		return fmt.Errorf("%w: release subscriptions still open after %v", ErrNodeTimeout, c.nodeTimeout)
	}
	if !c.calls.wait(c.nodeTimeout) {
		return fmt.Errorf("%w: node calls still running after %v", ErrNodeTimeout, c.nodeTimeout)
	}
	return nil
}

var errClosed = errors.New("the client is closed")

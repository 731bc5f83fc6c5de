package redlock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// noticeVoters are the Clients whose woken attempts count announcements as
// votes (unsafeNoticeVotes).
var noticeVoters sync.Map // *Client → struct{}

// unsafeNoticeVotes makes c's woken attempts count the nodes that announced
// a release as votes, whatever they answer: the unsafe variant that
// TestSimulationCatchesNoticeVotes shows the checker catching. It goes
// through the engine's test hook (testHookWokenOp), so that production code
// carries no unsafe switch.
func unsafeNoticeVotes(t testing.TB, c *Client) {
	noticeVoters.Store(c, struct{}{})
	t.Cleanup(func() { noticeVoters.Delete(c) })
	hook := func(c *Client, announced uint64) func(nodeOp) nodeOp {
		if _, ok := noticeVoters.Load(c); !ok || announced == 0 {
			return nil
		}
		return func(op nodeOp) nodeOp { return presume(op, announced) }
	}
	testHookWokenOp.Store(&hook)
}

// presume is op, with the nodes in votes agreeing whatever they answer.
func presume(op nodeOp, votes uint64) nodeOp {
	return func(ctx context.Context, n *node, deadline time.Time) (bool, error) {
		ok, err := op(ctx, n, deadline)
		if votes&(1<<n.index) != 0 {
			return true, nil
		}
		return ok, err
	}
}

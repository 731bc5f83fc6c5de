package redlock

import (
	"context"
	"time"
)

// The inline round: one node, whose Pool keeps its deadlines.
//
// fanout waits for the nodes from the caller's goroutine while their ops run
// elsewhere (a goroutine per node, or a batch's goroutine in the node's
// pipe), so that it can stop waiting for a node at the deadline whatever the
// node's Pool does. With one node (N=1,
// the most common deployment) that goroutine is the whole cost of the
// coordinator at low concurrency: a fresh stack that grows on the first
// command, and two wake-ups per round, one to start it and one to hand its
// ballot back. When the Pool declares that it returns by its context's
// deadline (DeadlineHonorer), the core's own timer adds nothing: the op ends
// by the deadline anyway. So the caller runs the op itself.
//
// Everything else is the fan-out contract (fanout):
//   - The op gets the same context: ctx's values, detached from ctx's
//     cancellation, ending at the node deadline. A command is never torn
//     down mid-reply because its caller stopped waiting, so that other
//     callers whose commands share its batch (pipe.go) are not failed by it.
//   - observe.Observer events, masks (answer, then settle), the test hook and
//     Close's count of node calls are as for a node goroutine.
//   - A lost round undoes its node if it agreed or failed (or always with
//     r.undoAll), with a fresh node timeout that survives ctx's
//     cancellation, before fanout returns; r.lost runs first.
//   - A won round whose node was overtaken (r.overtaken) undoes it in the
//     background, as a late answer would.
//   - A ctx that ended during the round makes it lost with ctx.Err()
//     among the causes, as when fanout stops waiting.
//
// The one difference: the caller sees ctx's cancellation once the op has
// returned, that is by the node deadline (ctx's own deadline, if sooner, is
// the node deadline), rather than at once. With the default node timeout
// that is at most 50 ms.
//
// The node deadline holds for the caller even when its command queues
// behind another caller's batch in the node's pipe: on the sole inline
// node, a queued command leaves the queue, or stops waiting for a batch
// with a later deadline, at its own deadline (pipe.go, node.sole).
func (c *Client) fanoutInline(ctx context.Context, r round, t tally) (won bool, _ tally) {
	nd := c.nodes[0]
	deadline := c.nodeDeadline(ctx)
	opCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()

	c.calls.Add(1)
	if hook := testHookNodeStart.Load(); hook != nil {
		(*hook)(c, nd.index)
	}
	var began time.Time
	if c.obs != nil {
		began = time.Now()
	}
	yes, err := r.op(opCtx, nd, deadline)
	if r.masks != nil {
		r.masks.answer(nd.index, yes, 1)
	}
	if c.obs != nil {
		c.observeNode(opCtx, r.id, r.key, r.kind, nd, yes, err, time.Since(began))
	}
	if r.masks != nil {
		r.masks.settle() // every node has answered
	}
	c.calls.Done()
	vote := ballot{node: nd.index, yes: yes, err: err}
	if err == nil && !time.Now().Before(deadline) {
		// An answer after the deadline: fanout would have stopped waiting
		// and counted the node as timed out.
		vote = ballot{node: nd.index, err: nd.nodeError(ErrNodeTimeout)}
	}
	t.add(vote)

	won = t.yes >= t.quorum
	if err := ctxEnded(ctx); err != nil {
		// fanout stops waiting when ctx ends: a round whose ctx ended
		// before the answer is lost, even if the node agreed.
		won = false
		t.causes = append(t.causes, err)
	}
	if won && r.valid != nil && !r.valid() {
		won, t.late = false, true
	}
	if won && c.wonAfterClose(r) {
		won, t.closed = false, true
	}
	if r.undo == nil {
		return won, t
	}
	if won {
		if (yes || err != nil) && r.overtaken != nil && r.overtaken.overtakenAt(nd.index) {
			c.calls.Add(1)
			go func() {
				defer c.calls.Done()
				c.undoLate(ctx, r, nd)
			}()
		}
		return won, t
	}
	if r.lost != nil {
		r.lost()
	}
	if yes || err != nil || r.undoAll {
		undoDeadline := time.Now().Add(c.nodeTimeout)
		undoCtx, cancelUndo := context.WithDeadline(context.WithoutCancel(ctx), undoDeadline)
		defer cancelUndo()
		c.calls.Add(1)
		r.undo(undoCtx, nd, undoDeadline)
		c.calls.Done()
	}
	return won, t
}

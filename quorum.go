package redlock

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/observe"
)

// quorum is the majority of n nodes, n/2+1 (step 2). For an even n it is more
// than half: N=4 needs 3 and so tolerates one failed node, like N=3.
func quorum(n int) int { return n/2 + 1 }

// A nodeOp is one node's part of an operation: it sends one command, at most
// until deadline, and reports whether the node agreed.
type nodeOp func(ctx context.Context, n *node, deadline time.Time) (bool, error)

// A round is one operation sent to every node.
type round struct {
	op nodeOp

	// need is how many nodes must agree for the round to be won; 0 means
	// the Client's majority. Primitives other than the mutex set it (a
	// semaphore's quorum is larger than a majority).
	need int

	// For the observe.Observer (observer.go) and Lock.Held: what the round is, and
	// the nodes that agreed and that answered, stragglers too.
	kind  observe.Op
	key   string
	id    uint64 // the call's ID, for its events
	masks *nodeMasks

	// undo, if set, runs after a lost round on every node that may hold
	// state from op: nodes that agreed, failed or timed out, or were still in
	// flight. A node that refused without error holds nothing of ours, because
	// every acquisition uses a fresh token; with undoAll, undo runs on it too
	// (fencing's round 2, whose refusals say nothing of round 1's SETs).
	undo    nodeOp
	undoAll bool

	// async, if set, is op as one command and the reading of its reply,
	// which fanout hands to a node's pipe without a goroutine waiting for
	// it (pool.go, asyncOp); it must do what op does. Nodes with
	// WithReplicaAcks, and every node while a test hook holds node starts,
	// run op instead.
	async *asyncOp

	// lost, if set, runs when the round is lost, before any undo is sent.
	lost func()

	// valid, if set, is checked once a majority agreed; if it reports false
	// the round is lost (step 3: a majority that answers after the validity
	// window closed does not count).
	valid func() bool

	// overtaken, if set, reports whether the caller has since sent node a
	// command that went ahead of this round's op (an Unlock whose release
	// entered the node's pipe before this round's SET did). After a won
	// round, such a node runs undo itself once its op returns, so that a SET
	// landing after the release leaves no orphan key (a SET whose reply
	// timed out may still land later: docs/algorithm.md).
	overtaken overtaker

	// detached says that fanout's ctx is already context.WithoutCancel's
	// (releaseRound): the ops' context (opsContext) takes its values as
	// they are, without a second wrapping.
	detached bool
}

// nodeMasks records which nodes answered a round, and which of them agreed.
// With report or after set, it runs them once the round is both won and
// answered by every node: settle is called once for each, and the second
// call runs them, whichever comes first. after is the engine's own work
// (it may start node calls, counted among Close's); report tells the
// Observer.
type nodeMasks struct {
	agreed, answered atomic.Uint64
	settled          atomic.Int32
	after            func()
	report           func()
}

// answer records node's answer. It reports whether this answer was the
// last of n nodes' (each node answers once).
func (m *nodeMasks) answer(node int, yes bool, n int) (last bool) {
	if yes {
		m.agreed.Or(1 << node)
	}
	bit := uint64(1) << node
	before := m.answered.Or(bit)
	return before&bit == 0 && before|bit == 1<<n-1
}

func (m *nodeMasks) settle() {
	if m.settled.Add(1) == 2 {
		if m.after != nil {
			m.after()
		}
		if m.report != nil {
			m.report()
		}
	}
}

// settleWon is an acquisition's settle of a won round's masks, on the
// caller's goroutine, inside an attempt of acquireLoop, which holds a count
// among Close's calls. If it is the second settle, it reports KindSettled
// to the Observer with that count let go, as the loop's own reports let it
// go: Close called from that event must not wait for its own call. after
// runs first, with the count held, so that the node calls it starts are
// counted before the loop's count is let go.
func (c *Client) settleWon(m *nodeMasks) {
	if m.settled.Add(1) != 2 {
		return
	}
	if m.after != nil {
		m.after()
	}
	if m.report != nil {
		c.calls.Done()
		defer c.calls.Add(1)
		m.report()
	}
}

// An overtaker is told of a won round's nodes whose op returns late; a *Lock
// is one (Lock.overtakenAt). An interface, not a func, so that passing the
// Lock costs no allocation.
type overtaker interface {
	overtakenAt(node int) bool
}

// testHookNodeStart, if set, runs at the start of each node's goroutine in a
// round. Tests use it to hold a node's op back.
var testHookNodeStart atomic.Pointer[func(c *Client, node int)]

// A pendingNode is a node's answer, kept for what follows the verdict.
type pendingNode struct {
	nd        *node
	yes       bool
	err       error
	overtaken bool
	unsent    bool // the op's command never went out (its deadline passed in the queue)
}

// A ballot is one node's answer.
type ballot struct {
	node int
	yes  bool
	err  error
}

// A tally counts ballots toward a majority.
type tally struct {
	n, quorum int
	yes, no   int     // no counts refusals, failures and timeouts
	failed    int     // the part of no that failed or timed out
	late      bool    // a majority agreed but valid reported false
	closed    bool    // a majority agreed to an acquisition after Close began
	causes    []error // one *NodeError per failed node, then ctx.Err()
}

func (t *tally) add(b ballot) {
	if b.yes {
		t.yes++
		return
	}
	t.no++
	if b.err != nil {
		t.failed++
		t.causes = append(t.causes, b.err)
	}
}

// refused returns how many nodes answered no without failing.
func (t *tally) refused() int { return t.no - t.failed }

// lost reports whether the refusals alone prove that fewer than a majority
// of nodes hold the key: more than N − quorum of them answered that it is
// gone or another token's.
func (t *tally) lost() bool { return t.refused() > t.n-t.quorum }

// decided reports whether the outcome is known: a majority agreed, or so many
// nodes said no that a majority is out of reach (more than n − quorum).
func (t *tally) decided() bool {
	return t.yes >= t.quorum || t.no > t.n-t.quorum
}

// err describes a lost round: sentinel, the counts, and every cause.
func (t *tally) err(sentinel error) error {
	summary := fmt.Errorf("%w: %d agreed, %d refused, %d failed of %d nodes; %d needed",
		sentinel, t.yes, t.no-t.failed, t.failed, t.n, t.quorum)
	if t.late {
		summary = fmt.Errorf("%w: a majority agreed only after the validity window closed", sentinel)
	}
	if t.closed {
		summary = fmt.Errorf("%w: a majority agreed after Close began (%w), and the attempt was released", sentinel, ErrClosed)
	}
	// Node errors in node order, then anything else (ctx.Err()).
	slices.SortStableFunc(t.causes, func(a, b error) int { return causeOrder(a) - causeOrder(b) })
	return aggregate(summary, t.causes)
}

func causeOrder(err error) int {
	if ne, ok := err.(*NodeError); ok {
		return ne.Node
	}
	return math.MaxInt32
}

// fanout sends r.op to every node in parallel and counts the answers. A
// node's op runs on a goroutine of its own, or, for a round with r.async,
// waits in the node's pipe with no goroutine (fan.answer; pipe.go).
//
//   - Each node has until the deadline: now plus the node timeout, or ctx's
//     deadline if that is sooner. A node that has not answered by then counts
//     as a failure with ErrNodeTimeout.
//   - It returns won as soon as a majority agreed and r.valid holds, without
//     waiting for the other nodes (step 2).
//   - It returns lost as soon as a majority is impossible: more than
//     N − quorum nodes refused, failed or timed out. A majority for which
//     r.valid reports false is lost too (step 3), and so is an
//     acquisition's or its fencing round's (an r.undo set) once Close has
//     begun: it is undone while Close still waits for it (wonAfterClose).
//   - It returns lost when ctx ends, with ctx.Err() among the causes; a lost
//     round whose ctx has ended by the time the vote stops has ctx.Err()
//     among its causes too, even if the node deadline fired first. If ctx
//     has already ended, it sends nothing; with r.undoAll, it still runs
//     r.lost and then r.undo on every node, as for any lost round.
//   - Nodes still in flight when it returns go on in the background until the
//     deadline; their answers are dropped. This is what lets a frozen node
//     delay no one. A later command to such a node (an Unlock right after a
//     Lock) queues behind the one in flight, in the node's pipe, so it cannot
//     overtake it; and an op that had not reached the pipe yet when that
//     command did runs r.undo itself once it returns (r.overtaken), so that
//     no orphan key is left either way, short of a timed-out SET that
//     reaches the node late (docs/algorithm.md bounds that case).
//   - After a lost round with r.undo set, each node that may hold state runs
//     r.undo (step 4). A node still in flight runs it once its op returns
//     (for an async op, on a goroutine started then), so the undo follows
//     the op. The undo has a fresh
//     node timeout that survives ctx's cancellation, and fanout waits for it,
//     at most that long, before returning; the error then counts every
//     node's answer, including those that came after the verdict. A node
//     whose op returns after that gets a node timeout of its own for the
//     undo, in the background. With r.undoAll, every node runs r.undo; r.lost
//     runs once, before any undo is sent.
//
// A round therefore takes at most one node timeout, plus one more for the
// undo of a lost acquisition.
//
// A round of one node whose Pool honours its deadlines runs on the caller's
// goroutine instead (fanoutInline), under the same rules but one: ctx's
// cancellation is seen once the node's op returns, by the node deadline.
func (c *Client) fanout(ctx context.Context, r round) (won bool, t tally) {
	n := len(c.nodes)
	t = tally{n: n, quorum: c.quorum}
	if r.need > 0 {
		t.quorum = r.need
	}
	if err := ctx.Err(); err != nil {
		t.causes = append(t.causes, err)
		if r.undoAll {
			// Nothing sent, but the nodes may hold an earlier round's state
			// (fencing's round 1 SETs): a lost round must still release it.
			c.undoEvery(ctx, r)
		}
		return false, t
	}
	if r.kind == observe.OpAcquire || r.kind == observe.OpFence {
		// An acquisition (or its fencing round) that Close has overtaken
		// sends nothing. Counted before closed is read: either this sees
		// Close, or Close, which sets closed and then waits for the count,
		// waits for this round (and its node calls, counted before this
		// count ends). Without it an attempt that passed its caller's
		// check of closed (making its token, say) sent its round after
		// Close had returned.
		c.calls.Add(1)
		defer c.calls.Done()
		if c.closed.Load() {
			t.causes = append(t.causes, errClosedBeforeSend)
			if r.undoAll {
				c.undoEvery(ctx, r) // an earlier round's state, as above
			}
			return false, t
		}
	}
	if n == 1 && c.nodes[0].inline {
		return c.fanoutInline(ctx, r, t) // no goroutine: see inline.go
	}

	deadline := c.nodeDeadline(ctx)
	f := &fan{c: c, r: r, ctx: ctx, deadline: deadline}
	// Detached from ctx's cancellation, so that in-flight commands are not
	// torn down mid-reply when the caller stops waiting: their connections
	// stay usable, and the undo can follow them. It ends at the deadline, or
	// once every op has returned and sent its ballot.
	f.ops.start(ctx, deadline, r.detached, &c.expiry)
	f.running.Store(int32(n))
	f.pending = f.pendBuf[:0]
	f.votes = f.voteBuf[:0]
	f.ready = make(chan struct{}, 1)
	f.n, f.quorum = int32(n), int32(t.quorum)
	f.decided, f.undone = undoChans(r, n)
	if testHookNodeStart.Load() == nil {
		f.async = r.async
	}
	if c.obs != nil {
		f.began = time.Now()
	}

	c.calls.Add(n)
	for _, nd := range c.nodes {
		if f.async != nil && nd.acks == 0 && !(f.async.get && nd.noGet.Load()) {
			nd.submit(&f.ops, deadline, f.async, f)
			continue
		}
		go f.run(nd)
	}

	var answered uint64 // a bit per node (at most 64, as nodeMasks)
	count := func(b ballot) {
		if bit := uint64(1) << b.node; answered&bit == 0 { // a node counted as timed out may answer later
			answered |= bit
			t.add(b)
		}
	}
	// take counts the ballots cast since the last take, in order; with
	// untilDecided, only until the round is decided (the rest wait for a
	// later take).
	taken := 0
	take := func(untilDecided bool) {
		f.mu.Lock()
		cast := f.votes[taken:]
		f.mu.Unlock()
		for _, b := range cast {
			if untilDecided && t.decided() {
				break
			}
			count(b)
			taken++
		}
	}
vote:
	for !t.decided() {
		select {
		case <-f.ready:
			// The ballots cast so far may decide the round (fan.returned).
			take(true)
		case <-f.ops.done:
			// The deadline passed, or every node answered: the last op to
			// return ends ops after sending its ballot. Count what was
			// sent, then the silent nodes as timed out.
			take(true)
			for i := range n {
				if !t.decided() {
					count(ballot{node: i, err: c.nodes[i].nodeError(ErrNodeTimeout)})
				}
			}
		case <-ctx.Done():
			t.causes = append(t.causes, ctx.Err())
			break vote
		}
	}
	won = t.yes >= t.quorum // false if ctx ended first: the vote stops short of a majority
	if won && r.valid != nil && !r.valid() {
		won, t.late = false, true
	}
	if won && c.wonAfterClose(r) {
		won, t.closed = false, true
	}
	if err := ctxEnded(ctx); !won && err != nil && !slices.Contains(t.causes, err) {
		// ctx's deadline and the node deadline are often the same instant;
		// whichever fired first, the caller's ctx.Err() stays reachable.
		t.causes = append(t.causes, err)
	}
	if r.undo == nil {
		return won, t
	}

	f.lost = !won
	if f.lost {
		if r.lost != nil {
			r.lost()
		}
		f.undoDeadline = time.Now().Add(c.nodeTimeout)
		var cancelUndo context.CancelFunc
		f.undoCtx, cancelUndo = context.WithDeadline(context.WithoutCancel(ctx), f.undoDeadline)
		defer cancelUndo()
	}
	f.mu.Lock()
	f.isDecided = true
	pending := f.pending
	f.pending = nil
	f.mu.Unlock()
	close(f.decided)
	for _, p := range pending {
		f.dispatch(p)
	}
	if !f.lost {
		return won, t
	}
	for range n {
		select {
		case <-f.undone:
		case <-f.undoCtx.Done(): // the undo deadline
			return won, t
		}
	}
	// Every node has answered by now; count the answers that came after the
	// verdict, so that the error names every node that failed.
	take(false)
	return won, t
}

// wonAfterClose reports whether r, a round just won, is an acquisition's
// (its SETs, or fencing's second round) that Close has overtaken: it is
// then lost, and undone. fanout counts such a round among the calls that
// Close waits for until it returns (on one inline node too, whose call's
// own count ends before the verdict), so the undo is sent and answered
// before Close returns. Left to the caller once fanout has returned (as
// it was), the release could come after Close, finding no call running,
// had returned, and a program exiting then left the key for its ttl.
// (acquireLoop lets go an acquisition won just before Close began that it
// finds closed, counted among Close's calls too.)
func (c *Client) wonAfterClose(r round) bool {
	return (r.kind == observe.OpAcquire || r.kind == observe.OpFence) && r.undo != nil && c.closed.Load()
}

// errClosedBeforeSend is the cause of an acquisition round that Close
// overtook before it sent anything (fanout).
var errClosedBeforeSend = fmt.Errorf("%w: the attempt was not sent", ErrClosed)

// A fan is one round of fanout, as the nodes' parts share it. A node's
// part runs on a goroutine of its own (run), or, for a round with an
// asyncOp, without one: the op waits in the node's pipe, and answer runs on
// the goroutine that carried its batch.
type fan struct {
	c        *Client
	r        round
	async    *asyncOp // r.async, unless a test hook holds node starts
	ctx      context.Context
	deadline time.Time
	began    time.Time // when the async ops went out, for the Observer

	running atomic.Int32 // ops not yet returned; the last to return ends ops
	ops     opsContext   // the context of its node ops
	// The ballots cast are in votes, in order, under mu. ready tells the
	// vote that they may decide the round: it is woken once or twice per
	// round rather than once per node. yes and no count the ballots cast,
	// toward n and quorum.
	ready     chan struct{}
	yes, no   atomic.Int32
	n, quorum int32
	decided   chan struct{} // closed once the verdict is set (rounds with an undo)
	undone    chan struct{} // a node's part after the verdict is done

	// The verdict, set before decided is closed and isDecided is set.
	lost         bool
	undoCtx      context.Context
	undoDeadline time.Time

	// Async ops that returned before the verdict wait for it here, under
	// mu (rounds with an undo only); isDecided is set under mu.
	mu        sync.Mutex
	votes     []ballot
	voteBuf   [7]ballot // votes' storage, for up to 7 nodes
	isDecided bool
	pending   []pendingNode
	pendBuf   [7]pendingNode // pending's storage, for up to 7 nodes
}

// run is node nd's part on a goroutine of its own.
func (f *fan) run(nd *node) {
	defer f.c.calls.Done()
	if hook := testHookNodeStart.Load(); hook != nil {
		(*hook)(f.c, nd.index)
	}
	var began time.Time
	if f.c.obs != nil {
		began = time.Now()
	}
	f.opThen(nd, began)
}

// opThen runs the op on nd, then what follows it, waiting for the verdict.
func (f *fan) opThen(nd *node, began time.Time) {
	yes, err := f.r.op(&f.ops, nd, f.deadline)
	var took time.Duration
	if f.c.obs != nil {
		took = time.Since(began)
	}
	overtaken := f.returned(nd, yes, err, took)
	if f.r.undo == nil {
		return
	}
	<-f.decided
	f.afterVerdict(pendingNode{nd, yes, err, overtaken, false})
}

// answer is an async op's part once its batch has been answered, on the
// goroutine that carried it (pipe.run): it must not wait. With an Observer,
// the rest of the node's part runs on a goroutine of its own, as it did
// when every node had one: that goroutine may carry a batch for many
// callers, and Observe, called for each of them in turn, would delay the
// ballots of those later in the batch by every earlier caller's Observe
// (TestSlowObserverDelaysOnlyItsOwnRound).
func (f *fan) answer(cl *call) {
	nd := cl.node
	reply, err := nd.result(cl)
	unsent := cl.late
	nd.pipe.recycle(cl)
	if f.c.obs != nil {
		took := time.Since(f.began) // the node's latency, not the hand-off's
		go f.answered(nd, reply, err, took, unsent)
		return
	}
	f.answered(nd, reply, err, 0, unsent)
}

// answered is the rest of an async op's part: the reading of its reply, the
// ballot, and what follows the verdict. took is the node's latency, for the
// Observer. unsent: the command never went out, so the node holds nothing
// of it and needs no undo (under overload, undoing SETs that were never
// sent would double the load that made them late).
func (f *fan) answered(nd *node, reply any, err error, took time.Duration, unsent bool) {
	yes, err, retry := f.async.read(nd, reply, err, f.deadline)
	if retry { // the op instead, on a goroutine of its own
		go func() {
			defer f.c.calls.Done()
			f.opThen(nd, f.began)
		}()
		return
	}
	overtaken := f.returned(nd, yes, err, took)
	if f.r.undo == nil {
		f.c.calls.Done()
		return
	}
	p := pendingNode{nd, yes, err, overtaken, unsent}
	f.mu.Lock()
	if !f.isDecided {
		f.pending = append(f.pending, p)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.dispatch(p)
}

// returned is a node's part once its op has returned, until its ballot is
// cast; it reports whether a release went ahead of the op. took is the op's
// latency, for the Observer.
func (f *fan) returned(nd *node, yes bool, err error, took time.Duration) (overtaken bool) {
	r := &f.r
	// Whether a release may have gone ahead of the op is judged as it
	// returns: a resend after NOSCRIPT that returned before the lock was
	// let go landed before any release was sent, even if this node's part
	// reaches the verdict only after Unlock began.
	overtaken = r.overtaken != nil && r.overtaken.overtakenAt(nd.index)
	last := r.masks != nil && r.masks.answer(nd.index, yes, int(f.n))
	if f.c.obs != nil {
		f.c.observeNode(&f.ops, r.id, r.key, r.kind, nd, yes, err, took)
	}
	if last {
		// Every node has answered. Settled before the ballot, so that
		// when this ballot decides the round the caller settles second,
		// and reports the round on its own goroutine (observe.Observer:
		// Close called from that KindSettled returns at once).
		r.masks.settle()
	}
	f.mu.Lock()
	f.votes = append(f.votes, ballot{node: nd.index, yes: yes, err: err})
	f.mu.Unlock()
	var ayes, nos int32
	if yes {
		ayes, nos = f.yes.Add(1), f.no.Load()
	} else {
		ayes, nos = f.yes.Load(), f.no.Add(1)
	}
	if ayes >= f.quorum || nos > f.n-f.quorum { // as tally.decided
		select {
		case f.ready <- struct{}{}:
		default: // the vote has been told already, and will drain
		}
	}
	if f.running.Add(-1) == 0 {
		f.ops.end(endCanceled) // after the ballot: see the count in fanout
	}
	return overtaken
}

// needsUndo reports whether a node's part must run r.undo, given the
// verdict: after a lost round, a node that may hold state; after a won
// one, a node a release went ahead of.
func (f *fan) needsUndo(p pendingNode) bool {
	if p.unsent && !f.r.undoAll {
		return false
	}
	if f.lost {
		return p.yes || p.err != nil || f.r.undoAll
	}
	return (p.yes || p.err != nil) && p.overtaken
}

// afterVerdict is a node's part once the verdict is known: the undo, if
// it needs one, with the round's undo deadline, or with one of its own if
// that has passed or the round was won.
func (f *fan) afterVerdict(p pendingNode) {
	switch {
	case !f.needsUndo(p):
	case f.lost && time.Now().Before(f.undoDeadline):
		f.r.undo(f.undoCtx, p.nd, f.undoDeadline)
	default:
		f.c.undoLate(f.ctx, f.r, p.nd)
	}
	f.undone <- struct{}{}
}

// dispatch runs an async op's afterVerdict, on a goroutine of its own if
// it sends an undo: the caller may be carrying the node's batches.
func (f *fan) dispatch(p pendingNode) {
	if !f.needsUndo(p) {
		f.undone <- struct{}{}
		f.c.calls.Done()
		return
	}
	go func() {
		defer f.c.calls.Done()
		f.afterVerdict(p)
	}()
}

// ctxEnded returns ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed even if ctx's own timer has not fired yet.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// undoChans makes the channels by which a round with an undo tells its node
// goroutines the verdict (decided is closed once it is set) and learns that
// they are done (undone).
func undoChans(r round, n int) (decided, undone chan struct{}) {
	if r.undo == nil {
		return nil, nil
	}
	return make(chan struct{}), make(chan struct{}, n)
}

// nodeDeadline is when each node's part of a round ends: now plus the node
// timeout, or ctx's deadline if that is sooner.
func (c *Client) nodeDeadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(c.nodeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		return d
	}
	return deadline
}

// undoEvery runs r.lost, then r.undo on every node in parallel with a fresh
// node timeout that survives ctx's cancellation, and waits for them at most
// that long.
func (c *Client) undoEvery(ctx context.Context, r round) {
	if r.lost != nil {
		r.lost()
	}
	deadline := time.Now().Add(c.nodeTimeout)
	undoCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	undone := make(chan struct{}, len(c.nodes))
	c.calls.Add(len(c.nodes))
	for _, nd := range c.nodes {
		go func() {
			defer c.calls.Done()
			r.undo(undoCtx, nd, deadline)
			undone <- struct{}{}
		}()
	}
	for range c.nodes {
		select {
		case <-undone:
		case <-undoCtx.Done():
			return
		}
	}
}

// undoLate runs r.undo on a node whose op finished after the caller had
// already let go of a won round; no one waits for it.
func (c *Client) undoLate(ctx context.Context, r round, nd *node) {
	deadline := time.Now().Add(c.nodeTimeout)
	undoCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	r.undo(undoCtx, nd, deadline)
}

// An opsContext is a round's context for its node ops (fan.ops): what
// context.WithDeadline(context.WithoutCancel(ctx), deadline) makes, ctx's
// values without its cancellation or its Cause, ending at the deadline or
// when end is called, but built into the fan. The standard pair cost six
// allocations a round, 12 of a Lock+Unlock's 35 at 64 callers; this costs
// three, or four if ctx may carry a cancellation.
//
// A context derived from it (context.WithDeadline in node.acked, a
// driver's context.WithTimeout while it dials) registers with AfterFunc,
// as it would with the standard one, rather than costing a goroutine that
// watches Done. It holds the whole fan: a driver or Observer that kept it
// past the call would keep the round's state too.
type opsContext struct {
	values   context.Context // ctx without its cancellation: Cause is o's, not ctx's
	deadline time.Time
	done     chan struct{}
	ended    atomic.Int32 // why it ended, set once before done is closed: endCanceled or endDeadline

	// What ends it at the deadline, set before any op starts: queued (at
	// slot) on its Client's expiries, or else timer. due is the deadline
	// read on the monotonic clock, as the timers count it: a deadline from
	// a caller's ctx may carry a wall-clock reading only, which a step of
	// the wall clock would move.
	due    time.Time
	queued *expiries
	slot   uint64
	timer  *time.Timer

	mu    sync.Mutex // guards after and fired
	after []*afterFunc
	fired bool // done is closed and after has been run: AfterFunc runs f at once
}

const (
	endCanceled = 1 + iota
	endDeadline
)

// An afterFunc is a function registered by opsContext.AfterFunc; done is
// set once, by whoever runs or stops it first.
type afterFunc struct {
	f    func()
	done atomic.Bool
}

// start readies o for a round that ends at deadline, before its ops start.
// detached: ctx has no cancellation to hide (context.WithoutCancel's).
// Neither has context.Background or TODO. e, if not nil, is the Client's
// queue of deadlines, which o joins unless its deadline comes before the
// last one queued; otherwise o has a timer of its own.
func (o *opsContext) start(ctx context.Context, deadline time.Time, detached bool, e *expiries) {
	o.values, o.deadline, o.done = ctx, deadline, make(chan struct{})
	if !detached && ctx != context.Background() && ctx != context.TODO() {
		o.values = context.WithoutCancel(ctx)
	}
	now := time.Now()
	d := deadline.Sub(now)
	if d <= 0 {
		o.end(endDeadline)
		return
	}
	o.due = now.Add(d)
	if e != nil && e.add(o) {
		return
	}
	o.timer = time.AfterFunc(d, o.expire)
}

func (o *opsContext) expire() { o.end(endDeadline) }

// end ends o for the reason why, unless it has ended already, and runs the
// functions registered with AfterFunc.
func (o *opsContext) end(why int32) {
	if !o.ended.CompareAndSwap(0, why) {
		return
	}
	close(o.done)
	if why != endDeadline {
		if o.queued != nil {
			o.queued.forget(o)
		} else {
			o.timer.Stop()
		}
	}
	o.mu.Lock()
	after := o.after
	o.after, o.fired = nil, true
	o.mu.Unlock()
	for _, a := range after {
		if a.done.CompareAndSwap(false, true) {
			go a.f()
		}
	}
}

// AfterFunc is context.AfterFunc's contract for o: f runs in a goroutine
// of its own once o has ended (at once if it has), unless stop is called
// first; stop reports whether it kept f from running. The context package
// uses it for the contexts derived from o.
func (o *opsContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	o.mu.Lock()
	if !o.fired { // ended or not, end will run it, after closing done
		o.after = append(o.after, a)
		o.mu.Unlock()
	} else {
		o.mu.Unlock()
		a.done.Store(true)
		go f()
	}
	return func() bool {
		if !a.done.CompareAndSwap(false, true) {
			return false
		}
		o.mu.Lock()
		if i := slices.Index(o.after, a); i >= 0 {
			o.after = slices.Delete(o.after, i, i+1)
		}
		o.mu.Unlock()
		return true
	}
}

func (o *opsContext) Deadline() (time.Time, bool) { return o.deadline, true }
func (o *opsContext) Done() <-chan struct{}       { return o.done }
func (o *opsContext) Value(key any) any           { return o.values.Value(key) }

func (o *opsContext) Err() error {
	select {
	case <-o.done:
	default:
		return nil
	}
	if o.ended.Load() == endDeadline {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

func (o *opsContext) String() string { return "redlock round context" }

// Round deadlines: one timer per Client.
//
// A round's node context (opsContext) must end at its deadline, and nearly
// every round ends long before, once its nodes have answered. A timer per
// round (time.AfterFunc, stopped at the round's end) put a timer on the
// runtime's heap and took it off again for each of the two rounds of a
// Lock+Unlock. A round whose deadline is the node timeout from its start,
// as almost all are, begins after the rounds before it and ends after them
// too: their deadlines come in the order they start. So a Client queues its
// rounds in that order, and one timer, set for the oldest one still
// running, ends each whose deadline has passed. A round that ends first
// clears its slot, so that the queue keeps no round's state past its end,
// and the empty slots at the front are dropped as rounds join. A round
// whose deadline comes before the last one queued (a caller's ctx deadline
// sooner than the node timeout, or two goroutines' clock readings crossing)
// has a timer of its own.
//
// The timer may fire for a round that has ended: it then moves on to the
// oldest round still running, about once per node timeout when every
// round ends early. Deadlines are compared on the monotonic clock
// (opsContext.due), as a timer of the round's own would count them.
type expiries struct {
	mu    sync.Mutex
	queue []*opsContext // in the order of their deadlines; nil where a round ended first
	head  int           // queue[:head] is spent
	base  uint64        // the slot of queue[0]: rounds queued before it
	last  time.Time     // the due time of the last round queued
	timer *time.Timer   // fires expire; set or due while armed
	armed bool          // timer is set, for queue[head]'s deadline or sooner
}

// add queues o, which has not started its ops, unless its deadline comes
// before the last one queued; it reports whether it did.
func (e *expiries) add(o *opsContext) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o.due.Before(e.last) {
		return false
	}
	for e.head < len(e.queue) && e.queue[e.head] == nil {
		e.head++ // rounds that ended first
	}
	e.compact()
	o.queued, o.slot = e, e.base+uint64(len(e.queue))
	e.queue = append(e.queue, o)
	e.last = o.due
	if !e.armed {
		e.arm(o.due)
	}
	return true
}

// forget clears the slot of o, a round that ended before its deadline.
func (e *expiries) forget(o *opsContext) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o.slot < e.base {
		return // expire took it, and the queue has moved on
	}
	if i := o.slot - e.base; i >= uint64(e.head) && i < uint64(len(e.queue)) && e.queue[i] == o {
		e.queue[i] = nil
	}
}

// expire ends the queued rounds whose deadline has passed, and sets the
// timer for the next one still running.
func (e *expiries) expire() {
	now := time.Now()
	var due []*opsContext
	e.mu.Lock()
	e.armed = false
	for e.head < len(e.queue) {
		o := e.queue[e.head]
		if o != nil && now.Before(o.due) {
			e.arm(o.due)
			break
		}
		e.queue[e.head] = nil
		e.head++
		if o != nil {
			due = append(due, o)
		}
	}
	e.compact()
	e.mu.Unlock()
	for _, o := range due {
		o.end(endDeadline)
	}
}

// arm sets the timer for due; e.mu is held.
func (e *expiries) arm(due time.Time) {
	d := time.Until(due)
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.expire)
	} else {
		e.timer.Reset(d)
	}
	e.armed = true
}

// compact drops the spent front of the queue, reusing its storage unless
// a burst made it much larger than what is queued; e.mu is held.
func (e *expiries) compact() {
	switch spent := e.head; {
	case spent == 0:
		return
	case spent < len(e.queue) && (spent < 64 || 2*spent < len(e.queue)):
		return // a few spent slots, or fewer than half: not worth a copy yet
	}
	live := e.queue[e.head:]
	if cap(e.queue) > 1024 && cap(e.queue) > 4*len(live) {
		e.queue = append(make([]*opsContext, 0, 2*len(live)), live...)
	} else {
		n := copy(e.queue, live)
		clear(e.queue[n:])
		e.queue = e.queue[:n]
	}
	e.base += uint64(e.head)
	e.head = 0
}

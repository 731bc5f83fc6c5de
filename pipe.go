package redlock

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// Pipelining: concurrent callers share round trips to a node.
//
// With many locks in flight, a client spends most of its time in system
// calls: one write and one read per command, on each side, plus a dial
// whenever more commands are in flight than the pool keeps idle. So each
// node has a few lanes, and a lane has at most one batch on the wire. A
// command that finds its lane busy joins the lane's queue, and the next
// batch carries everything queued meanwhile, handed to the Pool's Exec at
// once and answered in order. This is group commit: nothing runs in the
// background; the first caller in line sends the batch. A command alone is
// sent alone, at once.
//
// Lanes: a command goes to the lane of its key (laneOf), so the commands of
// one lock (its SET, Extends and release) keep their order on the node,
// while callers on different keys rarely wait for each other: at low
// concurrency each gets a lane of its own and goes straight to the wire; at
// high concurrency every lane carries batches. With one lane per node, a
// second caller would queue behind the first even with the node idle.
//
// Bounds, given that fanout stops waiting for a node at its deadline anyway:
//   - A command whose deadline passed while it queued is not sent; it fails
//     with ErrNodeTimeout.
//   - A batch goes to Exec with the context of the command that has the
//     latest deadline, which that context carries. A queued command
//     therefore waits at most for the batch ahead of it and then its own,
//     each bounded by deadlines set at most one node timeout earlier, as
//     long as the Pool returns by its context's deadline. If it does not,
//     fanout has stopped waiting anyway; only the lane stays busy.
//   - On a Client's sole inline node (inline.go), no fanout stops waiting
//     for the caller, so a queued command keeps its own deadline itself:
//     at that deadline it leaves the queue unsent, or, if a batch that
//     another caller leads has taken it, stops waiting for that batch's
//     later deadline. Either way it fails with ErrNodeTimeout, by its own
//     deadline. (A command chosen to lead its batch runs it: the leader has
//     the latest deadline, which is its own.)
//   - An error from Exec fails every command of its batch.

// lanes is how many pipe lanes each node has. Two keys share a lane with
// probability 1/lanes.
const lanes = 16

// multiplexLanes is how many of them a node uses whose Pool multiplexes
// concurrent calls itself (Multiplexer). A power of two that divides lanes,
// so that a key keeps one lane on every node: laneOf(key) & (n-1).
const multiplexLanes = 2

// laneOf returns key's lane: its FNV-1a hash, modulo lanes.
func laneOf(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % lanes)
}

// A call is one command waiting for its reply. Each pipe recycles its own
// calls, so that the hot path does not allocate and no call (nor its
// channel) is shared between clients.
type call struct {
	cmd      driver.Command
	args     []any // cmd.Args' storage, the call's own
	deadline time.Time
	ctx      context.Context

	reply driver.Reply
	late  bool // the deadline had passed when its batch went out: not sent

	// timer keeps a sole inline node's queued call to its own deadline;
	// made once per call, reused as the call is.
	timer *time.Timer

	done  chan struct{} // receives once: the call was answered, or it leads
	lead  []*call       // when woken to lead: the batch to send
	alone [1]*call      // the batch of a call sent alone: itself

	// unsent, if set, has bit to clear the moment the call takes its place
	// in the pipe: from then on, any later command to this lane follows it.
	unsent *atomic.Uint64
	bit    uint64
}

// maxFreeCalls bounds the calls a pipe keeps for reuse after a burst.
const maxFreeCalls = 256

// newCall returns a call for the command name with args, recycled if the
// pipe has one. It copies args, so that they can live on the caller's
// stack: the name and the arguments come apart because a Command stored
// whole, even for a moment, would make its Args escape, and every caller's
// argument list cost an allocation.
func (p *pipe) newCall(ctx context.Context, deadline time.Time, name string, firstKey, numKeys int, args []any) *call {
	p.mu.Lock()
	var c *call
	if n := len(p.free); n > 0 {
		c, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		c = &call{done: make(chan struct{}, 1)}
	}
	c.ctx, c.deadline = ctx, deadline
	c.args = append(c.args[:0], args...)
	c.cmd = driver.Command{Name: name, Args: c.args, FirstKey: firstKey, NumKeys: numKeys}
	return c
}

// recycle returns an answered call to the pipe for reuse.
func (p *pipe) recycle(c *call) {
	clear(c.args)
	c.alone[0] = nil
	c.cmd, c.ctx, c.reply, c.late, c.unsent = driver.Command{}, nil, driver.Reply{}, false, nil
	p.mu.Lock()
	if len(p.free) < maxFreeCalls {
		p.free = append(p.free, c)
	}
	p.mu.Unlock()
}

// A pipe orders one lane's commands into batches. The zero value is an idle
// pipe.
type pipe struct {
	mu    sync.Mutex
	busy  bool    // a batch is on the wire, or about to be
	queue []*call // commands for the next batch
	spare []*call // the last batch's buffer, for the queue after next
	free  []*call // answered calls, for reuse

	// The running batch's commands and replies, owned by whoever runs it
	// (one at a time: busy).
	cmds    []driver.Command
	replies []driver.Reply
}

// How a call left send: answered (its reply is set), or at its own
// deadline (own) before it was answered: unsent, out of the queue, or taken
// into a batch that another caller runs, which may still write to it.
const (
	answered = iota
	leftQueue
	leftBatch
)

// send sends c through pool and sets its reply, waiting at most as the
// bounds above say; with own, at most until c's deadline.
func (p *pipe) send(pool driver.Pool, c *call, own bool) int {
	p.mu.Lock()
	if c.unsent != nil {
		c.unsent.And(^c.bit)
	}
	if p.busy {
		p.queue = append(p.queue, c)
		p.mu.Unlock()
		if own {
			if left := p.await(c); left != answered {
				return left
			}
		} else {
			<-c.done
		}
		if batch := c.lead; batch != nil {
			c.lead = nil
			p.run(pool, batch, c, true)
		}
		return answered
	}
	p.busy = true
	p.mu.Unlock()
	c.alone[0] = c
	p.run(pool, c.alone[:], c, false)
	return answered
}

// await waits for a queued call's answer or lead, at most until its
// deadline; see send.
func (p *pipe) await(c *call) int {
	wait := time.Until(c.deadline)
	if c.timer == nil {
		c.timer = time.NewTimer(wait)
	} else {
		c.timer.Reset(wait) // Go 1.23 timers: no stale value to drain
	}
	select {
	case <-c.done:
		c.timer.Stop()
		return answered
	case <-c.timer.C:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.queue, c); i >= 0 {
		p.queue = slices.Delete(p.queue, i, i+1)
		return leftQueue
	}
	if c.lead != nil { // chosen to lead (under p.mu): it must run the batch
		<-c.done
		return answered
	}
	select {
	case <-c.done: // answered just now
		return answered
	default:
		return leftBatch
	}
}

// run sends batch, answers every call in it, and hands the lane to the
// next batch. self is the caller's own call, which needs no wake-up; queued
// says that batch is the pipe's buffer, to be reused.
func (p *pipe) run(pool Pool, batch []*call, self *call, queued bool) {
	p.exchange(pool, batch)
	for _, c := range batch {
		if c != self {
			c.done <- struct{}{}
		}
	}

	p.mu.Lock()
	if queued {
		clear(batch)
		p.spare = batch[:0]
	}
	if len(p.queue) == 0 {
		p.busy = false
		p.mu.Unlock()
		return
	}
	next := p.queue
	p.queue, p.spare = p.spare, nil

	// The call that may wait longest leads: its context bounds the batch.
	// Chosen under p.mu, so that a call leaving at its deadline (await)
	// knows whether it leads.
	leader := next[0]
	for _, c := range next[1:] {
		if c.deadline.After(leader.deadline) {
			leader = c
		}
	}
	leader.lead = next
	p.mu.Unlock()
	leader.done <- struct{}{}
}

// exchange hands the live calls of batch to pool.Exec and sets every call's
// reply. A call whose deadline has passed is not sent; it fails with
// ErrNodeTimeout.
func (p *pipe) exchange(pool Pool, batch []*call) {
	now := time.Now()
	var last *call // the live call with the latest deadline
	cmds := p.cmds[:0]
	for _, c := range batch {
		if !now.Before(c.deadline) {
			c.late, c.reply = true, driver.Reply{Err: ErrNodeTimeout}
			continue
		}
		cmds = append(cmds, c.cmd)
		if last == nil || c.deadline.After(last.deadline) {
			last = c
		}
	}
	if last == nil {
		return
	}
	replies := p.replies[:0]
	for range cmds {
		replies = append(replies, driver.Reply{})
	}
	p.cmds, p.replies = cmds, replies
	defer func() { clear(cmds); clear(replies) }() // drop the references

	ctx := last.ctx
	if d, ok := ctx.Deadline(); !ok || d.After(last.deadline) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last.deadline)
		defer cancel()
	}
	err := pool.Exec(ctx, cmds, replies)
	i := 0
	for _, c := range batch {
		if c.late {
			continue
		}
		if err != nil {
			c.reply = driver.Reply{Err: err}
		} else {
			c.reply = replies[i]
		}
		i++
	}
}

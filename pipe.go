package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Pipelining: concurrent callers share round trips to a node.
//
// With many locks in flight, a client spends most of its time in system
// calls: one write and one read per command, on each side, plus a dial
// whenever more commands are in flight than the pool keeps idle. So a node
// has at most one batch on the wire. A command that finds the node busy
// joins the queue, and the next batch carries everything queued meanwhile,
// written at once on one borrowed connection with the replies read back in
// order. This is group commit: nothing runs in the background; the first
// caller in line sends the batch, and each batch borrows its connection
// from the user's Pool and returns it. A command alone is sent exactly as
// before the pipe existed: one DoWithTimeout on one borrowed connection.
//
// Bounds, given that fanout stops waiting for a node at its deadline anyway:
//   - A command whose deadline passed while it queued is not sent; it fails
//     with ErrNodeTimeout.
//   - A batch's replies are read until the latest deadline among its
//     commands, and its connection is borrowed with the context of the
//     command that has that deadline. A queued command therefore waits at
//     most for the batch ahead of it and then its own, each bounded by
//     deadlines set at most one node timeout earlier (as long as the Pool
//     honours the context of GetContext, and the connection its write
//     timeout).
//   - A reply that does not arrive fails every command of its batch. The
//     connection is then broken, and the Pool discards it on Close.

// A call is one command waiting for its reply. Each pipe recycles its own
// calls, so that the hot path does not allocate and no call (nor its
// channel) is shared between clients.
type call struct {
	cmd      string
	args     []any
	deadline time.Time
	ctx      context.Context

	reply any
	err   error

	done  chan struct{} // receives once: the call was answered, or it leads
	lead  []*call       // when woken to lead: the batch to send
	alone [1]*call      // the batch of a call sent alone: itself

	// unsent, if set, has bit to clear the moment the call takes its place
	// in the pipe: from then on, any later command to this node follows it.
	unsent *atomic.Uint64
	bit    uint64
}

// maxFreeCalls bounds the calls a pipe keeps for reuse after a burst.
const maxFreeCalls = 256

// newCall returns a call for cmd, recycled if the pipe has one.
func (p *pipe) newCall(ctx context.Context, deadline time.Time, cmd string, args []any) *call {
	p.mu.Lock()
	var c *call
	if n := len(p.free); n > 0 {
		c, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		c = &call{done: make(chan struct{}, 1)}
	}
	c.ctx, c.deadline, c.cmd = ctx, deadline, cmd
	c.args = append(c.args[:0], args...)
	return c
}

// recycle returns an answered call to the pipe for reuse.
func (p *pipe) recycle(c *call) {
	clear(c.args)
	c.alone[0] = nil
	c.ctx, c.reply, c.err, c.unsent = nil, nil, nil, nil
	p.mu.Lock()
	if len(p.free) < maxFreeCalls {
		p.free = append(p.free, c)
	}
	p.mu.Unlock()
}

// A pipe orders one node's commands into batches. The zero value is an idle
// pipe.
type pipe struct {
	mu    sync.Mutex
	busy  bool    // a batch is on the wire, or about to be
	queue []*call // commands for the next batch
	spare []*call // the last batch's buffer, for the queue after next
	free  []*call // answered calls, for reuse
}

// send sends c through pool and sets its reply, waiting at most as the
// bounds above say.
func (p *pipe) send(pool Pool, c *call) {
	p.mu.Lock()
	if c.unsent != nil {
		c.unsent.And(^c.bit)
	}
	if p.busy {
		p.queue = append(p.queue, c)
		p.mu.Unlock()
		<-c.done
		if batch := c.lead; batch != nil {
			c.lead = nil
			p.run(pool, batch, c, true)
		}
		return
	}
	p.busy = true
	p.mu.Unlock()
	c.alone[0] = c
	p.run(pool, c.alone[:], c, false)
}

// run sends batch, answers every call in it, and hands the node to the
// next batch. self is the caller's own call, which needs no wake-up; queued
// says that batch is the pipe's buffer, to be reused.
func (p *pipe) run(pool Pool, batch []*call, self *call, queued bool) {
	exchange(pool, batch)
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
	p.mu.Unlock()

	// The call that may wait longest leads: its context bounds the borrow.
	leader := next[0]
	for _, c := range next[1:] {
		if c.deadline.After(leader.deadline) {
			leader = c
		}
	}
	leader.lead = next
	leader.done <- struct{}{}
}

// exchange sends the live calls of batch on one connection from pool and
// sets every call's reply or error.
func exchange(pool Pool, batch []*call) {
	now := time.Now()
	var last *call // the live call with the latest deadline
	live := 0
	for _, c := range batch {
		if !now.Before(c.deadline) {
			c.err = ErrNodeTimeout
			continue
		}
		live++
		if last == nil || c.deadline.After(last.deadline) {
			last = c
		}
	}
	if live == 0 {
		return
	}
	conn, err := pool.GetContext(last.ctx)
	if err != nil {
		failLive(batch, err)
		return
	}
	defer conn.Close()

	if live == 1 {
		last.reply, last.err = doUntil(conn, last.deadline, last.cmd, last.args...)
		return
	}
	for _, c := range batch {
		if c.err == nil {
			if err := conn.Send(c.cmd, c.args...); err != nil {
				failLive(batch, err)
				return
			}
		}
	}
	// Flush and read even if the deadline passed during the sends: commands
	// left pending would make Close wait for their replies with the
	// connection's own read timeout. A read that times out breaks the
	// connection instead, and the Pool discards it.
	wait := max(time.Until(last.deadline), time.Nanosecond)
	replies, err := redis.Values(redis.DoWithTimeout(conn, wait, ""))
	if err == nil && len(replies) != live {
		err = errPipeReplies
	}
	if err != nil {
		failLive(batch, err)
		return
	}
	for _, c := range batch {
		if c.err != nil {
			continue
		}
		if rerr, ok := replies[0].(redis.Error); ok {
			c.err = rerr // as DoWithTimeout reports an error reply
		} else {
			c.reply = replies[0]
		}
		replies = replies[1:]
	}
}

var errPipeReplies = errors.New("redlock: pipelined reply count does not match")

// failLive sets err on every call of batch that was sent.
func failLive(batch []*call, err error) {
	for _, c := range batch {
		if c.err == nil {
			c.err = err
		}
	}
}

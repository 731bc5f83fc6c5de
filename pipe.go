package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
// whenever more commands are in flight than the pool keeps idle. So a node
// has one pipe, with a few wires, and a wire has at most one batch on the
// wire at a time. A command that finds every wire busy joins the pipe's
// queue, and the next wire to come free carries everything queued
// meanwhile, handed to the Pool's Exec at once and answered in order. This
// is group commit.
//
// Who carries a batch: a command is either waited for by its caller's
// goroutine (send), or asynchronous (submit: fanout's rounds, whose
// replies go to a callback, call.then). An asynchronous command that finds
// a wire idle goes out on a goroutine of the pipe's own, a runner, which
// then carries the batches queued meanwhile until the queue is empty; one
// that queues costs no goroutine at all, which is the point: a round used
// to park a goroutine per node per caller, each woken when its batch was
// answered. A caller's goroutine that carried a batch hands the next one to
// a waiting caller in it (the one with the latest deadline leads), or, if
// none waits in it, to a new runner.
//
// Wires open only when the others are busy: a command that finds the queue
// empty and a wire idle goes out at once, alone, on that wire, unless a
// busy wire carries a batch of more than one command (crowd). So one caller
// alone goes straight to the wire, and so do two callers on one node (each
// finds a wire of its own), while 64 callers share large batches per node
// instead of one small batch per caller. Without the crowd rule, under load
// one wire carried the large batches and the other a stream of single
// commands, each a write and a read on both sides (a third of the batches
// at 64 callers; docs/benchmarks.md). wires is 2: one makes a second
// caller wait for the first's round trip even with the node idle (two
// callers on one node ran at about half the floor's rate), and four did
// not raise throughput at 64 callers,
// while every extra batch costs a connection, a write and a read on both
// sides. 16 fixed lanes by key hash, the layout before, cut 64 callers
// into batches of about four and ran at a third to a half of the rate of
// two wires (docs/benchmarks.md, issue 22).
//
// A yield after a large batch: a runner that carried a batch of more
// than crowd+1 commands yields its processor (runtime.Gosched) once it
// has answered them, before it takes the queue. The answers have just
// made their callers runnable, and their next commands (the release after
// a won SET, the next lock) are what the queue lacks: without the yield
// the runner found it empty, the wire went idle, and the first of those
// commands went out alone, so that under load the batches alternated
// between one command and many (37 to 41% of the batches at 64 callers
// had one, 19 to 24% with the yield, and throughput rose by 1.14× at 64
// callers and 1.09× at 512; docs/benchmarks.md, issue 22, fourth step). A
// second yield added nothing. A caller's goroutine that carried a batch
// does not yield: its own reply is in, and a yield would only delay its
// return, past the node deadline that its answer is judged by if the
// processors are busy (inline.go). One or two callers rarely make a batch
// of three, and then yield nothing either.
//
// One wire under load: once a batch of more than crowd+1 commands has
// gone out, a command does not open an idle wire beside a busy one, even
// one that carries a single command; it queues for the busy wire's next
// batch (pipe.hold). holdBatches batches of one or two commands in a row
// end the hold. Under load a node's batches included single commands in
// pairs: one out alone on the idle node, the next beside it on the other
// wire. Held, the second waits and goes with those queued after it, and
// throughput at 64 goroutines rose by about 1.04× through rueidis and
// valkey-go, whose drivers merge the two wires' writes anyway (seventh
// step), and by 1.05 to 1.08× through redigo and go-redis, where each
// batch also borrows a connection of its own (eighth step;
// docs/benchmarks.md, issue 22). One or two callers rarely make a batch of
// three, and four small batches after one they have a wire each again.
// The hold counts batches, not time: after a burst and a quiet spell, the
// next callers share one wire for up to holdBatches batches. A Client's
// only node does not hold (pipe.oneNode): with one server, the second
// wire is what keeps that server busy while the first wire's replies are
// handed out, and at N=1 the hold cost about 3% at 16 and 64 goroutines
// (eighth step).
//
// Order: commands on one key keep their order on the node. A key hashes to
// one of 64 lanes (laneOf); each busy wire records the lanes of its batch,
// and a command whose lane is on another wire's batch neither goes out
// alone nor leaves the queue for another wire: it waits for that wire, and
// goes out after the batch is answered. A command that finds the queue not
// empty joins its end, and a wire takes the queue in order. So a command
// that has entered the pipe (call.unsent) is followed by every later
// command on its key, on the same connection or after its reply: an Unlock
// cannot overtake its Lock's SET to a straggler node (round.overtaken). Two
// connections have no order between them; only waiting for the reply gives
// one.
//
// Bounds, given that fanout stops waiting for a node at its deadline anyway:
//   - A command whose deadline passed while it queued is not sent; it fails
//     with ErrNodeTimeout.
//   - A batch goes to Exec with the context of the command that has the
//     latest deadline, which that context carries. A queued command
//     therefore waits at most for the batch ahead of it and then its own,
//     each bounded by deadlines set at most one node timeout earlier, as
//     long as the Pool returns by its context's deadline. If it does not,
//     fanout has stopped waiting anyway, but the wire stays busy, and
//     commands that queue behind it (as they do beside a batch of two or
//     more, or under the hold) stay queued until Exec returns:
//     the node stalls for this Client. Each caller still returns by its
//     own deadline.
//   - On a Client's sole inline node (inline.go), no fanout stops waiting
//     for the caller, so a queued command keeps its own deadline itself:
//     at that deadline it leaves the queue unsent, or, if a batch that
//     another caller leads has taken it, stops waiting for that batch's
//     later deadline. Either way it fails with ErrNodeTimeout, by its own
//     deadline. (A command chosen to lead its batch runs it: the leader has
//     the latest deadline, which is its own.)
//   - An error from Exec fails every command of its batch.

// wires is how many batches a node may have on the wire at once; see above.
const wires = 2

// errNoReply fails a command whose reply the Pool's Exec left unset,
// against driver.Pool's contract: the core fills each slot with
// unanswered before Exec (classify).
var errNoReply = errors.New("redlock: the Pool's Exec set no reply for the command")

// unanswered is the value of a reply slot before the Pool's Exec sets it.
type unanswered struct{}

// lanes is how many order classes keys hash to (laneOf): a bit each in a
// wire's mask. Two keys share a lane with probability 1/lanes, and then a
// command on one may wait for a batch that carries the other.
const lanes = 64

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

	lane uint64 // its key's lane (laneOf), as a bit of a wire's mask

	// Where exchange finds its reply: replies[at], or element part of it
	// if part >= 0 (a combined release).
	at, part int

	done  chan struct{} // receives once: the call was answered, or it leads
	lead  []*call       // when woken to lead: the batch to send
	wire  int           // when woken to lead: the wire to send it on
	alone [1]*call      // the batch of a call sent alone: itself

	// unsent, if set, has bit to clear the moment the call takes its place
	// in the pipe: from then on, any later command on its key follows it.
	unsent *atomic.Uint64
	bit    uint64

	// then, if set, makes the call asynchronous (submit): no goroutine
	// waits for it; whoever runs its batch calls then.answer with its reply
	// set, and then owns the call from that moment. node is the node it
	// went to.
	then answerer
	node *node
}

// maxFreeCalls bounds the calls a pipe keeps for reuse after a burst: enough
// for 512 callers' SET stragglers and releases in flight on one node.
const maxFreeCalls = 1024

// newCall returns a call for the command name with args, recycled if the
// pipe has one. It copies args, so that they can live on the caller's
// stack: the name and the arguments come apart because a Command stored
// whole, even for a moment, would make its Args escape, and every caller's
// argument list cost an allocation.
func (p *pipe) newCall(ctx context.Context, deadline time.Time, name string, firstKey, numKeys int, args []any) *call {
	p.freeMu.Lock()
	var c *call
	if n := len(p.free); n > 0 {
		c, p.free = p.free[n-1], p.free[:n-1]
	}
	p.freeMu.Unlock()
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
	c.cmd, c.ctx, c.reply, c.late, c.unsent, c.lane = driver.Command{}, nil, driver.Reply{}, false, nil, 0
	c.then, c.node = nil, nil
	p.freeMu.Lock()
	if len(p.free) < maxFreeCalls {
		p.free = append(p.free, c)
	}
	p.freeMu.Unlock()
}

// An answerer takes an asynchronous call's reply (a fanout round's fan).
type answerer interface {
	answer(c *call)
}

// A pipe orders one node's commands into batches, on at most wires
// batches at a time. The zero value is an idle pipe with one wire; a node
// sets n.
type pipe struct {
	mu    sync.Mutex
	n     int // wires in use: 1 to wires
	wires [wires]wire
	queue []*call // commands for the next batch

	// Answered calls, for reuse, under a mutex of their own, so that
	// taking and returning a call does not wait for the queue's: with 512
	// callers, mu's Lock was 7% of the client's CPU.
	freeMu sync.Mutex
	free   []*call

	// combine: the Pool reaches one server (driver.SingleServer), so a
	// batch's releases may go as one script call (releaseMany);
	// manyCached: that script is known to be in the node's script cache;
	// manyRefused: the node refused a combined call as a whole (refusesMany),
	// and releases go one call each from then on.
	combine     bool
	manyCached  atomic.Bool
	manyRefused atomic.Bool

	// hold > 0: under load, a busy wire keeps the others closed; a command
	// does not go out alone on an idle wire beside a busy one. A batch of
	// more than crowd+1 commands sets hold to holdBatches; every smaller
	// batch counts it down. See "One wire under load". oneNode: the node
	// is its Client's only one, and never holds.
	hold    int
	oneNode bool
}

// holdBatches is how many small batches in a row end the hold; see
// pipe.hold.
const holdBatches = 4

// A wire carries one batch at a time.
type wire struct {
	busy  bool   // a batch is on the wire, or about to be
	lanes uint64 // the lanes of that batch's commands, while busy
	size  int    // how many commands that batch has, while busy
	spare []*call

	// The running batch's commands and replies, owned by whoever runs it
	// (one at a time: busy).
	cmds    []driver.Command
	replies []driver.Reply
	// A combined release's calls and arguments (releaseMany).
	members  []*call
	manyArgs []any
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
	if w := p.enter(c); w >= 0 {
		p.run(pool, w, c.alone[:], c, false, false)
		return answered
	}
	if own {
		if left := p.await(c); left != answered {
			return left
		}
	} else {
		<-c.done
	}
	if batch := c.lead; batch != nil {
		c.lead = nil
		p.run(pool, c.wire, batch, c, true, false)
	}
	return answered
}

// submit hands c, whose then is set, to the pipe and returns without
// waiting for its reply: c goes out at once on an idle wire, on a goroutine
// that goes on to carry the batches queued meanwhile, or joins the queue,
// and a goroutine that runs a batch (whoever it is) calls c.then. The
// ordering rules are send's.
func (p *pipe) submit(pool driver.Pool, c *call) {
	if w := p.enter(c); w >= 0 {
		go p.run(pool, w, c.alone[:], nil, false, true)
	}
}

// enter gives c its place in the pipe, the moment its unsent bit clears:
// an idle wire, marked busy with c's lane and returned, on which c goes out
// alone (c.alone), if the queue is empty and no busy wire carries its lane;
// otherwise the end of the queue, and -1.
func (p *pipe) enter(c *call) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.unsent != nil {
		c.unsent.And(^c.bit)
	}
	if len(p.queue) == 0 {
		if w := p.idleWire(c.lane); w >= 0 {
			p.wires[w].busy, p.wires[w].lanes, p.wires[w].size = true, c.lane, 1
			c.alone[0] = c
			p.sized(1)
			return w
		}
	}
	p.queue = append(p.queue, c)
	return -1
}

// idleWire returns a wire on which a command of lane may go out at once, or
// -1: the first idle one, unless a busy wire carries a command of lane.
// Called with p.mu held.
func (p *pipe) idleWire(lane uint64) int {
	idle := -1
	for i := range max(p.n, 1) {
		w := &p.wires[i]
		if w.busy {
			if w.lanes&lane != 0 || w.size > crowd || p.hold > 0 {
				return -1
			}
		} else if idle < 0 {
			idle = i
		}
	}
	return idle
}

// crowd is the largest batch on a busy wire that lets a command take
// another, idle wire; see above.
const crowd = 1

// await waits for a queued call's answer or lead, at most until its
// deadline; see send.
func (p *pipe) await(c *call) int {
	wait := time.Until(c.deadline)
	if c.timer == nil {
		c.timer = time.NewTimer(wait)
	} else {
		// Drained, in case the program runs with the timers of Go before
		// 1.23 (GODEBUG asynctimerchan=1), where a fired timer's value
		// stays in C after Stop and would end the next wait at once.
		select {
		case <-c.timer.C:
		default:
		}
		c.timer.Reset(wait)
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

// run sends batch on wire w, answers every call in it, and hands the wire
// to the next batch. self is the caller's own call, which needs no wake-up;
// queued says that batch is a buffer of the pipe's, to be reused. A runner
// (a goroutine of the pipe's own, started by submit or here) goes on to
// carry the next batches as long as there are any; a caller's goroutine
// hands the next batch to one of its waiting callers, or, if every call in
// it is asynchronous, to a new runner.
func (p *pipe) run(pool Pool, w int, batch []*call, self *call, queued, runner bool) {
	wr := &p.wires[w]
	for {
		wr.exchange(p, pool, batch)
		for _, c := range batch {
			switch {
			case c == self:
			case c.then != nil:
				c.then.answer(c)
			default:
				c.done <- struct{}{}
			}
		}
		if runner && len(batch) > crowd+1 {
			runtime.Gosched() // see "A yield after a large batch"
		}

		p.mu.Lock()
		if queued {
			clear(batch)
			wr.spare = batch[:0]
		}
		next := p.take(w)
		if len(next) == 0 {
			wr.busy, wr.lanes, wr.size = false, 0, 0
			p.mu.Unlock()
			return
		}
		p.sized(len(next))

		// A waiting call leads, the one that may wait longest: its context
		// bounds its wait. Chosen under p.mu, so that a call leaving at its
		// deadline (await) knows whether it leads. (exchange bounds the
		// batch by the latest deadline of all its calls.)
		var leader *call
		for _, c := range next {
			if c.then == nil && (leader == nil || c.deadline.After(leader.deadline)) {
				leader = c
			}
		}
		if leader != nil {
			leader.lead, leader.wire = next, w
			p.mu.Unlock()
			leader.done <- struct{}{}
			return
		}
		p.mu.Unlock()
		if !runner {
			go p.run(pool, w, next, nil, true, true)
			return
		}
		batch, self, queued = next, nil, true
	}
}

// sized counts a batch of n commands toward the hold. Called with p.mu
// held.
func (p *pipe) sized(n int) {
	switch {
	case p.oneNode:
	case n > crowd+1:
		p.hold = holdBatches
	case p.hold > 0:
		p.hold--
	}
}

// take returns wire w's next batch: the queue, in order, but for the
// commands whose lane another busy wire carries, which stay queued, in
// order, for that wire. Called with p.mu held.
func (p *pipe) take(w int) []*call {
	if len(p.queue) == 0 {
		return nil
	}
	var held, mask uint64 // the other wires' lanes; the queue's
	for i := range max(p.n, 1) {
		if i != w && p.wires[i].busy {
			held |= p.wires[i].lanes
		}
	}
	for _, c := range p.queue {
		mask |= c.lane
	}
	wr := &p.wires[w]
	if mask&held == 0 { // the common case: the whole queue goes
		next := p.queue
		p.queue, wr.spare = wr.spare, nil
		wr.lanes, wr.size = mask, len(next)
		return next
	}
	next, kept := wr.spare[:0], p.queue[:0]
	mask = 0
	for _, c := range p.queue {
		if c.lane&held != 0 {
			kept = append(kept, c)
		} else {
			next = append(next, c)
			mask |= c.lane
		}
	}
	clear(p.queue[len(kept):])
	p.queue = kept
	if len(next) == 0 {
		wr.spare = next
		return nil
	}
	wr.spare, wr.lanes, wr.size = nil, mask, len(next)
	return next
}

// exchange hands the live calls of batch to pool.Exec and sets every call's
// reply. A call whose deadline has passed is not sent; it fails with
// ErrNodeTimeout. On a pipe that combines releases, two or more release
// scripts in the batch go as one (releaseMany).
func (wr *wire) exchange(p *pipe, pool Pool, batch []*call) {
	now := time.Now()
	var (
		last     *call  // the live call with the latest deadline
		releases int    // live calls that may be combined
		others   uint64 // the lanes of the other live calls
		channel  any    // the first release's channel: the others must share it
	)
	combine := p.combine && !p.manyRefused.Load()
	for _, c := range batch {
		if !now.Before(c.deadline) {
			c.late, c.reply = true, driver.Reply{Err: ErrNodeTimeout}
			continue
		}
		if last == nil || c.deadline.After(last.deadline) {
			last = c
		}
		if combine && isRelease(c) && (releases == 0 || combinable(c, channel)) {
			channel = c.args[4]
			releases++
		} else {
			others |= c.lane
		}
	}
	if last == nil {
		return
	}

	// Each live call's reply is replies[c.at], or, for a combined release,
	// element c.part of it.
	cmds, many, members := wr.cmds[:0], -1, wr.members[:0]
	for _, c := range batch {
		if c.late {
			continue
		}
		if releases > 1 && combinable(c, channel) && !sharesKey(batch, c, others, channel) {
			if many < 0 {
				many = len(cmds)
				cmds = append(cmds, driver.Command{})
			}
			c.at, c.part = many, len(members)
			members = append(members, c)
			continue
		}
		c.at, c.part = len(cmds), -1
		cmds = append(cmds, c.cmd)
	}
	switch len(members) {
	case 0:
	case 1: // nothing to combine it with: it goes as it is
		cmds[many], members[0].part = members[0].cmd, -1
	default:
		cmds[many] = wr.releaseMany(p, members)
	}
	// A slot the Pool leaves as it is fails its command (classify): a
	// null reply is agreement to SET ... NX GET, so an unanswered slot
	// must not read as one.
	replies := wr.replies[:0]
	for range cmds {
		replies = append(replies, driver.Reply{Value: unanswered{}})
	}
	wr.cmds, wr.replies, wr.members = cmds, replies, members
	defer func() { // drop the references
		clear(cmds)
		clear(replies)
		clear(members)
		clear(wr.manyArgs)
	}()

	ctx, cancel := byDeadline(last.ctx, last.deadline)
	defer cancel()
	err := pool.Exec(ctx, cmds, replies)
	if err == nil && len(members) > 1 {
		switch r := replies[many]; {
		case r.Err == nil:
			p.manyCached.Store(true)
		case replyCode(r.Err) == "NOSCRIPT":
			p.manyCached.Store(false)
		case refusesMany(r.Err):
			// Refused before it ran, for a reason that one key's own call
			// might not meet: each release goes again as it came, and the
			// node gets no combined call again.
			p.manyRefused.Store(true)
			resend(ctx, pool, members)
		}
	}
	for _, c := range batch {
		switch {
		case c.late:
		case c.part == resent:
		case err != nil:
			c.reply = driver.Reply{Err: err}
		case c.part < 0:
			c.reply = replies[c.at]
		default:
			c.reply = memberReply(replies[c.at], c.part, len(members))
		}
	}
}

// byDeadline returns ctx if it ends by deadline already, and else ctx
// with that deadline: a context made only when needed, since every round's
// ops already carry the node deadline (opsContext).
func byDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		return ctx, noCancel
	}
	return context.WithDeadline(ctx, deadline)
}

func noCancel() {}

// Combined releases.
//
// A release is a script (scripts/release.lua), and a server spends more on
// starting a script than on the GET and DEL inside it: on Redis 7.0, with
// 16 locks' SETs and releases pipelined, the server's CPU per SET and
// release was 11.4 µs with a script call per release and 9.5 µs with one
// call releasing all 16 (release_many.lua; BenchmarkReleaseScripts in
// bench/, docs/benchmarks.md). So, on a Pool whose commands all reach one
// server (driver.SingleServer), the release scripts that one batch carries
// go as one call of release_many.lua, with the keys, the tokens and the
// channel, in the place of the first of them; each call gets its own key's
// element of the array it returns, so a refusal or an error reply is still
// its key's alone. No two commands on one key change order: the only
// releases moved are those whose key no other command in the batch names
// (sharesKey; the order that matters is one key's, see above), and the
// releases keep their order among themselves. A single release, or one whose
// channel differs from the first's, goes as it is. The combined script is
// sent by EVALSHA once a call of it has succeeded on the node, by EVAL
// (which caches it) before that and after a NOSCRIPT; a NOSCRIPT reaches
// each combined release as its own, and each resends its own script as it
// would have anyway. A refusal of the combined call as a whole before it
// ran that one key's call might not meet (NOPERM from an ACL that denies
// EVAL or one of its keys, CROSSSLOT from a proxy: refusesMany) sends the
// releases again, one call each, and the node gets no combined call again.

// isRelease reports whether c is a release script's EVALSHA (node.release,
// releaseOwnedAsync), with its arguments as they lay them out: the hash,
// the key count, the key, the token and the channel.
func isRelease(c *call) bool {
	return c.cmd.Name == "EVALSHA" && len(c.args) == 5 && c.args[0] == releaseScript.hashArg
}

// combinable reports whether c is a release script with channel, which
// a combined release may carry.
func combinable(c *call, channel any) bool { return isRelease(c) && c.args[4] == channel }

// sharesKey reports whether a live call of batch other than the releases
// it may combine (others has their lanes) names c's key: c must then keep
// its place in the batch.
func sharesKey(batch []*call, c *call, others uint64, channel any) bool {
	if c.lane&others == 0 {
		return false
	}
	for _, o := range batch {
		if o.lane != c.lane || o.late || combinable(o, channel) {
			continue
		}
		for _, k := range o.cmd.Keys() {
			if k == c.args[2] {
				return true
			}
		}
	}
	return false
}

// releaseMany returns the command that releases members' keys in one call:
// release_many.lua with their keys, their tokens and their channel.
func (wr *wire) releaseMany(p *pipe, members []*call) driver.Command {
	name, script := "EVALSHA", releaseManyScript.hashArg
	if !p.manyCached.Load() {
		name, script = "EVAL", releaseManyScript.srcArg
	}
	args := append(wr.manyArgs[:0], script, int64(len(members)))
	for _, c := range members {
		args = append(args, c.args[2])
	}
	for _, c := range members {
		args = append(args, c.args[3])
	}
	args = append(args, members[0].args[4])
	wr.manyArgs = args
	return driver.Command{Name: name, Args: args, FirstKey: 2, NumKeys: len(members)}
}

// resent marks, in call.part, a combined release whose reply resend set.
const resent = -2

// refusesMany reports whether err, a reply to a combined release as a
// whole, refuses it before it ran for a reason that the releases it carries
// might not meet one by one: an ACL that lets the user run EVALSHA but not
// EVAL, or that grants some of its keys and not others (NOPERM), or a proxy
// that spreads keys over servers after all (CROSSSLOT).
func refusesMany(err error) bool {
	switch replyCode(err) {
	case "NOPERM", "CROSSSLOT":
		return true
	}
	return false
}

// resend sends the releases of a refused combined call (refusesMany) as
// they came, one call each, in order, and sets their replies. The wire still
// carries their lanes, and no other command of the batch names their keys
// (sharesKey), so no command on one of their keys changes places with them.
func resend(ctx context.Context, pool Pool, members []*call) {
	cmds := make([]driver.Command, len(members))
	replies := make([]driver.Reply, len(members))
	for i, c := range members {
		cmds[i], replies[i] = c.cmd, driver.Reply{Value: unanswered{}}
	}
	err := pool.Exec(ctx, cmds, replies)
	for i, c := range members {
		if err != nil {
			replies[i] = driver.Reply{Err: err}
		}
		c.reply, c.part = replies[i], resent
	}
}

// memberReply returns element i of a combined release's reply r, which n
// calls share: an error reply to the whole call is each one's, and an
// element that is an error is its call's error reply.
func memberReply(r driver.Reply, i, n int) driver.Reply {
	if r.Err != nil {
		return r
	}
	vs, ok := r.Value.([]any)
	if !ok || len(vs) != n {
		return driver.Reply{Err: fmt.Errorf("redlock: unexpected reply %v to %d combined releases", r.Value, n)}
	}
	switch v := vs[i].(type) {
	case driver.ReplyError:
		return driver.Reply{Err: v}
	case error: // a driver's own type for an error inside an array
		return driver.Reply{Err: driver.ReplyError(v.Error())}
	default:
		return driver.Reply{Value: v}
	}
}

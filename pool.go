package redlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/keys"
)

// A Pool is the port to one independent Redis master: see package driver,
// which adapter authors implement. NewPool makes one for redigo; the
// goredis, rueidis and valkeygo modules make them for those clients.
type Pool = driver.Pool

// classify turns one reply into what the core acts on: a value, or an error.
// It is the one place where replies are judged, so that no driver's way of
// reporting an error reply can make it count as agreement:
//   - Reply.Err set: that error (a ReplyError for an error reply).
//   - an error stored as the value (redigo's redis.Error, say): a
//     ReplyError with its text.
//   - []byte: the same string; int: int64. Anything else as it is.
//   - a slot that the Pool's Exec left as the core filled it (unanswered):
//     errNoReply, so that it cannot read as a null reply.
func classify(r driver.Reply) (any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	switch v := r.Value.(type) {
	case unanswered:
		return nil, errNoReply
	case error:
		return nil, driver.ReplyError(v.Error())
	case []byte:
		return string(v), nil
	case int:
		return int64(v), nil
	}
	return r.Value, nil
}

// replyCode returns the code of an error reply inside err ("NOSCRIPT"), or ""
// if err holds none.
func replyCode(err error) string {
	if rerr, ok := replyErrorIn(err); ok {
		return rerr.Code()
	}
	return ""
}

// replyErrorIn returns the error reply inside err, if it holds one.
func replyErrorIn(err error) (driver.ReplyError, bool) {
	// errors.As would cost an allocation per call, on the hot path.
	for err != nil {
		switch e := err.(type) {
		case driver.ReplyError:
			return e, true
		case *NodeError:
			err = e.Err
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			var rerr driver.ReplyError
			if errors.As(err, &rerr) { // multi-errors and the like
				return rerr, true
			}
			return "", false
		}
	}
	return "", false
}

// The compare-and-set scripts. They act only while the key still holds the
// caller's token, so only the holder can extend or release a lock, or raise
// its fencing counter.
var (
	//go:embed scripts/release.lua
	releaseSource string
	releaseScript = newScript(releaseSource, 1)

	// releaseManyScript is releaseScript for several keys in one call
	// (pipe.go, "Combined releases").
	//go:embed scripts/release_many.lua
	releaseManySource string
	releaseManyScript = newScript(releaseManySource, 0)

	//go:embed scripts/extend.lua
	extendSource string
	extendScript = ackedScript(extendSource, 1)

	//go:embed scripts/acquire_fenced.lua
	acquireFencedSource string
	acquireFencedScript = ackedScript(acquireFencedSource, 2)

	//go:embed scripts/raise_fence.lua
	raiseFenceSource string
	raiseFenceScript = ackedScript(raiseFenceSource, 2)
)

type script struct {
	src  string
	hash string // SHA1 of src, as EVALSHA wants it
	keys int    // how many of the arguments are keys

	srcArg, hashArg, keysArg any // the above as command arguments, converted once

	// acked: a write whose vote must reach the replicas (WithReplicaAcks).
	acked bool
}

// ackedScript is newScript for a script that WithReplicaAcks follows by WAIT.
func ackedScript(src string, keys int) script {
	s := newScript(src, keys)
	s.acked = true
	return s
}

func newScript(src string, keys int) script {
	h := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(h[:])
	return script{src: src, hash: hash, keys: keys, srcArg: src, hashArg: hash, keysArg: int64(keys)}
}

// fenceKey names the fencing counter of a lock key under the default
// prefix; see keys.Fence for the rule.
func fenceKey(key string) string { return keys.Fence(defaultFencePrefix, key) }

// fenceKeyWith is fenceKey with the prefix of WithFencePrefix.
func fenceKeyWith(prefix, key string) string { return keys.Fence(prefix, key) }

// hasHashTag reports whether Redis Cluster would hash key by a tag.
func hasHashTag(key string) bool { return keys.HasTag(key) }

// A node is one Redis master as the quorum sees it.
type node struct {
	index int
	name  string // the master's address, if its Pool is a driver.Namer
	pool  Pool
	pipe  pipe // batches the commands of concurrent callers (pipe.go)

	// inline: the Pool honours its deadlines (DeadlineHonorer), so that a
	// round of one node may run on the caller's goroutine (inline.go).
	inline bool
	// sole: inline, and the Client's only node, so that every round runs
	// on its caller's goroutine; a queued command then leaves the queue at
	// its own deadline (pipe.send), since no fanout stops waiting for it.
	sole bool
	// acks: WithReplicaAcks, the replicas a vote's write must reach (0: off).
	acks int64
	// noGet: the server answered SET ... NX GET with a syntax error
	// (before Redis 7.0); its contended attempts send plain SET NX.
	noGet atomic.Bool
}

func newNode(index int, pool Pool) *node {
	n := &node{index: index, pool: pool}
	n.pipe.n = wires
	if namer, ok := pool.(driver.Namer); ok {
		n.name = namer.Name()
	}
	if h, ok := pool.(driver.DeadlineHonorer); ok {
		n.inline = h.HonorsDeadline()
	}
	if s, ok := pool.(driver.SingleServer); ok {
		n.pipe.combine = s.SingleServer()
	}
	return n
}

// cmdArgs are one operation's command arguments, converted to interface
// values once for all nodes rather than once per node and command.
type cmdArgs struct {
	key, token, ttl any // ttl in milliseconds, as PX and PEXPIRE take it
	fenceKey        any // the key's fencing counter, with WithFencing
	channel         any // where a release announces itself ("" for nowhere; wake.go)
	lane            int // the pipe lane of key (laneOf): its commands keep their order

	// unsent has a bit for each node whose SET has not yet taken its place
	// in the node's pipe; fellBack, for each node whose fenced SET had to be
	// resent by EVAL after NOSCRIPT, or whose SET ... NX GET had to be resent
	// as plain SET NX (acquisitions only; see Lock.overtakenAt).
	unsent, fellBack atomic.Uint64

	// The nodes that answered the operation, and agreed (round.masks).
	masks nodeMasks

	// The acquisition's SET as an asyncOp (setNXAsync), and its arguments.
	setOp   asyncOp
	setArgs [5]any

	// With refused set (a contended attempt's: acquireLoop's cap), the
	// acquisition's SET asks each node for the key's holder (SET ... GET),
	// and refused collects the tokens of the nodes that refused it.
	refused *refusals
}

// refusals are the holders' tokens that refused an acquisition's SET, one
// per refusing node, in the order they came; safe for concurrent use.
type refusals struct {
	mu     sync.Mutex
	tokens []string
}

func (r *refusals) add(token string) {
	r.mu.Lock()
	r.tokens = append(r.tokens, token)
	r.mu.Unlock()
}

// holder returns the token that refused on at least need nodes among the
// refusals in so far: the key's holder on a quorum. It returns "" if no
// token did.
func (r *refusals) holder(need int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range r.tokens {
		if len(r.tokens)-i < need {
			break
		}
		count := 0
		for _, u := range r.tokens[i:] {
			if u == t {
				count++
			}
		}
		if count >= need {
			return t
		}
	}
	return ""
}

func newCmdArgs(key, token string, ttl time.Duration, channel any) cmdArgs {
	return cmdArgs{key: key, token: token, ttl: ttl.Milliseconds(), channel: channel, lane: laneOf(key)}
}

// setNX sends SET key token NX PX ttl (step 1). It reports true if the node
// stored the key, and false if the key already existed: Redis answers OK or
// a null reply, and anything else is not agreement.
func (n *node) setNX(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	var (
		reply any
		err   error
	)
	switch {
	case n.acks > 0:
		reply, err = n.acked(ctx, deadline, "SET", 0, 1, a.key, a.token, "NX", "PX", a.ttl)
	case a.refused != nil && !n.noGet.Load():
		reply, err = n.send(ctx, deadline, a.lane, &a.unsent, "SET", 0, 1, a.key, a.token, "NX", "PX", a.ttl, "GET")
		yes, err := n.setGetReply(reply, err, deadline, a)
		if err != errNoGet {
			return yes, err
		}
		// The server knows no GET with NX, and stored nothing: plain
		// SET NX, once (marked in a.fellBack, as a late SET).
		reply, err = n.send(ctx, deadline, a.lane, nil, "SET", 0, 1, a.key, a.token, "NX", "PX", a.ttl)
	default:
		reply, err = n.send(ctx, deadline, a.lane, &a.unsent, "SET", 0, 1, a.key, a.token, "NX", "PX", a.ttl)
	}
	return n.setReply(reply, err, deadline)
}

// setGetReply reads a node's reply to SET key token NX PX ttl GET (Redis
// 7.0 and later): a null reply if the key was absent and is now set, the
// holder's token if it was not. A refusal's token other than a's own is
// kept in a.refused (set); a's own is a SET that the driver sent twice,
// and names no other holder. A syntax error (a server before 7.0, which
// knows no GET with NX, and stored nothing) marks the node, whose
// contended attempts send plain SET NX from then on, and returns
// errNoGet: the caller sends this one again as plain SET NX.
func (n *node) setGetReply(reply any, err error, deadline time.Time, a *cmdArgs) (bool, error) {
	if err != nil {
		if refusesGet(err) {
			n.noGet.Store(true)
			// The plain SET NX that follows enters the pipe later than
			// a's unsent bit says: a release may overtake it.
			a.fellBack.Or(1 << n.index)
			return false, errNoGet
		}
		return false, err
	}
	if reply == nil {
		return true, nil
	}
	token, ok := reply.(string)
	if !ok {
		return false, n.fail(fmt.Errorf("redlock: unexpected reply %v to SET NX GET", reply), deadline)
	}
	if token != a.token {
		a.refused.add(token)
	}
	return false, nil
}

// setReply reads a node's reply to SET NX, as setNX does.
func (n *node) setReply(reply any, err error, deadline time.Time) (bool, error) {
	if err != nil || reply == nil {
		return false, err
	}
	if reply != "OK" {
		return false, n.fail(fmt.Errorf("redlock: unexpected reply %v to SET NX", reply), deadline)
	}
	return true, nil
}

// errNoGet is setGetReply's answer to a server that knows no GET with NX.
var errNoGet = errors.New("redlock: SET ... NX GET refused: the server is older than Redis 7.0")

// refusesGet reports whether err is the syntax error with which a server
// before Redis 7.0 refuses SET ... NX GET (and stores nothing). Other
// error replies, generic ones included, fail the node as before.
func refusesGet(err error) bool {
	rerr, ok := replyErrorIn(err)
	return ok && strings.HasPrefix(strings.ToLower(string(rerr)), "err syntax error")
}

// setNXAsync is setNX as an asyncOp, for a node without WithReplicaAcks,
// kept in a (an acquisition's, used once).
func (a *cmdArgs) setNXAsync() *asyncOp {
	a.setArgs = [5]any{a.key, a.token, "NX", "PX", a.ttl}
	a.setOp = asyncOp{name: "SET", numKeys: 1, args: a.setArgs[:], lane: a.lane, unsent: &a.unsent, read: readSetNX}
	if a.refused != nil {
		a.setOp.args = append(a.setArgs[:5:5], "GET")
		a.setOp.get = true
		a.setOp.read = func(n *node, reply any, err error, deadline time.Time) (bool, error, bool) {
			yes, err := n.setGetReply(reply, err, deadline, a)
			return yes, err, err == errNoGet // then setNX, plain, on a goroutine
		}
	}
	return &a.setOp
}

func readSetNX(n *node, reply any, err error, deadline time.Time) (bool, error, bool) {
	yes, err := n.setReply(reply, err, deadline)
	return yes, err, false
}

// An asyncOp is a round's op (round.async) as one command and the reading
// of its reply, so that fanout can hand it to a node's pipe without a
// goroutine waiting for it (pipe.submit). read turns the reply, or the
// node's error, into the op's answer; retry asks fanout to run the round's
// op instead, on a goroutine (after NOSCRIPT, say).
type asyncOp struct {
	name              string
	firstKey, numKeys int
	args              []any
	get               bool // SET ... NX GET: not for a node marked noGet
	lane              int
	unsent            *atomic.Uint64
	read              func(n *node, reply any, err error, deadline time.Time) (yes bool, _ error, retry bool)
}

// submit hands the async op to the node's pipe; then.answer runs with the
// call, its reply set, once a batch has carried it.
func (n *node) submit(ctx context.Context, deadline time.Time, a *asyncOp, then answerer) {
	p := &n.pipe
	c := p.newCall(ctx, deadline, a.name, a.firstKey, a.numKeys, a.args)
	c.unsent, c.bit, c.lane = a.unsent, 1<<n.index, 1<<(a.lane&(lanes-1))
	c.then, c.node = then, n
	p.submit(n.pool, c)
}

// setNXFenced is setNX that also reads the node's fencing counter in the
// same atomic step (fencing, round 1). It reports the counter and whether
// the node stored the key.
func (n *node) setNXFenced(ctx context.Context, deadline time.Time, a *cmdArgs) (uint64, bool, error) {
	reply, err := n.evalMarking(ctx, deadline, a, &acquireFencedScript, a.key, a.fenceKey, a.token, a.ttl)
	if err != nil || reply == nil { // a null reply: the key is held
		return 0, false, err
	}
	counter, ok := reply.(int64)
	if !ok || counter < 0 {
		// As for SET NX: a reply no Redis sends fails the node, so that
		// a lost round releases it, rather than counting as a refusal.
		return 0, false, n.fail(fmt.Errorf("redlock: unexpected reply %v to the fenced SET", reply), deadline)
	}
	return uint64(counter), true, nil
}

// raiseFence raises the node's fencing counter to fence while the key still
// holds the token (fencing, round 2). It reports true if it did. A node that
// holds the key but whose counter is not below fence fails with
// errFenceAhead, so that a lost round releases it.
func (n *node) raiseFence(ctx context.Context, deadline time.Time, a *cmdArgs, fence uint64) (bool, error) {
	reply, err := n.eval(ctx, deadline, a.lane, &raiseFenceScript, a.key, a.fenceKey, a.token, int64(fence))
	if reply == int64(2) {
		return false, n.nodeError(errFenceAhead)
	}
	return reply == int64(1), err
}

var errFenceAhead = errors.New("redlock: fencing counter not below the token")

// extend runs the extend script (step 5). It reports true if the key still
// held the token and its ttl was reset, and gone if the node had no key at
// all (it may have lost it in a restart: Lock.Extend re-seeds it).
func (n *node) extend(ctx context.Context, deadline time.Time, a *cmdArgs) (ok, gone bool, err error) {
	reply, err := n.eval(ctx, deadline, a.lane, &extendScript, a.key, a.token, a.ttl)
	return reply == int64(1), reply == int64(2), err
}

// release runs the release script (step 4 and Unlock). It reports true once
// the node answered: afterwards the node holds no key with the token,
// whether the script deleted it or found it gone.
func (n *node) release(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	_, err := n.eval(ctx, deadline, a.lane, &releaseScript, a.key, a.token, a.channel)
	return err == nil, err
}

// releaseOwned is release for Unlock: it reports true if the node deleted
// the key, and false if the key was gone or held another token.
func (n *node) releaseOwned(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	reply, err := n.eval(ctx, deadline, a.lane, &releaseScript, a.key, a.token, a.channel)
	return reply == int64(1), err
}

// releaseOwnedAsync is releaseOwned as an asyncOp whose answer goes through
// account. A node that does not have the script cached answers NOSCRIPT,
// and the round's op runs instead (it resends by EVAL).
func releaseOwnedAsync(a *cmdArgs, account func(n *node, deleted bool, err error) (bool, error)) *asyncOp {
	s := &releaseScript
	op := &struct { // the op and its arguments in one allocation
		asyncOp
		args [5]any
	}{}
	op.args = [5]any{s.hashArg, s.keysArg, a.key, a.token, a.channel}
	op.asyncOp = asyncOp{
		name: "EVALSHA", firstKey: 2, numKeys: s.keys,
		args: op.args[:],
		lane: a.lane,
		read: func(n *node, reply any, err error, _ time.Time) (bool, error, bool) {
			if replyCode(err) == "NOSCRIPT" {
				return false, nil, true
			}
			yes, err := account(n, reply == int64(1), err)
			return yes, err, false
		},
	}
	return &op.asyncOp
}

// command sends one command in lane 0 and waits for its reply at most until
// deadline. A failure, including an error reply, comes back as a nil reply
// and a *NodeError.
func (n *node) command(ctx context.Context, deadline time.Time, cmd driver.Command) (any, error) {
	return n.send(ctx, deadline, 0, nil, cmd.Name, cmd.FirstKey, cmd.NumKeys, cmd.Args...)
}

// send sends the command name with args (the keys are the numKeys from
// firstKey) through the node's pipe, in the lane of its key (laneOf), so
// that concurrent callers share round trips while one key's commands keep
// their order, and classifies the reply. It clears this node's bit in
// unsent, if given, the moment the command takes its place in the pipe.
func (n *node) send(ctx context.Context, deadline time.Time, lane int, unsent *atomic.Uint64, name string, firstKey, numKeys int, args ...any) (any, error) {
	p := &n.pipe
	c := p.newCall(ctx, deadline, name, firstKey, numKeys, args)
	c.unsent, c.bit, c.lane = unsent, 1<<n.index, 1<<(lane&(lanes-1))
	switch p.send(n.pool, c, n.sole) {
	case leftQueue:
		p.recycle(c)
		return nil, n.fail(ErrNodeTimeout, deadline)
	case leftBatch: // the batch's runner may still write c: not recycled
		return nil, n.fail(ErrNodeTimeout, deadline)
	}
	reply, err := n.result(c)
	p.recycle(c)
	return reply, err
}

// result classifies an answered call's reply: a failure, including an
// error reply, comes back as a nil reply and a *NodeError.
func (n *node) result(c *call) (any, error) {
	reply, err := classify(c.reply)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() == nil {
			// The only deadline the driver had that ctx does not carry is
			// the node's: a driver that enforces it a little early (rueidis
			// does) has still timed out.
			err = ErrNodeTimeout
		}
		return nil, n.fail(err, c.deadline)
	}
	return reply, nil
}

// eval runs a script by EVALSHA, falling back to EVAL when the node does not
// have it cached yet (after a restart or SCRIPT FLUSH). EVAL caches it again.
// keysAndArgs holds the script's s.keys keys, then its arguments: four at
// most.
func (n *node) eval(ctx context.Context, deadline time.Time, lane int, s *script, keysAndArgs ...any) (any, error) {
	return n.evalScript(ctx, deadline, lane, nil, nil, s, keysAndArgs)
}

// evalMarking is eval for an acquisition's SET: it clears this node's bit in
// a.unsent as send does, and records in a.fellBack a fallback to EVAL, which
// enters the pipe later than the EVALSHA did.
func (n *node) evalMarking(ctx context.Context, deadline time.Time, a *cmdArgs, s *script, keysAndArgs ...any) (any, error) {
	return n.evalScript(ctx, deadline, a.lane, &a.unsent, &a.fellBack, s, keysAndArgs)
}

func (n *node) evalScript(ctx context.Context, deadline time.Time, lane int, unsent, fellBack *atomic.Uint64, s *script, keysAndArgs []any) (any, error) {
	var buf [6]any
	args := append(append(buf[:0], s.hashArg, s.keysArg), keysAndArgs...)
	if n.acks > 0 && s.acked {
		reply, err := n.acked(ctx, deadline, "EVALSHA", 2, s.keys, args...)
		// NOSCRIPT wrote nothing; resend by EVAL unless the WAIT behind it
		// already found the replicas lagging (acked reports that instead).
		if replyCode(err) == "NOSCRIPT" {
			args[0] = s.srcArg
			reply, err = n.acked(ctx, deadline, "EVAL", 2, s.keys, args...)
		}
		return reply, err
	}
	reply, err := n.send(ctx, deadline, lane, unsent, "EVALSHA", 2, s.keys, args...)
	if replyCode(err) == "NOSCRIPT" {
		if fellBack != nil {
			fellBack.Or(1 << n.index)
		}
		args[0] = s.srcArg
		reply, err = n.send(ctx, deadline, lane, nil, "EVAL", 2, s.keys, args...)
	}
	return reply, err
}

// acked sends a write followed by WAIT n.acks (WithReplicaAcks) as one
// batch of its own, straight to the Pool: WAIT blocks its connection until
// the replicas answer, so it must not share a pipe batch with other
// callers' commands, and it must follow the write on the same connection,
// which one Exec guarantees. The write's reply is returned only if WAIT
// reports n.acks replicas; otherwise the node fails with ErrReplicaAcks. A
// null reply (a SET NX refused) wrote nothing and is returned as it is.
//
// Such a write never clears its bit in cmdArgs.unsent: a release sent
// through the pipe while it is in flight may reach the node before it, so
// Lock.letGo counts it as overtaken, and a straggler releases what it may
// have written (round.overtaken).
func (n *node) acked(ctx context.Context, deadline time.Time, name string, firstKey, numKeys int, args ...any) (any, error) {
	// WAIT's own timeout, in ms: half of what is left, so that its reply
	// (fewer replicas) arrives before the node's deadline although the
	// server fires it on its timer (every 100 ms at the default hz 10).
	wait := (time.Until(deadline) / 2).Milliseconds()
	if wait < 1 {
		return nil, n.fail(ErrNodeTimeout, deadline)
	}
	cmds := []driver.Command{
		{Name: name, Args: append([]any(nil), args...), FirstKey: firstKey, NumKeys: numKeys},
		{Name: "WAIT", Args: []any{n.acks, wait}},
	}
	replies := []driver.Reply{{Value: unanswered{}}, {Value: unanswered{}}}
	ctx, cancel := byDeadline(ctx, deadline)
	defer cancel()
	if err := n.pool.Exec(ctx, cmds, replies); err != nil {
		return nil, n.fail(err, deadline)
	}
	reply, err := classify(replies[0])
	got, werr := classify(replies[1])
	acks, _ := got.(int64)
	switch {
	case reply == nil && replyCode(err) == "NOSCRIPT" && werr == nil && acks < n.acks:
		// Nothing written, and even this connection's earlier writes have
		// not reached the replicas: a resend could not win in time.
		return nil, n.nodeError(fmt.Errorf("%w: %d of %d (the script was not cached)", ErrReplicaAcks, acks, n.acks))
	case err != nil || reply == nil:
		return nil, n.fail(err, deadline)
	case werr != nil:
		return nil, n.fail(werr, deadline)
	case acks < n.acks:
		return nil, n.nodeError(fmt.Errorf("%w: %v of %d", ErrReplicaAcks, got, n.acks))
	}
	return reply, nil
}

// fail wraps a node's error. An error at or past the deadline is reported as
// ErrNodeTimeout, whatever the driver called it, unless it is an error reply:
// the server's own words are kept.
func (n *node) fail(err error, deadline time.Time) error {
	if err == nil {
		return nil
	}
	if replyCode(err) == "" && !time.Now().Before(deadline) {
		err = ErrNodeTimeout
	}
	return n.nodeError(err)
}

func (n *node) nodeError(err error) *NodeError {
	return &NodeError{Node: n.index, Addr: n.name, Err: err}
}

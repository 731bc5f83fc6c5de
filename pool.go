package redlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A Pool is the port to one independent Redis master: it lends connections.
// Redigo's *redis.Pool satisfies it, so existing pools can be passed to New.
//
// The connections it returns must implement redis.ConnWithTimeout, as
// redigo's do: every command is sent with a read deadline. They should also
// have a write timeout (redis.DialWriteTimeout; NewPool sets one): a write
// that blocks holds up the node's later commands. Redlock does not rely on
// the Pool to honour the context's deadline; a node that does not answer in
// time is counted as failed and left to finish in the background.
type Pool interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// Production defaults for NewPool. They are a backstop for connections that
// linger after Redlock stopped waiting for them; the per-call bound is the
// client's node timeout.
const (
	poolIOTimeout   = time.Second
	poolMaxIdle     = 64
	poolIdleTimeout = 5 * time.Minute
	poolCheckIdle   = 30 * time.Second // PING connections idle longer than this
)

// NewPool returns a connection pool for the Redis master at addr ("host:port")
// with defaults suited to a lock client: one-second connect, TLS handshake, read
// and write timeouts; up to 64 idle connections, closed after five idle
// minutes; and a PING on borrow for connections idle longer than 30 seconds.
//
// opts are applied after the defaults and so override them. TLS
// (redis.DialUseTLS, redis.DialTLSConfig) and ACL users (redis.DialUsername,
// redis.DialPassword) pass straight through.
func NewPool(addr string, opts ...redis.DialOption) *redis.Pool {
	dialOpts := append([]redis.DialOption{
		redis.DialConnectTimeout(poolIOTimeout),
		redis.DialTLSHandshakeTimeout(poolIOTimeout),
		redis.DialReadTimeout(poolIOTimeout),
		redis.DialWriteTimeout(poolIOTimeout),
	}, opts...)
	return &redis.Pool{
		MaxIdle:     poolMaxIdle,
		IdleTimeout: poolIdleTimeout,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, dialOpts...)
		},
		TestOnBorrowContext: func(ctx context.Context, c redis.Conn, lastUsed time.Time) error {
			if time.Since(lastUsed) < poolCheckIdle {
				return nil
			}
			timeout := poolIOTimeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = time.Until(dl)
			}
			_, err := redis.DoWithTimeout(c, timeout, "PING")
			return err
		},
	}
}

// The compare-and-set scripts. They act only while the key still holds the
// caller's token, so only the holder can extend or release a lock, or raise
// its fencing counter.
var (
	//go:embed scripts/release.lua
	releaseSource string
	releaseScript = newScript(releaseSource, 1)

	//go:embed scripts/extend.lua
	extendSource string
	extendScript = newScript(extendSource, 1)

	//go:embed scripts/acquire_fenced.lua
	acquireFencedSource string
	acquireFencedScript = newScript(acquireFencedSource, 2)

	//go:embed scripts/raise_fence.lua
	raiseFenceSource string
	raiseFenceScript = newScript(raiseFenceSource, 2)
)

type script struct {
	src  string
	hash string // SHA1 of src, as EVALSHA wants it
	keys int    // how many of the arguments are keys

	srcArg, hashArg, keysArg any // the above as command arguments, converted once
}

func newScript(src string, keys int) script {
	h := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(h[:])
	return script{src: src, hash: hash, keys: keys, srcArg: src, hashArg: hash, keysArg: keys}
}

// fenceKey names the fencing counter of a lock key. It has no ttl: the
// counter must outlive every lock on the key (docs/fencing.md).
func fenceKey(key string) string { return "redlock:fence:" + key }

// A node is one Redis master as the quorum sees it.
type node struct {
	index int
	pool  Pool
	pipe  pipe // batches the commands of concurrent callers (pipe.go)
}

// cmdArgs are one operation's command arguments, converted to interface
// values once for all nodes rather than once per node and command.
type cmdArgs struct {
	key, token, ttl any // ttl in milliseconds, as PX and PEXPIRE take it
	fenceKey        any // the key's fencing counter, with WithFencing

	// unsent has a bit for each node whose SET has not yet taken its place
	// in the node's pipe; fellBack, for each node whose fenced SET had to be
	// resent by EVAL after NOSCRIPT (acquisitions only; see Lock.overtakenAt).
	unsent, fellBack atomic.Uint64
}

// setNX sends SET key token NX PX ttl (step 1). It reports true if the node
// stored the key and false if the key already existed.
func (n *node) setNX(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	reply, err := n.send(ctx, deadline, &a.unsent, "SET", a.key, a.token, "NX", "PX", a.ttl)
	return reply != nil, err
}

// setNXFenced is setNX that also reads the node's fencing counter in the
// same atomic step (fencing, round 1). It reports the counter and whether
// the node stored the key.
func (n *node) setNXFenced(ctx context.Context, deadline time.Time, a *cmdArgs) (uint64, bool, error) {
	reply, err := n.evalMarking(ctx, deadline, a, &acquireFencedScript, a.key, a.fenceKey, a.token, a.ttl)
	counter, ok := reply.(int64)
	if !ok || counter < 0 {
		return 0, false, err
	}
	return uint64(counter), true, err
}

// raiseFence raises the node's fencing counter to fence while the key still
// holds the token (fencing, round 2). It reports true if it did. A node that
// holds the key but whose counter is not below fence fails with
// errFenceAhead, so that a lost round releases it.
func (n *node) raiseFence(ctx context.Context, deadline time.Time, a *cmdArgs, fence uint64) (bool, error) {
	reply, err := n.eval(ctx, deadline, &raiseFenceScript, a.key, a.fenceKey, a.token, fence)
	if reply == int64(2) {
		return false, &NodeError{Node: n.index, Err: errFenceAhead}
	}
	return reply == int64(1), err
}

var errFenceAhead = errors.New("redlock: fencing counter not below the token")

// extend runs the extend script (step 5). It reports true if the key still
// held the token and its ttl was reset.
func (n *node) extend(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	reply, err := n.eval(ctx, deadline, &extendScript, a.key, a.token, a.ttl)
	return reply == int64(1), err
}

// release runs the release script (step 4 and Unlock). It reports true once
// the node answered: afterwards the node holds no key with the token,
// whether the script deleted it or found it gone.
func (n *node) release(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	_, err := n.eval(ctx, deadline, &releaseScript, a.key, a.token)
	return err == nil, err
}

// command sends one command and waits for its reply at most until deadline.
// It goes through the node's pipe, so concurrent callers share round trips.
// A failure, including an error reply, comes back as a nil reply and a
// *NodeError.
func (n *node) command(ctx context.Context, deadline time.Time, cmd string, args ...any) (any, error) {
	return n.send(ctx, deadline, nil, cmd, args...)
}

// send is command that also clears this node's bit in unsent, if given, the
// moment the command takes its place in the node's pipe.
func (n *node) send(ctx context.Context, deadline time.Time, unsent *atomic.Uint64, cmd string, args ...any) (any, error) {
	c := n.pipe.newCall(ctx, deadline, cmd, args)
	c.unsent, c.bit = unsent, 1<<n.index
	n.pipe.send(n.pool, c)
	reply, err := c.reply, c.err
	n.pipe.recycle(c)
	if err != nil {
		return nil, n.fail(err, deadline)
	}
	return reply, nil
}

// eval runs a script by EVALSHA, falling back to EVAL when the node does not
// have it cached yet (after a restart or SCRIPT FLUSH). EVAL caches it again.
// keysAndArgs holds the script's s.keys keys, then its arguments: four at
// most.
func (n *node) eval(ctx context.Context, deadline time.Time, s *script, keysAndArgs ...any) (any, error) {
	return n.evalMarking(ctx, deadline, nil, s, keysAndArgs...)
}

// evalMarking is eval for an acquisition's SET: it clears this node's bit in
// a.unsent as send does, and records in a.fellBack a fallback to EVAL, which
// enters the pipe later than the EVALSHA did.
func (n *node) evalMarking(ctx context.Context, deadline time.Time, a *cmdArgs, s *script, keysAndArgs ...any) (any, error) {
	var unsent *atomic.Uint64
	if a != nil {
		unsent = &a.unsent
	}
	var buf [6]any
	evalArgs := append(append(buf[:0], s.hashArg, s.keysArg), keysAndArgs...)
	reply, err := n.send(ctx, deadline, unsent, "EVALSHA", evalArgs...)
	if isNoScript(err) {
		if a != nil {
			a.fellBack.Or(1 << n.index)
		}
		evalArgs[0] = s.srcArg
		reply, err = n.command(ctx, deadline, "EVAL", evalArgs...)
	}
	return reply, err
}

// fail wraps a node's error. An error at or past the deadline is reported as
// ErrNodeTimeout, whatever the driver called it.
func (n *node) fail(err error, deadline time.Time) error {
	if err == nil {
		return nil
	}
	if !time.Now().Before(deadline) {
		err = ErrNodeTimeout
	}
	return &NodeError{Node: n.index, Err: err}
}

// doUntil sends one command with a read deadline. A zero read timeout would
// mean "none" to redigo, so a deadline already passed fails at once. Note
// that redigo returns an error reply (NOPERM, OOM, LOADING...) as both a
// non-nil reply and an error; callers must look at the error first.
func doUntil(conn redis.Conn, deadline time.Time, cmd string, args ...any) (any, error) {
	timeout := time.Until(deadline)
	if timeout <= 0 {
		return nil, ErrNodeTimeout
	}
	return redis.DoWithTimeout(conn, timeout, cmd, args...)
}

func isNoScript(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "NOSCRIPT")
}

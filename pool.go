package redlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A Pool is the port to one independent Redis master: it lends connections.
// Redigo's *redis.Pool satisfies it, so existing pools can be passed to New.
//
// The connections it returns must implement redis.ConnWithTimeout, as
// redigo's do: every command is sent with a read deadline. Redlock does not
// rely on the Pool to honour the context's deadline; a node that does not
// answer in time is counted as failed and left to finish in the background.
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
// caller's token, so only the holder can extend or release a lock.
var (
	//go:embed scripts/release.lua
	releaseSource string
	releaseScript = newScript(releaseSource)

	//go:embed scripts/extend.lua
	extendSource string
	extendScript = newScript(extendSource)
)

type script struct {
	src  string
	hash string // SHA1 of src, as EVALSHA wants it

	srcArg, hashArg any // src and hash as command arguments, converted once
}

func newScript(src string) script {
	h := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(h[:])
	return script{src: src, hash: hash, srcArg: src, hashArg: hash}
}

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
}

// setNX sends SET key token NX PX ttl (step 1). It reports true if the node
// stored the key and false if the key already existed.
func (n *node) setNX(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	reply, err := n.command(ctx, deadline, "SET", a.key, a.token, "NX", "PX", a.ttl)
	return reply != nil, err
}

// extend runs the extend script (step 5). It reports true if the key still
// held token and its ttl was reset.
func (n *node) extend(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	reply, err := n.eval(ctx, deadline, &extendScript, a.key, a.token, a.ttl)
	return reply == int64(1), err
}

// release runs the release script (step 4 and Unlock). It reports true once
// the node answered: afterwards the node holds no key with token, whether the
// script deleted it or found it gone.
func (n *node) release(ctx context.Context, deadline time.Time, a *cmdArgs) (bool, error) {
	_, err := n.eval(ctx, deadline, &releaseScript, a.key, a.token)
	return err == nil, err
}

// command sends one command and waits for its reply at most until deadline.
// It goes through the node's pipe, so concurrent callers share round trips.
// A failure comes back as a *NodeError.
func (n *node) command(ctx context.Context, deadline time.Time, cmd string, args ...any) (any, error) {
	c := newCall(ctx, deadline, cmd, args)
	n.pipe.send(n.pool, c)
	reply, err := c.reply, c.err
	c.free()
	return reply, n.fail(err, deadline)
}

// eval runs a script on one key by EVALSHA, falling back to EVAL when the
// node does not have it cached yet (after a restart or SCRIPT FLUSH). EVAL
// caches it again. args are at most two.
func (n *node) eval(ctx context.Context, deadline time.Time, s *script, key any, args ...any) (any, error) {
	var buf [5]any
	evalArgs := append(append(buf[:0], s.hashArg, oneKey, key), args...)
	reply, err := n.command(ctx, deadline, "EVALSHA", evalArgs...)
	if isNoScript(err) {
		evalArgs[0] = s.srcArg
		reply, err = n.command(ctx, deadline, "EVAL", evalArgs...)
	}
	return reply, err
}

// oneKey is EVAL's numkeys argument for scripts on one key.
var oneKey any = 1

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
// mean "none" to redigo, so a deadline already passed fails at once.
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

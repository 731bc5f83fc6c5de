// Package redigo is redlock's adapter for redigo
// (github.com/gomodule/redigo), the root module's own Redis client: NewPool
// makes the Pool of one Redis master, and a *redis.Pool that a program
// already has plugs in as a Pool.
package redigo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/driver"
)

// A Pool is one Redis master's redlock.Pool, on redigo. It
// embeds the *redis.Pool it borrows connections from, so Get, Close and
// Stats work on it as on the pool itself, and names its master by Addr.
//
// A *redis.Pool that a program already has plugs in as
//
//	redigo.Pool{Pool: pool, Addr: "redis-a:6379"}
//
// Addr only names the master in errors; the pool's Dial decides where it
// connects. A batch goes out as one pipeline on one borrowed connection, its
// replies read back with a read deadline at ctx's deadline, so a silent
// master costs at most the node timeout. The pool's connections must
// implement redis.ConnWithTimeout, as redigo's own do, and should have a
// write timeout (redis.DialWriteTimeout; NewPool sets one).
type Pool struct {
	*redis.Pool
	Addr string

	// fromNewPool: the pool was made by NewPool, whose dialling and reading
	// follow ctx (HonorsDeadline) and which dials addr alone (SingleServer).
	fromNewPool bool
}

var (
	_ driver.Pool            = (*Pool)(nil)
	_ driver.Validator       = (*Pool)(nil)
	_ driver.Namer           = (*Pool)(nil)
	_ driver.Subscriber      = (*Pool)(nil)
	_ driver.DeadlineHonorer = (*Pool)(nil)
	_ driver.SingleServer    = (*Pool)(nil)
)

// Production defaults for NewPool. They are a backstop for connections that
// linger after Redlock stopped waiting for them; the per-call bound is the
// client's node timeout.
const (
	poolIOTimeout   = time.Second
	poolMaxIdle     = 64
	poolIdleTimeout = 5 * time.Minute
	poolCheckIdle   = 30 * time.Second // PING connections idle longer than this
)

// NewPool returns a redigo connection pool for the Redis master at addr
// ("host:port") with defaults suited to a lock client: one-second connect,
// TLS handshake, read and write timeouts; up to 64 idle connections, closed
// after five idle minutes; and a PING on borrow for connections idle longer
// than 30 seconds.
//
// opts are applied after the defaults and so override them. TLS
// (redis.DialUseTLS, redis.DialTLSConfig) and ACL users (redis.DialUsername,
// redis.DialPassword) pass straight through. Close the pool when done.
func NewPool(addr string, opts ...redis.DialOption) *Pool {
	dialOpts := append([]redis.DialOption{
		redis.DialConnectTimeout(poolIOTimeout),
		redis.DialTLSHandshakeTimeout(poolIOTimeout),
		redis.DialReadTimeout(poolIOTimeout),
		redis.DialWriteTimeout(poolIOTimeout),
	}, opts...)
	return &Pool{Addr: addr, fromNewPool: true, Pool: &redis.Pool{
		MaxIdle:     poolMaxIdle,
		IdleTimeout: poolIdleTimeout,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			opts := dialOpts
			if dl, ok := ctx.Deadline(); ok {
				// redigo's TLS handshake does not look at ctx, only at its
				// own timeout: end it at ctx's deadline too (HonorsDeadline).
				left := time.Until(dl)
				if left <= 0 {
					return nil, context.DeadlineExceeded
				}
				opts = append(dialOpts[:len(dialOpts):len(dialOpts)], redis.DialTLSHandshakeTimeout(min(left, poolIOTimeout)))
			}
			return redis.DialContext(ctx, "tcp", addr, opts...)
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
	}}
}

// HonorsDeadline implements DeadlineHonorer. It reports true for a pool made
// by NewPool: dialling (the TLS handshake, AUTH, CLIENT SETNAME and SELECT
// included) follows ctx, the PING on borrow and every read have a deadline
// at ctx's, and a connection whose read timed out is discarded, so that the
// next batch starts on an empty one. Writes keep the connection's write
// timeout (one second), but a write waits only while the kernel's send
// buffer is full, which a batch of lock commands (a few hundred bytes per
// caller) fills only with thousands of callers queued on one unreachable
// master. A Pool built around a program's own *redis.Pool reports
// false: its Dial may ignore ctx.
func (p *Pool) HonorsDeadline() bool { return p != nil && p.fromNewPool }

// SingleServer implements driver.SingleServer. It reports true for a pool
// made by NewPool, which dials addr and nothing else, so the core may
// combine several keys' releases into one script call. A Pool built around
// a program's own *redis.Pool reports false: its Dial may reach a proxy
// that spreads keys over several servers. If addr itself is such a proxy,
// one that routes a script by its first key, build the Pool around
// NewPool(addr).Pool instead (docs/drivers.md).
func (p *Pool) SingleServer() bool { return p != nil && p.fromNewPool }

// Name returns Addr.
func (p *Pool) Name() string {
	if p == nil {
		return ""
	}
	return p.Addr
}

// errNoPool is what a Pool without a *redis.Pool returns from Valid, Exec
// and Subscribe: Pool{Addr: a} without its Pool field, or a nil *Pool.
var errNoPool = errors.New("redlock/redigo: the Pool has no *redis.Pool (use NewPool, or set Pool)")

// Valid implements driver.Validator: redlock.New refuses a Pool that has
// no *redis.Pool, rather than every lock failing later.
func (p *Pool) Valid() error {
	if p == nil || p.Pool == nil {
		return errNoPool
	}
	return nil
}

// Exec sends cmds on one connection from the pool: a single command by
// DoWithTimeout, several as one pipeline. See driver.Pool.
func (p *Pool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if err := p.Valid(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Cancelled with its deadline still ahead: redigo would take an
		// idle connection and send anyway, a write to be undone.
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(poolIOTimeout)
	}
	conn, err := p.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()

	if len(cmds) == 1 {
		// A zero timeout would mean "none" to redigo.
		timeout := time.Until(deadline)
		if timeout <= 0 {
			return context.DeadlineExceeded
		}
		v, err := redis.DoWithTimeout(conn, timeout, cmds[0].Name, cmds[0].Args...)
		return redigoReply(&replies[0], v, err)
	}
	for _, c := range cmds {
		if err := conn.Send(c.Name, c.Args...); err != nil {
			return err
		}
	}
	// Flush and read even if the deadline passed during the sends: commands
	// left pending would make Close wait for their replies with the
	// connection's own read timeout. A read that times out breaks the
	// connection instead, and the pool discards it.
	wait := max(time.Until(deadline), time.Nanosecond)
	all, err := redis.Values(redis.DoWithTimeout(conn, wait, ""))
	if err != nil {
		return err
	}
	if len(all) != len(cmds) {
		return errPipeReplies
	}
	for i, v := range all {
		replies[i] = driver.Reply{Value: v}
		if rerr, ok := v.(redis.Error); ok {
			replies[i] = driver.Reply{Err: driver.ReplyError(rerr)}
		}
	}
	return nil
}

var errPipeReplies = errors.New("redlock/redigo: pipelined reply count does not match")

// redigoReply stores one DoWithTimeout result in r. redigo returns an error
// reply as both a non-nil reply and a redis.Error: that is the command's
// answer. Any other error broke the connection, and so the batch.
func redigoReply(r *driver.Reply, v any, err error) error {
	switch err := err.(type) {
	case nil:
		*r = driver.Reply{Value: v}
	case redis.Error: // as redigo returns it; errors.As would allocate
		*r = driver.Reply{Err: driver.ReplyError(err)}
	default:
		return err
	}
	return nil
}

// pubsubPing is how often Subscribe checks that its connection still works:
// it sends a PING at this interval and gives up when nothing at all has come
// back for two intervals.
const pubsubPing = 15 * time.Second

// Subscribe implements Subscriber on a connection dialled for it alone, not
// borrowed from the pool, so that it never returns to the pool subscribed.
// The goroutine that calls it reads; a second one writes: the changes of
// sub's channels, and a PING every pubsubPing (redigo allows one writer
// beside the one reader).
func (p *Pool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	if err := p.Valid(); err != nil {
		return err
	}
	conn, err := p.dial(ctx)
	if err != nil {
		return err
	}
	psc := redis.PubSubConn{Conn: conn}
	// The writer below is gone before Subscribe returns: it reads sub.
	// Deferred first, so that it runs after the connection is closed,
	// which ends a write of the writer's that would block.
	var writer sync.WaitGroup
	defer writer.Wait()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // ends a blocked Receive
	defer func() {
		if stop() {
			conn.Close()
		}
	}()
	// Any "unsubscribe" but the replies to those sent is the server's own,
	// and ends the subscription.
	var leaving driver.Unsubscribes
	have := make(map[string]bool)
	update := func() error {
		add, drop := sub.Diff(have)
		if len(add) > 0 {
			if err := psc.Subscribe(redis.Args{}.AddFlat(add)...); err != nil {
				return err
			}
		}
		if len(drop) > 0 {
			leaving.Sending(drop)
			if err := psc.Unsubscribe(redis.Args{}.AddFlat(drop)...); err != nil {
				return err
			}
		}
		return nil
	}
	if err := update(); err != nil {
		return ctxOr(ctx, err)
	}
	// Something arrives at least every pubsubPing: a message or a PONG.
	wrote := make(chan struct{})
	defer close(wrote)
	writer.Go(func() {
		ping := time.NewTicker(pubsubPing)
		defer ping.Stop()
		for {
			var err error
			select {
			case <-ping.C:
				err = psc.Ping("")
			case <-sub.Changed:
				err = update()
			case <-wrote:
				return
			}
			if err != nil {
				conn.Close() // the reader sees the broken connection
				return
			}
		}
	})
	for {
		switch m := psc.ReceiveWithTimeout(2 * pubsubPing).(type) {
		case redis.Message:
			sub.Deliver(m.Channel, string(m.Data))
		case redis.Subscription:
			switch m.Kind {
			case "subscribe":
				sub.Ready(m.Channel)
			case "unsubscribe":
				if !leaving.Confirmed(m.Channel) {
					return ctxOr(ctx, fmt.Errorf("redlock/redigo: the server ended the subscription to %s", m.Channel))
				}
			}
		case error:
			return ctxOr(ctx, m)
		}
	}
}

// dial makes a connection of its own with the pool's dialer.
func (p *Pool) dial(ctx context.Context) (redis.Conn, error) {
	switch {
	case p.Pool.DialContext != nil:
		return p.Pool.DialContext(ctx)
	case p.Pool.Dial != nil:
		return dialAside(ctx, p.Pool.Dial)
	}
	return nil, errors.New("redlock/redigo: the redigo pool has no Dial function")
}

// dialAside runs a program's Dial, which takes no ctx, on a goroutine of
// its own, so that Subscribe returns once ctx ends even while the dial
// hangs (a frozen server, and a Dial without timeouts: its AUTH or SELECT
// would wait for ever); the waker's Close waits for Subscribe. A
// connection the dial makes after that is closed.
func dialAside(ctx context.Context, dial func() (redis.Conn, error)) (redis.Conn, error) {
	type dialed struct {
		conn redis.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		conn, err := dial()
		done <- dialed{conn, err}
	}()
	select {
	case d := <-done:
		return d.conn, d.err
	case <-ctx.Done():
		go func() {
			if d := <-done; d.conn != nil {
				d.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// ctxOr returns ctx's error if it has ended, which explains err, and err
// otherwise.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

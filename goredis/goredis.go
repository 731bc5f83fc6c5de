package goredis

import (
	"context"
	"errors"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// Pool is the redlock.Pool for one go-redis client: one quorum member,
// which is a standalone master, a Sentinel-managed master or a whole Redis
// Cluster. Make one with NewPool; the zero Pool has no client. A Pool is
// safe for concurrent use, as its client is, and never closes the client.
type Pool struct {
	client redis.UniversalClient
	name   string
	err    error // why the client cannot be a member (Valid)
}

var (
	_ redlock.Pool           = (*Pool)(nil)
	_ driver.Namer           = (*Pool)(nil)
	_ driver.Validator       = (*Pool)(nil)
	_ driver.Subscriber      = (*Pool)(nil)
	_ driver.DeadlineHonorer = (*Pool)(nil)
	_ driver.SingleServer    = (*Pool)(nil)
)

// NewPool returns the Pool for client, named by the address in its options
// (see Name). A nil client, or a *redis.Ring, makes a Pool that redlock.New
// refuses with an error wrapping redlock.ErrInvalid (see Valid): a Ring
// moves keys between independent shards when a shard fails its health
// check, so a held lock could reappear absent on another shard (see the
// package doc).
func NewPool(client redis.UniversalClient) *Pool {
	return NewNamedPool(client, clientName(client))
}

// NewNamedPool is NewPool with the name given, for a client whose options
// do not carry its master's address: a Sentinel failover client, or one
// with a custom Dialer. A client NewPool refuses, it refuses too.
func NewNamedPool(client redis.UniversalClient, name string) *Pool {
	p := &Pool{client: client, name: name}
	if isNil(client) {
		p.err = errNilClient
	} else if _, ok := client.(*redis.Ring); ok {
		p.err = errRing
	}
	return p
}

// isNil reports whether client is nil, or a nil pointer of some client
// type (a typed nil in the interface, which a nil check misses).
func isNil(client redis.UniversalClient) bool {
	if client == nil {
		return true
	}
	v := reflect.ValueOf(client)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// unusable returns why p cannot send: errNilClient for the zero Pool (or a
// nil *Pool), or what Valid reports.
func (p *Pool) unusable() error {
	if p == nil || p.client == nil {
		return errNilClient
	}
	return p.err
}

var (
	errNilClient = errors.New("goredis: nil client")
	errRing      = errors.New("goredis: a *redis.Ring is not one Redlock member; make a Pool of each shard's *redis.Client instead")
)

// HonorsDeadline implements driver.DeadlineHonorer. It reports true for a
// *redis.Client of one standalone master, without TLS, whose options set
// ContextTimeoutEnabled and set neither ReadTimeout nor WriteTimeout to
// -2 (which turns the socket's deadlines off, ctx's too; -1, no timeout of
// go-redis's own, keeps ctx's): go-redis then sets every read and write
// deadline from ctx, and it waits for a pooled connection and dials under
// ctx. (A custom Dialer or
// hook that ignores ctx voids the promise; name such a client's Pool
// without it, or keep its hooks bounded.)
// Without ContextTimeoutEnabled go-redis ignores ctx's deadline on the
// socket and waits ReadTimeout and WriteTimeout instead; a TLS dial ignores
// ctx and waits DialTimeout (see Deadlines in the package doc). A Sentinel
// failover client
// resolves its master under a lock of its own, and a ClusterClient may
// reload the cluster's layout, neither bounded by ctx; they, and any other
// client, report false, so that the core's node timeout bounds them (see
// driver.DeadlineHonorer).
func (p *Pool) HonorsDeadline() bool {
	if p.unusable() != nil {
		return false
	}
	c, ok := p.client.(*redis.Client)
	if !ok {
		return false
	}
	opt := c.Options()
	// A negative ReadTimeout or WriteTimeout (-2 in go-redis's options)
	// turns the socket's deadlines off altogether, ctx's included.
	return opt.ContextTimeoutEnabled && opt.TLSConfig == nil && opt.Addr != failoverAddr &&
		opt.ReadTimeout >= 0 && opt.WriteTimeout >= 0
}

// SingleServer implements driver.SingleServer: a *redis.Client, of one
// standalone master or a Sentinel failover client, sends every command to
// its master, so the core may combine several keys' releases into one
// script call. A ClusterClient routes each command by its keys' slot and
// reports false, as does any other client.
func (p *Pool) SingleServer() bool {
	if p.unusable() != nil {
		return false
	}
	_, ok := p.client.(*redis.Client)
	return ok
}

// Valid implements driver.Validator: it reports a Pool without a client
// (the zero Pool, or one made of a nil client) or of a Ring.
func (p *Pool) Valid() error { return p.unusable() }

// failoverAddr is the placeholder address go-redis gives the options of a
// Sentinel failover client; it names no server.
const failoverAddr = "FailoverClient"

// clientName returns the address client's options name: a *redis.Client's
// Addr, "host:port"; a *redis.ClusterClient's seed addresses, joined by
// commas. It returns "" for no client (a typed nil too), a Sentinel
// failover client and any other implementation of redis.UniversalClient.
func clientName(client redis.UniversalClient) string {
	if isNil(client) {
		return ""
	}
	switch c := client.(type) {
	case *redis.Client:
		if addr := c.Options().Addr; addr != failoverAddr {
			return addr
		}
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return ""
}

// Name returns the Pool's name: the one given to NewNamedPool; by NewPool,
// the address of a *redis.Client ("host:port"), or the seed addresses of a
// *redis.ClusterClient joined by commas ("10.0.0.1:7000,10.0.0.2:7000"), or
// "" when the client's options name no server (node errors then show the
// node's index only).
func (p *Pool) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Exec implements redlock.Pool. A single command goes out by the client's
// Process; several go out as one go-redis pipeline, so that a batch costs one
// round trip (on a ClusterClient, one per cluster node the batch touches).
// go-redis's own retries are off for these commands: retries are the core's
// (see the package doc).
func (p *Pool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if err := p.unusable(); err != nil {
		return err
	}
	if len(cmds) == 1 {
		cmd := newCmd(ctx, &cmds[0], make([]any, 1+len(cmds[0].Args)))
		_ = p.client.Process(ctx, cmd) // the outcome is cmd's
		return storeReply(&replies[0], cmd.Cmd)
	}
	client := redis.Cmdable(p.client)
	if cc, ok := p.client.(*redis.ClusterClient); ok && waitsFor(cmds) {
		// WAIT has no key, and a ClusterClient would send it to any
		// primary: it must go, on the same connection, to the primary
		// that took the write before it (redlock.WithReplicaAcks). A
		// MOVED reply then is an error reply like any other: no vote.
		key, _ := cmds[0].Keys()[0].(string)
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		client = master
	}

	// One array holds every command's arguments: one allocation per batch.
	n := 0
	for i := range cmds {
		n += 1 + len(cmds[i].Args)
	}
	args := make([]any, n)
	batch := make([]redis.Cmder, len(cmds))
	for i := range cmds {
		k := 1 + len(cmds[i].Args)
		batch[i] = newCmd(ctx, &cmds[i], args[:k:k])
		args = args[k:]
	}
	pipe := client.Pipeline()
	_ = pipe.BatchProcess(ctx, batch...)
	// Exec returns the first command's error, be it an error reply; each
	// command holds its own outcome, and a broken connection marks every
	// command it left unanswered.
	if _, err := pipe.Exec(ctx); err != nil && !isReply(err) {
		return err
	}
	for i, cmd := range batch {
		if err := storeReply(&replies[i], cmd.(noRetry).Cmd); err != nil {
			return err
		}
	}
	return nil
}

// waitsFor reports whether cmds is a write and the WAIT that must follow it
// to its node: the batch the core sends with redlock.WithReplicaAcks.
func waitsFor(cmds []driver.Command) bool {
	return len(cmds) == 2 && cmds[1].Name == "WAIT" && cmds[0].NumKeys > 0
}

// noRetry is a go-redis command that go-redis does not retry. The core
// retries whole operations itself, with fresh deadlines, and must see each
// failure: a SET NX resent by the driver after its reply was lost answers
// null, and would read as a key held by someone else. Redirections (MOVED,
// ASK) are not retries; a ClusterClient follows them still.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// newCmd makes the go-redis command for c in args, which has room for the
// name and c's arguments. It names the position of the first key, so that a
// ClusterClient routes the command by it and never guesses; go-redis counts
// the name as argument 0.
func newCmd(ctx context.Context, c *driver.Command, args []any) noRetry {
	args[0] = lowerName(c.Name)
	copy(args[1:], c.Args)
	cmd := redis.NewCmd(ctx, args...)
	if c.NumKeys > 0 {
		cmd.SetFirstKeyPos(int8(1 + c.FirstKey))
	}
	return noRetry{cmd}
}

// The core's command names in lower case, the form go-redis looks names up
// by, each already an interface value: converting a string to one
// allocates.
var (
	nameSet     any = "set"
	nameEvalSHA any = "evalsha"
	nameEval    any = "eval"
)

// lowerName returns a command name in lower case, as an argument.
func lowerName(name string) any {
	switch name {
	case "SET":
		return nameSet
	case "EVALSHA":
		return nameEvalSHA
	case "EVAL":
		return nameEval
	}
	return strings.ToLower(name)
}

// storeReply stores cmd's outcome in r: its value; nil for a null reply,
// which go-redis reports as redis.Nil; or an error reply as a
// driver.ReplyError with the server's text. Any other error failed the
// command without a reply (no connection, a broken one, a timeout) and is
// returned.
func storeReply(r *driver.Reply, cmd *redis.Cmd) error {
	v, err := cmd.Result()
	if err == nil {
		*r = driver.Reply{Value: v}
		return nil
	}
	if errors.Is(err, redis.Nil) {
		*r = driver.Reply{}
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		*r = driver.Reply{Err: driver.ReplyError(rerr.Error())}
		return nil
	}
	return err
}

// isReply reports whether err is a reply from the server: a null reply or
// an error reply. redis.Nil is itself a redis.Error, so this covers both.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// QuietLogger returns a logger for redis.SetLogger that drops go-redis's
// connection pool dial failures ("failed to dial ..."), which a member that
// is down produces on every attempt, and passes every other line to printf
// (log.Printf, for one). redlock reports each node's failure to its
// Observer instead (see "A node that is down" in the package doc). A nil
// printf drops everything. redis.SetLogger is process-wide, and go-redis
// reads the logger without a lock: call it at the start of main, before
// any client exists.
func QuietLogger(printf func(format string, v ...any)) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return quietLogger{printf}
}

type quietLogger struct{ printf func(format string, v ...any) }

func (q quietLogger) Printf(_ context.Context, format string, v ...any) {
	if q.printf == nil || strings.Contains(format, "failed to dial") {
		return
	}
	q.printf(format, v...)
}

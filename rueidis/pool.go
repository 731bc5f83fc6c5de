package rueidis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	// The driver. In this package rueidis.X is always the driver's: Go never
	// qualifies a package's own names, so the two cannot clash.
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// Pool is the redlock.Pool for a rueidis.Client. The client is one Redlock
// node: one Redis master, a Sentinel-managed master with its replicas, or a
// whole Redis Cluster. A Pool is safe for concurrent use, as the client is.
//
// Client must be set: redlock.New refuses a Pool without one (Valid), and
// its Exec fails. Addr only
// names the node in errors ("node 2 (host:port): ..."); the client decides
// where commands go. NewPool sets both.
type Pool struct {
	Client rueidis.Client
	Addr   string

	// The text of the last int64 argument of 100 or more converted: a
	// lock's ttl comes in every SET, and would cost strconv.FormatInt an
	// allocation each.
	lastInt atomic.Pointer[intText]
}

type intText struct {
	n int64
	s string
}

var (
	_ redlock.Pool        = (*Pool)(nil)
	_ driver.Namer        = (*Pool)(nil)
	_ driver.Validator    = (*Pool)(nil)
	_ driver.Subscriber   = (*Pool)(nil)
	_ driver.SingleServer = (*Pool)(nil)
)

// NewPool returns a Pool that sends commands through client. Its Addr is the
// address of every node the client knows (client.Nodes()), sorted and
// joined by commas: "host:port" for a standalone master, the members of a
// Redis Cluster, the current primary behind a Sentinel. To name the node
// otherwise (a Sentinel master set, say), set Addr before passing the Pool
// to redlock.New, which reads it once.
//
// The Pool does not own client: closing it is the caller's job, after the
// redlock.Client is done with it.
func NewPool(client rueidis.Client) *Pool {
	return &Pool{Client: client, Addr: nodeNames(client)}
}

// errNoClient is Valid's and Exec's error for a Pool without a Client.
var errNoClient = errors.New("rueidis: the Pool has no Client")

// Valid implements driver.Validator: a Pool needs a Client.
func (p *Pool) Valid() error {
	if p.Client == nil {
		return errNoClient
	}
	return nil
}

func nodeNames(client rueidis.Client) string {
	if client == nil {
		return ""
	}
	nodes := client.Nodes()
	names := make([]string, 0, len(nodes))
	for addr := range nodes {
		names = append(names, addr)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Name returns Addr.
func (p *Pool) Name() string { return p.Addr }

// SingleServer implements driver.SingleServer: a client in standalone or
// Sentinel mode sends every command to its one master, so the core may
// combine several keys' releases into one script call. A cluster client
// (Client.Mode) routes each command by its slot and reports false.
func (p *Pool) SingleServer() bool {
	return p.Client != nil && p.Client.Mode() != rueidis.ClientModeCluster
}

// Exec sends one command by Client.Do, and several by Client.DoMulti, which
// writes them in order on one connection (one per slot, for a cluster
// client). See redlock.Pool, and the package doc for the choice. A cluster
// client's write followed by WAIT goes on a dedicated connection instead
// (execPinned).
//
// An error reply becomes Reply.Err, a driver.ReplyError with the text the
// server sent. Any other error, on any command of the batch, is returned
// as the batch's error: rueidis reports a connection that broke mid-batch
// on each command it left unanswered. An error reply at that level (a
// NOAUTH or WRONGPASS to the handshake of a new connection) answers no
// command of ours either; it is returned as the batch's error too, as a
// driver.ReplyError.
func (p *Pool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if p.Client == nil {
		return errNoClient
	}
	if len(cmds) == 1 {
		cmd, err := p.build(cmds[0], true)
		if err != nil {
			return err
		}
		return storeReply(&replies[0], p.Client.Do(ctx, cmd))
	}
	// A client of one master sends the whole batch on the connection that
	// the first command's slot picks, so the others need no slot: their
	// keys go as plain arguments, which spares a crc16 per command. A
	// cluster client routes every command by its own slot.
	slots := p.Client.Mode() == rueidis.ClientModeCluster
	built := make([]rueidis.Completed, len(cmds))
	for i, c := range cmds {
		cmd, err := p.build(c, i == 0 || slots)
		if err != nil {
			return err
		}
		built[i] = cmd
	}
	if slots && waitsFor(cmds) {
		return p.execPinned(ctx, built, replies)
	}
	return storeReplies(replies, p.Client.DoMulti(ctx, built...))
}

// storeReplies stores a batch's results in replies (storeReply).
func storeReplies(replies []driver.Reply, results []rueidis.RedisResult) error {
	if len(results) != len(replies) {
		return errReplyCount
	}
	for i, r := range results {
		if err := storeReply(&replies[i], r); err != nil {
			return err
		}
	}
	return nil
}

// waitsFor reports a batch of one keyed command followed by WAIT: a write
// and the count of replicas that acknowledged it (redlock.WithReplicaAcks).
func waitsFor(cmds []driver.Command) bool {
	return len(cmds) == 2 && strings.EqualFold(cmds[1].Name, "WAIT") && cmds[0].NumKeys > 0
}

// execPinned sends a cluster client's write and WAIT on one dedicated
// connection to the primary of the write's slot. WAIT counts the replicas
// that acknowledged the writes of its own connection, and has no key: the
// client's DoMulti would follow a MOVED for the write alone, to its new
// primary, while WAIT answered for a connection that wrote nothing (the
// old primary's replicas, counted for a write they never saw), and an ASK
// for such a batch made rueidis v1.0.79 panic. A dedicated connection
// follows no redirection: a MOVED or ASK is the write's error reply, a
// vote not won, and WAIT counts the replicas of the write's own primary.
func (p *Pool) execPinned(ctx context.Context, built []rueidis.Completed, replies []driver.Reply) error {
	var stored error
	err := p.Client.Dedicated(func(d rueidis.DedicatedClient) error {
		stored = storeReplies(replies, d.DoMulti(ctx, built...))
		return nil
	})
	if err != nil {
		return err
	}
	return stored
}

var errReplyCount = errors.New("redlock/rueidis: reply count does not match")

// build makes one rueidis command, each argument appended to the builder
// as it is converted. With slot, the first key goes through Keys: a
// cluster client routes the command by its slot, and a client of one
// master spreads keyed commands over its PipelineMultiplex connections by
// it (a command without a slot always takes the first). Further keys, and
// the first without slot, go through Args with the other arguments, so
// the builder never checks that they share the first's slot; the server
// refuses keys of different slots with CROSSSLOT, which is the answer
// redlock expects (docs/drivers.md).
func (p *Pool) build(c driver.Command, slot bool) (rueidis.Completed, error) {
	b := p.Client.B().Arbitrary(c.Name)
	for i, a := range c.Args {
		s, err := p.argString(a)
		if err != nil {
			return rueidis.Completed{}, fmt.Errorf("redlock/rueidis: %s argument %d: %w", c.Name, i, err)
		}
		if slot && i == c.FirstKey && c.NumKeys > 0 {
			b = b.Keys(s)
		} else {
			b = b.Args(s)
		}
	}
	if strings.EqualFold(c.Name, "WAIT") {
		// WAIT (redlock.WithReplicaAcks) blocks its connection until the
		// replicas answer: marked blocking, its batch goes out on a
		// dedicated connection, not the one other callers share.
		return b.Blocking(), nil
	}
	return b.Build(), nil
}

// argString converts one command argument: a string, []byte or int64, as
// driver.Command allows, or an int.
func (p *Pool) argString(a any) (string, error) {
	switch a := a.(type) {
	case string:
		return a, nil
	case []byte:
		return string(a), nil
	case int64:
		if 0 <= a && a < 100 { // strconv's own, without an allocation
			return strconv.FormatInt(a, 10), nil
		}
		if t := p.lastInt.Load(); t != nil && t.n == a {
			return t.s, nil
		}
		t := &intText{a, strconv.FormatInt(a, 10)}
		p.lastInt.Store(t)
		return t.s, nil
	case int:
		return strconv.Itoa(a), nil
	}
	return "", fmt.Errorf("unsupported type %T", a)
}

// storeReply stores one command's result in r, or returns the error that
// kept it from having one. An error reply at that level came from the
// handshake of a new connection (NOAUTH, WRONGPASS); it is returned as a
// driver.ReplyError, so that the node's error carries the server's code as
// it does with a driver that sends no handshake and gets the same error in
// reply to the command.
func storeReply(r *driver.Reply, res rueidis.RedisResult) error {
	if err := res.NonRedisError(); err != nil {
		if rerr, ok := rueidis.IsRedisErr(err); ok {
			return driver.ReplyError(rerr.Error())
		}
		return err
	}
	msg, _ := res.ToMessage() // its error is msg.Error(), read by reply
	*r = reply(&msg)
	return nil
}

// reply maps one message onto a driver.Reply.
func reply(m *rueidis.RedisMessage) driver.Reply {
	v, err := value(m)
	if err != nil {
		return driver.Reply{Err: err}
	}
	return driver.Reply{Value: v}
}

// value returns what m holds as driver.Reply.Value wants it: a status or
// bulk string as a string, an integer as an int64, an array as []any (an
// error inside it as a ReplyError), a null as nil. An error reply is
// returned as a driver.ReplyError. Other RESP3 types, which no command of
// redlock's gets, come as RedisMessage.ToAny makes them.
//
// m.Error() strips a leading "ERR " from the text (a courtesy of rueidis to
// kvrocks); m.ToString returns the text as the server sent it.
func value(m *rueidis.RedisMessage) (any, error) {
	switch {
	case m.IsNil():
		return nil, nil
	case m.Error() != nil:
		text, _ := m.ToString()
		return nil, driver.ReplyError(text)
	case m.IsString():
		s, err := m.ToString()
		if s == "OK" {
			// The constant, which goes into an interface without an
			// allocation: every SET's reply is OK.
			return "OK", err
		}
		return s, err
	case m.IsInt64():
		return m.AsInt64()
	case m.IsArray():
		elems, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		vs := make([]any, len(elems))
		for i := range elems {
			v, err := value(&elems[i])
			if rerr, ok := err.(driver.ReplyError); ok {
				v = rerr
			} else if err != nil {
				return nil, err
			}
			vs[i] = v
		}
		return vs, nil
	}
	return m.ToAny()
}

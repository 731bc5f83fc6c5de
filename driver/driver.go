// Package driver is the port between redlock and a Redis client: the few
// interfaces an adapter implements so that a driver's connection to one Redis
// master can serve as one member of the quorum. A lock user never imports
// it; an adapter author reads it alone, as a database/sql driver author reads
// database/sql/driver.
//
// The core speaks to each master through a Pool, which moves a batch of
// commands to the server and brings the replies back, and nothing more:
// every policy stays on the core's side of the port.
//
//   - Deadlines: the core gives each batch a ctx whose deadline is the node
//     timeout, and stops waiting at that deadline whatever the Pool does. A
//     Pool that honours ctx frees its connection sooner; one that does not
//     costs a goroutine until its driver gives up, never a caller's time.
//   - Batching: the core groups the commands that concurrent callers send to
//     one master into batches and keeps the order of commands on the same
//     key. A Pool sends a batch as one pipeline where its driver can, or one
//     command after another on one connection.
//   - Replies: the core decides what a reply means. An error reply is never
//     agreement, whatever the driver made of it.
//   - Retries, undo and early return: the core's alone.
//
// Optional capabilities are found by type assertion, as database/sql finds
// driver.Pinger: a Pool that also implements Namer names its master in
// errors; Validator is checked when a Client is made; Subscriber lets a
// release wake waiting callers; DeadlineHonorer lets a one-node Client run a
// round on the caller's goroutine; SingleServer lets the core combine
// several keys' releases into one script call.
//
// Adapters exist for redigo (package redigo, in the root module) and, each
// in a module of its own, for go-redis (github.com/quorumlock/redlock/goredis),
// rueidis (.../rueidis) and valkey-go (.../valkeygo). The conformance kit in
// github.com/quorumlock/redlock/redlocktest checks a new one.
package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A Pool is the port to one independent Redis master. Implementations must
// be safe for concurrent use.
//
// See the package documentation for the adapters that exist.
type Pool interface {
	// Exec sends cmds to the master, in order, and sets replies[i] to the
	// reply to cmds[i]; len(replies) == len(cmds) >= 1. It sends them as one
	// pipeline where it can; the core never asks for a transaction. Every
	// reply must be set, Value or Err: the core fills the slots with a
	// marker first, so that a slot left as it was fails its command rather
	// than reading as a null reply (which SET ... NX GET answers when it
	// sets the key).
	//
	// A reply is stored as the server sent it: Reply.Value holds a status or
	// bulk string (string or []byte), an integer (int64), an array ([]any)
	// or nil for a null reply, and Reply.Err holds an error reply as a
	// ReplyError. An error that ends the whole batch (no connection, a
	// broken one, a timeout) is returned instead, and then replies are
	// ignored.
	//
	// ctx always has a deadline. Exec should return by then; the core does
	// not wait for it past that.
	Exec(ctx context.Context, cmds []Command, replies []Reply) error
}

// A Command is one Redis command: Name, such as "SET" or "EVALSHA", and Args,
// each a string, a []byte or an int64. Args[FirstKey:FirstKey+NumKeys] are
// the keys it touches, contiguous, for drivers that route commands by key
// (Redis Cluster); NumKeys is 0 for a command without keys.
type Command struct {
	Name              string
	Args              []any
	FirstKey, NumKeys int
}

// Keys returns the command's key arguments.
func (c Command) Keys() []any { return c.Args[c.FirstKey : c.FirstKey+c.NumKeys] }

// String returns the command as text, for logs and errors.
func (c Command) String() string {
	var b strings.Builder
	b.WriteString(c.Name)
	for _, a := range c.Args {
		b.WriteByte(' ')
		switch a := a.(type) {
		case []byte:
			b.Write(a)
		default:
			fmt.Fprint(&b, a)
		}
	}
	return b.String()
}

// A Reply is the server's answer to one Command; see Pool.Exec.
type Reply struct {
	Value any
	Err   error
}

// A ReplyError is an error reply from Redis, as the server sent it without
// the leading '-': "NOPERM this user has no permissions...". Adapters store
// the driver's error replies as ReplyErrors so that the core can tell them
// from broken connections.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Code returns the error's first word, such as "NOSCRIPT", "READONLY" or
// "MOVED".
func (e ReplyError) Code() string {
	code, _, _ := strings.Cut(string(e), " ")
	return code
}

// A Namer is a Pool that can name its master for errors and reports: its
// address, "host:port", or for a Cluster member its seed addresses, joined by
// commas. NewPool's pools and every adapter are Namers.
type Namer interface {
	Name() string
}

// A Validator is a Pool that can tell that it cannot work: an adapter given
// a nil client, or a client of a kind that cannot be one quorum member. New
// calls Valid on every Pool that has it and refuses the pools whose Valid
// returns an error (wrapped in redlock.ErrInvalid), so that a mistake is reported at
// construction rather than by every lock.
type Validator interface {
	Valid() error
}

// A Subscriber is a Pool that can also receive Redis pub/sub messages.
//
// Subscribe opens a connection of its own and keeps it subscribed to the
// channels that sub.Channels returns, following them as they change, until
// ctx ends or the connection fails. It returns then, with the cause; after
// ctx ends it may return ctx.Err() or nil. It reads sub.Channels when it
// starts and each time sub.Changed receives, and sends SUBSCRIBE for the
// channels added since it last read them and UNSUBSCRIBE for those dropped
// (Subscription.Diff computes both). It calls sub.Ready with a channel once
// the server has confirmed the subscription to it, and sub.Deliver with the
// channel and payload of each message, in the order the server sent them.
// Ready and Deliver are never called at once, nor after Subscribe returns,
// and must not block for long.
//
// A channel's subscription that the server ends while the channel is still
// wanted, or an error reply to a SUBSCRIBE (NOPERM for a channel an ACL user
// may not hear, say), ends Subscribe with an error, as a broken connection
// does: messages may have been missed, or will be.
type Subscriber interface {
	Subscribe(ctx context.Context, sub *Subscription) error
}

// A Subscription is the set of channels the core wants to hear on one
// connection, and where their events go. The core makes it; a Subscriber
// reads it.
type Subscription struct {
	// Channels returns the channels wanted now. The set is never empty: its
	// first channel stays while Subscribe runs, so that the connection
	// never leaves pub/sub mode. Each call tells the core that the
	// connection now follows the set returned (it unsubscribes from the
	// channels left out): call it only to apply the set, as Diff does.
	Channels func() []string
	// Changed receives a value each time Channels may have changed (a
	// pending change is kept, not queued).
	Changed <-chan struct{}
	// Ready is called once the server has confirmed the subscription to
	// a channel.
	Ready func(channel string)
	// Deliver is called with each message's channel and payload.
	Deliver func(channel, payload string)
}

// Diff reads the channels wanted now and compares them with have, the
// channels the connection is subscribed to or has asked for: it returns
// those to subscribe to, in the order Channels gave them, and those to
// unsubscribe from, sorted, and updates have to match. A Subscriber keeps
// have for its connection, empty at the start.
func (s *Subscription) Diff(have map[string]bool) (add, drop []string) {
	want := s.Channels()
	wanted := make(map[string]bool, len(want))
	for _, ch := range want {
		wanted[ch] = true
		if !have[ch] {
			have[ch] = true
			add = append(add, ch)
		}
	}
	for ch := range have {
		if !wanted[ch] {
			delete(have, ch)
			drop = append(drop, ch)
		}
	}
	slices.Sort(drop)
	return add, drop
}

// Unsubscribes counts, by channel, the UNSUBSCRIBEs a Subscriber has sent
// that the server has not confirmed yet, so that it can tell the
// confirmation of its own drop from a subscription the server ended. The
// zero value is ready; it is safe for concurrent use (a writer sends, a
// reader confirms).
type Unsubscribes struct {
	mu      sync.Mutex
	pending map[string]int
}

// Sending records UNSUBSCRIBEs of channels; call it before sending them,
// so that no confirmation can come first.
func (u *Unsubscribes) Sending(channels []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.pending == nil {
		u.pending = make(map[string]int)
	}
	for _, ch := range channels {
		u.pending[ch]++
	}
}

// Confirmed counts off the server's "unsubscribe" reply for channel and
// reports whether it answered one that was sent. false means the server
// ended the subscription itself.
func (u *Unsubscribes) Confirmed(channel string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.pending[channel]
	switch {
	case n == 0:
		return false
	case n == 1:
		delete(u.pending, channel)
	default:
		u.pending[channel] = n - 1
	}
	return true
}

// A DeadlineHonorer is a Pool that can promise to keep its context's
// deadline. HonorsDeadline reports true only if every Exec returns by ctx's
// deadline, give or take scheduling, whatever the master, the network or
// the driver's own pool do: no step of it (waiting for a connection,
// dialling, writing, reading) may wait past that deadline. It may depend on
// how the driver was configured; the core asks once, in New.
//
// The core trusts the promise: a Client of one node whose Pool honours
// deadlines runs each operation on the caller's goroutine instead of
// starting one and waiting for it with a timer of its own, which
// halved an uncontended Lock+Unlock's time on go-redis (docs/benchmarks.md).
// A Pool that breaks the promise then holds the caller for as long as it
// runs; one that does not implement DeadlineHonorer, or reports false, stays
// bounded by the core's node timeout. A cancelled ctx is seen once Exec
// returns, by the deadline.
type DeadlineHonorer interface {
	HonorsDeadline() bool
}

// A SingleServer is a Pool whose commands all reach one server, its
// master, whatever keys they name: not a Redis Cluster, nor a client or a
// proxy that spreads keys over several servers. SingleServer reports
// whether that holds for this Pool's client.
//
// The core may then carry the releases of several keys that one batch
// sends to the node in a single script call, which the server runs for
// much less than one call per key (docs/benchmarks.md). On a Pool that
// does not implement it, or reports false, every command names the keys of
// one lock only, so a Cluster routes each by its own slot.
type SingleServer interface {
	SingleServer() bool
}

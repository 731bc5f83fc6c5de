package rueidis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quorumlock/redlock/driver"
	"github.com/redis/rueidis"
)

// Subscribe implements driver.Subscriber on a connection of its own, taken
// from the client's pool of dedicated connections (Client.Dedicate) and
// closed on return, so that it never goes back to the pool subscribed.
//
// rueidis runs the connection's PubSubHooks on its reader goroutine, which
// also completes each command sent on the connection. The hooks hand every
// event, in the order the server sent them, to the goroutine that called
// Subscribe, which calls sub.Ready and sub.Deliver; a second goroutine
// sends SUBSCRIBE and UNSUBSCRIBE as sub's channels change. A Do sent from
// the goroutine that takes the hooks' events would wait for a reply that
// the reader goroutine cannot read while it waits to hand over an event.
//
// Ready follows the server's "subscribe" confirmation of each channel, as
// the OnSubscription hook reports it, and not the SUBSCRIBE command's
// return: rueidis completes a SUBSCRIBE of several channels with the
// first confirmation. The connection's end is reported on the hooks' error
// channel: a server that goes away (EOF, connection reset), or one that
// stops answering, which rueidis finds by its background PING within
// ClientOption.ConnWriteTimeout (10 seconds by default).
//
// SUBSCRIBE and UNSUBSCRIBE name no key, so a Cluster client's dedicated
// connection sends them to the one node it picks first, and the cluster
// forwards every PUBLISH to it.
//
// A standalone or Sentinel client dials a dedicated connection without a
// context, bounded by ClientOption.Dialer.Timeout (5 seconds by default);
// if ctx ends first, Subscribe returns then, and the connection is closed
// when the dial finishes.
//
// Closing the client does not end a running Subscribe: its dedicated
// connection outlives Client.Close until ctx ends. A redlock.Client ends
// its subscriptions in its own Close, so close it before the rueidis
// client.
func (p *Pool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	if p.Client == nil {
		return errNoClient
	}
	conn, err := p.dedicate(ctx)
	if err != nil {
		return err
	}

	events := make(chan pubsubEvent)
	stop := make(chan struct{})
	hand := func(e pubsubEvent) {
		select {
		case events <- e:
		case <-stop:
		}
	}
	ended := conn.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			hand(pubsubEvent{kind: "message", channel: m.Channel, payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			hand(pubsubEvent{kind: s.Kind, channel: s.Channel})
		},
	})

	// Any "unsubscribe" but the replies to those sent is the server's own,
	// and ends the subscription.
	var leaving driver.Unsubscribes
	have := make(map[string]bool)
	update := func(ctx context.Context) error {
		add, drop := sub.Diff(have)
		if len(add) > 0 {
			if err := send(ctx, conn, "SUBSCRIBE", conn.B().Subscribe().Channel(add...).Build(), add); err != nil {
				return err
			}
		}
		if len(drop) > 0 { // never none: UNSUBSCRIBE alone would drop them all
			leaving.Sending(drop)
			if err := send(ctx, conn, "UNSUBSCRIBE", conn.B().Unsubscribe().Channel(drop...).Build(), drop); err != nil {
				return err
			}
		}
		return nil
	}

	wctx, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for {
			if err := update(wctx); err != nil {
				failed <- err
				return
			}
			select {
			case <-sub.Changed:
			case <-wctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		close(stop)  // frees a hook waiting to hand over an event
		conn.Close() // ends a Do waiting for its reply
		<-wrote
	}()

	for {
		select {
		case e := <-events:
			switch e.kind {
			case "message":
				sub.Deliver(e.channel, e.payload)
			case "subscribe":
				sub.Ready(e.channel)
			case "unsubscribe":
				if !leaving.Confirmed(e.channel) {
					return ctxOr(ctx, fmt.Errorf("%w to %s", errUnsubscribed, e.channel))
				}
			}
		case err := <-failed:
			return ctxOr(ctx, err)
		case err, ok := <-ended:
			if !ok || err == nil {
				err = errConnClosed
			}
			return ctxOr(ctx, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A pubsubEvent is what a PubSubHook hands to Subscribe's goroutine: a
// message, or the server's confirmation of a subscription's start or end
// (kind "subscribe" or "unsubscribe").
type pubsubEvent struct {
	kind, channel, payload string
}

// send sends SUBSCRIBE or UNSUBSCRIBE for channels and waits for rueidis
// to complete it. An error reply (NOPERM, say) comes back as a
// driver.ReplyError, named by the command.
func send(ctx context.Context, conn rueidis.DedicatedClient, name string, cmd rueidis.Completed, channels []string) error {
	res := conn.Do(ctx, cmd)
	if res.Error() == nil {
		return nil
	}
	var r driver.Reply
	if err := storeReply(&r, res); err != nil {
		return err
	}
	if r.Err != nil {
		return fmt.Errorf("redlock/rueidis: %s %s: %w", name, strings.Join(channels, " "), r.Err)
	}
	return nil
}

var (
	errUnsubscribed = errors.New("redlock/rueidis: the server ended the subscription")
	errConnClosed   = errors.New("redlock/rueidis: pub/sub connection closed")
)

// dedicate takes a dedicated connection from the client, giving up when ctx
// ends. A standalone client dials it without a context (Client.Dedicate
// takes none), so it does so on a goroutine of its own, which closes the
// connection if nobody waits for it any more.
func (p *Pool) dedicate(ctx context.Context) (rueidis.DedicatedClient, error) {
	got := make(chan rueidis.DedicatedClient, 1)
	go func() {
		conn, _ := p.Client.Dedicate()
		got <- conn
	}()
	select {
	case conn := <-got:
		return conn, nil
	case <-ctx.Done():
		go func() { (<-got).Close() }()
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

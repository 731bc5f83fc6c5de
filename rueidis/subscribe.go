package rueidis

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/redlock/driver"
	"github.com/redis/rueidis"
)

// Subscribe implements driver.Subscriber on a connection of its own, taken
// from the client's pool of dedicated connections (Client.Dedicate) and
// closed on return, so that it never goes back to the pool subscribed.
//
// The subscription is confirmed when the SUBSCRIBE command returns: rueidis
// completes it with the server's "subscribe" reply, and only then does
// Subscribe call ready. Messages reach deliver through the connection's
// PubSubHooks, in order. The connection's end is reported on the hooks'
// error channel: a server that goes away (EOF, connection reset), or one
// that stops answering, which rueidis finds by its background PING within
// ClientOption.ConnWriteTimeout (10 seconds by default).
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
func (p *Pool) Subscribe(ctx context.Context, channel string, ready func(), deliver func(string)) error {
	if p.Client == nil {
		return errNoClient
	}
	conn, err := p.dedicate(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()

	msgs := make(chan string)
	unsubscribed := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop) // before conn.Close: frees a hook blocked on msgs
	ended := conn.SetPubSubHooks(rueidis.PubSubHooks{
		// The hooks run on the connection's reader goroutine; they hand
		// each event to this one, which calls ready and deliver.
		OnMessage: func(m rueidis.PubSubMessage) {
			if m.Channel != channel {
				return
			}
			select {
			case msgs <- m.Message:
			case <-stop:
			}
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "unsubscribe" && s.Channel == channel {
				select {
				case unsubscribed <- struct{}{}:
				case <-stop:
				}
			}
		},
	})

	// SUBSCRIBE returns once the server has confirmed it; its reply holds
	// nothing else, and only an error is read from it. A message published
	// after the confirmation waits in OnMessage until the loop takes it.
	if res := conn.Do(ctx, conn.B().Subscribe().Channel(channel).Build()); res.Error() != nil {
		var r driver.Reply
		if err := storeReply(&r, res); err != nil {
			return ctxOr(ctx, err)
		}
		if r.Err != nil { // NOPERM, say
			return fmt.Errorf("redlock/rueidis: SUBSCRIBE %s: %w", channel, r.Err)
		}
	}
	ready()
	for {
		select {
		case payload := <-msgs:
			deliver(payload)
		case <-unsubscribed:
			return ctxOr(ctx, errUnsubscribed)
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

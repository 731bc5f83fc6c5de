package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/driver"
)

// pubsubPing is how often Subscribe checks an idle subscription. After this
// long without a message it sends a PING, and it gives up when nothing at
// all, not even the PONG, arrives in the next interval: a silent server
// ends a subscription within two intervals. A connection that breaks ends
// it at once. A variable for tests.
var pubsubPing = 5 * time.Second

// Subscribe implements driver.Subscriber on a go-redis PubSub, which holds
// a connection of its own outside the client's pool. The goroutine that
// calls it receives, and pings after an idle interval; a second one sends
// the changes of sub's channels (a PubSub lets one goroutine subscribe and
// unsubscribe while another receives).
//
// A go-redis PubSub reconnects and resubscribes on its own after a broken
// connection, and messages published meanwhile are lost. Subscribe does not
// hide that: the first receive that fails for any reason but an idle
// timeout ends it with that error, and so does a SUBSCRIBE or UNSUBSCRIBE
// that fails to go out, so that the caller knows it may have missed a
// message.
func (p *Pool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	if err := p.unusable(); err != nil {
		return err
	}
	ps := p.client.Subscribe(ctx) // no channel: the first update subscribes, and reports an error
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { ps.Close() }) // ends a blocked receive
	defer stop()

	// Any "unsubscribe" but the replies to those sent is the server's own,
	// and ends the subscription.
	var leaving driver.Unsubscribes
	have := make(map[string]bool)
	update := func(ctx context.Context) error {
		add, drop := sub.Diff(have)
		if len(add) > 0 {
			if err := ps.Subscribe(ctx, add...); err != nil {
				return err
			}
		}
		if len(drop) > 0 { // never none: PubSub.Unsubscribe() would drop them all
			leaving.Sending(drop)
			if err := ps.Unsubscribe(ctx, drop...); err != nil {
				return err
			}
		}
		return nil
	}
	if err := update(ctx); err != nil {
		return endedOr(ctx, err)
	}

	// A send that fails has made the PubSub reconnect, which this one must
	// not hide: the writer closes it, so that the receive fails too, and
	// leaves its error in failed.
	wctx, cancel := context.WithCancel(ctx)
	failed := make(chan error, 1)
	wrote := make(chan struct{})
	defer func() {
		cancel()
		ps.Close() // ends a send blocked on the connection
		<-wrote
	}()
	go func() {
		defer close(wrote)
		for {
			select {
			case <-sub.Changed:
				if err := update(wctx); err != nil {
					failed <- err
					ps.Close()
					return
				}
			case <-wctx.Done():
				return
			}
		}
	}()

	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, pubsubPing)
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				return cerr
			}
			select {
			case err := <-failed:
				return err
			default:
			}
			if pinged || !isTimeout(err) {
				return err
			}
			pinged = true
			if err := ps.Ping(ctx); err != nil {
				return endedOr(ctx, err)
			}
			continue
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			sub.Deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				sub.Ready(m.Channel)
			case "unsubscribe":
				if !leaving.Confirmed(m.Channel) {
					return endedOr(ctx, fmt.Errorf("goredis: the server ended the subscription to %s", m.Channel))
				}
			}
		}
	}
}

// ended returns ctx's error once ctx has ended or its deadline has passed
// (a socket deadline taken from ctx can fire before ctx notices), and nil
// before.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// endedOr returns ctx's error if ctx has ended, which explains err, and err
// otherwise.
func endedOr(ctx context.Context, err error) error {
	if cerr := ended(ctx); cerr != nil {
		return cerr
	}
	return err
}

// isTimeout reports whether err is a socket timeout: an idle connection,
// not a broken one.
func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

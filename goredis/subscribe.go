package goredis

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubPing is how often Subscribe checks an idle subscription. After this
// long without a message it sends a PING, and it gives up when nothing at
// all, not even the PONG, arrives in the next interval: a silent server
// ends a subscription within two intervals. A connection that breaks ends
// it at once. A variable for tests.
var pubsubPing = 5 * time.Second

// Subscribe implements driver.Subscriber on a go-redis PubSub, which holds
// a connection of its own outside the client's pool.
//
// A go-redis PubSub reconnects and resubscribes on its own after a broken
// connection, and messages published meanwhile are lost. Subscribe does not
// hide that: the first receive that fails for any reason but an idle
// timeout ends it with that error, so that the caller knows it may have
// missed a message.
func (p *Pool) Subscribe(ctx context.Context, channel string, ready func(), deliver func(payload string)) error {
	if err := p.unusable(); err != nil {
		return err
	}
	ps := p.client.Subscribe(ctx) // no channel: PubSub.Subscribe reports the error
	defer ps.Close()
	stop := context.AfterFunc(ctx, func() { ps.Close() }) // ends a blocked receive
	defer stop()

	if err := ps.Subscribe(ctx, channel); err != nil {
		return endedOr(ctx, err)
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, pubsubPing)
		if err != nil {
			if cerr := ended(ctx); cerr != nil {
				return cerr
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
			deliver(m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" && m.Channel == channel {
				ready()
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

package redigo_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/redigo"
	"github.com/quorumlock/redlock/redlocktest"
)

// The redigo adapter passes the conformance kit, as every adapter must.
func TestRedigoConformance(t *testing.T) {
	redlocktest.Run(t, redlocktest.Adapter{
		Dial: func(t testing.TB, s redlocktest.Server) redlock.Pool {
			var opts []redis.DialOption
			if s.TLS != nil {
				opts = append(opts, redis.DialUseTLS(true), redis.DialTLSConfig(s.TLS))
			}
			if s.Username != "" {
				opts = append(opts, redis.DialUsername(s.Username))
			}
			if s.Password != "" {
				opts = append(opts, redis.DialPassword(s.Password))
			}
			p := redigo.NewPool(s.Addr, opts...)
			t.Cleanup(func() { p.Close() })
			return p
		},
	})
}

// A *redis.Pool that a program already has plugs in as a Pool.
func TestRedigoPoolWrapsAnExistingPool(t *testing.T) {
	m := miniredis.RunT(t)
	existing := &redis.Pool{Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", m.Addr(), redis.DialReadTimeout(time.Second))
	}}
	defer existing.Close()
	c, err := redlock.New([]redlock.Pool{&redigo.Pool{Pool: existing, Addr: m.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(t.Context(), "existing", time.Second)
	if err != nil {
		t.Fatalf("TryLock through an existing pool: %v", err)
	}
	if got, _ := m.Get("existing"); got != l.Value() {
		t.Errorf("node holds %q, want the token %q", got, l.Value())
	}
}

// Only NewPool's pools promise to keep their deadlines: a program's own
// *redis.Pool may dial without looking at ctx.
func TestRedigoHonorsDeadline(t *testing.T) {
	p := redigo.NewPool("127.0.0.1:1")
	defer p.Close()
	if !p.HonorsDeadline() {
		t.Error("NewPool's pool does not report HonorsDeadline")
	}
	own := &redigo.Pool{Pool: &redis.Pool{}, Addr: "127.0.0.1:1"}
	if own.HonorsDeadline() {
		t.Error("a Pool around a program's own pool reports HonorsDeadline")
	}
}

// Only NewPool's pools say they reach one server: a program's own
// *redis.Pool may dial a proxy that spreads keys over several.
func TestRedigoSingleServer(t *testing.T) {
	p := redigo.NewPool("127.0.0.1:1")
	defer p.Close()
	if !p.SingleServer() {
		t.Error("NewPool's pool does not report SingleServer")
	}
	own := &redigo.Pool{Pool: &redis.Pool{}, Addr: "127.0.0.1:1"}
	if own.SingleServer() {
		t.Error("a Pool around a program's own pool reports SingleServer")
	}
	var none *redigo.Pool
	if none.SingleServer() {
		t.Error("a nil Pool reports SingleServer")
	}
}

// A ctx cancelled before Exec, its deadline still ahead, sends nothing,
// even with an idle connection in the pool: it returns ctx's error.
func TestExecCancelledContextSendsNothing(t *testing.T) {
	m := miniredis.RunT(t)
	p := redigo.NewPool(m.Addr())
	defer p.Close()
	c := p.Get()
	if _, err := c.Do("PING"); err != nil {
		t.Fatal(err)
	}
	c.Close() // idle in the pool now
	for _, n := range []int{1, 2} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cancel()
		cmds := make([]driver.Command, n)
		for i := range cmds {
			cmds[i] = driver.Command{Name: "SET", Args: []any{"cancelled", "x"}, NumKeys: 1}
		}
		if err := p.Exec(ctx, cmds, make([]driver.Reply, n)); !errors.Is(err, context.Canceled) {
			t.Errorf("%d commands: Exec = %v, want context.Canceled", n, err)
		}
		if m.Exists("cancelled") {
			t.Errorf("%d commands: the key was written", n)
		}
	}
}

// Subscribe on a program's own pool, whose Dial takes no ctx, returns once
// ctx ends even while the dial hangs: here the server accepts the
// connection and never answers the dial's AUTH, and the Dial sets no
// timeout. (Subscribe waited for the dial, so that Close, which waits for
// the subscriptions, returned an error after its whole bound.)
func TestSubscribeHungDialEndsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16) // closed by the cleanup, unanswered
	served := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-served
		close(accepted)
		for c := range accepted {
			c.Close()
		}
	})
	go func() {
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dialed := make(chan struct{}, 1)
	own := &redis.Pool{Dial: func() (redis.Conn, error) {
		dialed <- struct{}{}
		return redis.Dial("tcp", ln.Addr().String(), redis.DialPassword("pw"))
	}}
	p := &redigo.Pool{Pool: own, Addr: ln.Addr().String()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	sub := &driver.Subscription{
		Channels: func() []string { return []string{"hung"} },
		Ready:    func(string) { t.Error("Ready without a connection") },
		Deliver:  func(string, string) {},
	}
	go func() { done <- p.Subscribe(ctx, sub) }()
	select {
	case <-dialed:
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not dial")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still dialling 5s after its ctx ended")
	}
}

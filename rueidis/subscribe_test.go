package rueidis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// A subscription is a driver.Subscription whose channels a test sets,
// and whose Ready and Deliver calls it reads from channels.
type subscription struct {
	driver.Subscription
	ready chan string    // Ready's channels
	got   chan [2]string // Deliver's channels and payloads

	mu      sync.Mutex
	want    []string
	changed chan struct{}
}

func newSubscription(channels ...string) *subscription {
	s := &subscription{ready: make(chan string, 16), got: make(chan [2]string, 16), want: channels, changed: make(chan struct{}, 1)}
	s.Subscription = driver.Subscription{
		Channels: func() []string {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.want
		},
		Changed: s.changed,
		Ready:   func(ch string) { s.ready <- ch },
		Deliver: func(ch, payload string) { s.got <- [2]string{ch, payload} },
	}
	return s
}

// set makes channels the ones wanted, and signals the change.
func (s *subscription) set(channels ...string) {
	s.mu.Lock()
	s.want = channels
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// subscribe runs Subscribe to "ch" on a goroutine and returns its result
// channel once Ready was called, or fails t.
func subscribe(t *testing.T, ctx context.Context, sub driver.Subscriber) <-chan error {
	t.Helper()
	s := newSubscription("ch")
	done := make(chan error, 1)
	go func() { done <- sub.Subscribe(ctx, &s.Subscription) }()
	select {
	case <-s.ready:
	case err := <-done:
		t.Fatalf("Subscribe returned before ready: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe not ready after 5s")
	}
	return done
}

// A subscription to a server that stops answering, without closing the
// connection, ends with an error once rueidis's background PING goes
// unanswered for ConnWriteTimeout.
func TestSubscribeFrozenServer(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		ConnWriteTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	done := subscribe(t, context.Background(), redlockrueidis.NewPool(client))
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Subscribe returned nil after its server froze")
		}
		t.Logf("Subscribe returned %v after %v", err, time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running 5s after its server froze (ConnWriteTimeout 1s)")
	}
}

// Subscribe returns when ctx ends even while its connection is still being
// dialled to a server that never answers.
func TestSubscribeContextWhileDialling(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	client, _ := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		Dialer: net.Dialer{Timeout: 3 * time.Second},
	})
	if client == nil {
		t.Fatal("no client")
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	sub := newSubscription("ch")
	err := redlockrueidis.NewPool(client).Subscribe(ctx, &sub.Subscription)
	if len(sub.ready) > 0 {
		t.Error("Ready on a paused server")
	}
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("Subscribe on a paused server: %v after %v, want context.DeadlineExceeded after 200ms", err, took)
	}
}

// An error reply to SUBSCRIBE comes back with the server's code.
func TestSubscribeErrorReply(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
		"--user", "nosub", "on", ">pw", "~*", "&*", "+@connection")
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		Username: "nosub", Password: "pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sub := newSubscription("ch")
	err = redlockrueidis.NewPool(client).Subscribe(context.Background(), &sub.Subscription)
	var rerr driver.ReplyError
	if !errors.As(err, &rerr) || rerr.Code() != "NOPERM" || !strings.Contains(err.Error(), "SUBSCRIBE ch") {
		t.Errorf("Subscribe without permission: %v, want a NOPERM ReplyError", err)
	}
	if len(sub.ready) > 0 {
		t.Error("Ready without permission")
	}
}

// A channel added while the subscription runs, which the server refuses
// (NOPERM: the ACL user may not hear it), ends Subscribe with the server's
// error, which the goroutine that sends the SUBSCRIBE passes on.
func TestSubscribeRefusedChannel(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
		"--user", "anchored", "on", ">pw", "~*", "&kit:anchor", "+@connection", "+subscribe", "+unsubscribe")
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		Username: "anchored", Password: "pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	sub := newSubscription("kit:anchor")
	done := make(chan error, 1)
	go func() { done <- redlockrueidis.NewPool(client).Subscribe(context.Background(), &sub.Subscription) }()
	select {
	case ch := <-sub.ready:
		if ch != "kit:anchor" {
			t.Fatalf("Ready(%q), want kit:anchor", ch)
		}
	case err := <-done:
		t.Fatalf("Subscribe returned before it was ready: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe not ready after 5s")
	}
	sub.set("kit:anchor", "kit:forbidden")
	select {
	case err := <-done:
		var rerr driver.ReplyError
		if !errors.As(err, &rerr) || rerr.Code() != "NOPERM" || !strings.Contains(err.Error(), "SUBSCRIBE kit:forbidden") {
			t.Errorf("Subscribe after a refused channel: %v, want a NOPERM ReplyError", err)
		}
	case ch := <-sub.ready:
		t.Errorf("Ready(%q) for a refused channel", ch)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running 5s after the server refused a channel")
	}
}

// Channels come and go while messages pour in: the hooks, which run on the
// goroutine that also reads the replies to SUBSCRIBE and UNSUBSCRIBE, must
// never wait for a goroutine that waits for such a reply.
func TestSubscribeChangesUnderMessages(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var mu sync.Mutex
	want := []string{"kit:anchor"}
	changed := make(chan struct{}, 1)
	ready := make(chan string, 16)
	var delivered atomic.Int64
	sub := &driver.Subscription{
		Channels: func() []string {
			mu.Lock()
			defer mu.Unlock()
			return want
		},
		Changed: changed,
		Ready:   func(ch string) { ready <- ch },
		Deliver: func(string, string) { delivered.Add(1) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- redlockrueidis.NewPool(client).Subscribe(ctx, sub) }()
	waitReady := func(want string) {
		t.Helper()
		select {
		case ch := <-ready:
			if ch != want {
				t.Fatalf("Ready(%q), want Ready(%q)", ch, want)
			}
		case err := <-done:
			t.Fatalf("Subscribe returned %v while waiting for Ready(%q)", err, want)
		case <-time.After(5 * time.Second):
			t.Fatalf("no Ready(%q) after 5s: a deadlock?", want)
		}
	}
	waitReady("kit:anchor")

	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for {
			select {
			case <-stop:
				return
			default:
			}
			client.Do(context.Background(), client.B().Publish().Channel("kit:anchor").Message("x").Build())
		}
	}()
	for i := range 50 {
		key := fmt.Sprintf("kit:key:%d", i)
		mu.Lock()
		want = []string{"kit:anchor", key} // drops the previous key
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
		waitReady(key)
	}
	close(stop)
	<-published
	if delivered.Load() == 0 {
		t.Error("no message delivered while the channels changed")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe after cancel: %v", err)
	}
}

package valkeygo_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/valkeygo"
)

// subscribe runs Subscribe on a goroutine and returns its result channel
// once ready was called, or fails t.
func subscribe(t *testing.T, ctx context.Context, sub driver.Subscriber) <-chan error {
	t.Helper()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- sub.Subscribe(ctx, "ch", func() { close(ready) }, func(string) {}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Subscribe returned before ready: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe not ready after 5s")
	}
	return done
}

// A subscription to a server that stops answering, without closing the
// connection, ends with an error once valkey-go's background PING goes
// unanswered for ConnWriteTimeout.
func TestSubscribeFrozenServer(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		ConnWriteTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	done := subscribe(t, context.Background(), valkeygo.NewPool(client))
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
	client, _ := valkey.NewClient(valkey.ClientOption{
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
	err := valkeygo.NewPool(client).Subscribe(ctx, "ch", func() { t.Error("ready on a paused server") }, func(string) {})
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("Subscribe on a paused server: %v after %v, want context.DeadlineExceeded after 200ms", err, took)
	}
}

// An error reply to SUBSCRIBE comes back with the server's code.
func TestSubscribeErrorReply(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
		"--user", "nosub", "on", ">pw", "~*", "&*", "+@connection")
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{s.Addr}, ForceSingleClient: true, DisableCache: true,
		Username: "nosub", Password: "pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	err = valkeygo.NewPool(client).Subscribe(context.Background(), "ch", func() { t.Error("ready without permission") }, func(string) {})
	var rerr driver.ReplyError
	if !errors.As(err, &rerr) || rerr.Code() != "NOPERM" || !strings.Contains(err.Error(), "SUBSCRIBE") {
		t.Errorf("Subscribe without permission: %v, want a NOPERM ReplyError", err)
	}
}

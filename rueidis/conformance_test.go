package rueidis_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlocktest"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// The rueidis adapter passes the conformance kit, as every adapter must.
func TestConformance(t *testing.T) {
	redlocktest.Run(t, redlocktest.Adapter{Dial: dial, DialCluster: dialCluster})
}

// dial makes a client for one standalone master the way the package doc
// recommends. rueidis connects in NewClient; with ForceSingleClient it
// returns a working client even when that first connection fails (a
// paused server, a password it lacks), and reconnects on use, so that each
// Exec reports the server's error.
func dial(t testing.TB, s redlocktest.Server) redlock.Pool {
	client, err := rueidis.NewClient(standalone(s))
	if client == nil {
		t.Fatalf("rueidis.NewClient(%s): %v", s.Addr, err)
	}
	if err != nil {
		t.Logf("rueidis.NewClient(%s): %v; it reconnects on use", s.Addr, err)
	}
	t.Cleanup(client.Close)
	return redlockrueidis.NewPool(client)
}

func standalone(s redlocktest.Server) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress: []string{s.Addr},
		TLSConfig:   s.TLS,
		Username:    s.Username,
		Password:    s.Password,
		// One master, as Redlock means it: no cluster discovery, and a
		// client even when the first connection fails.
		ForceSingleClient: true,
		// Client-side caching needs RESP3 and CLIENT TRACKING, which an
		// old or stand-in server lacks; redlock reads no cached value.
		DisableCache: true,
		// A paused server accepts the TCP connection and never answers
		// HELLO: this bounds each attempt to connect.
		Dialer: net.Dialer{Timeout: time.Second},
	}
}

func dialCluster(t testing.TB, seeds []redlocktest.Server) redlock.Pool {
	// Every seed has the same TLS configuration and login.
	opt := rueidis.ClientOption{DisableCache: true, TLSConfig: seeds[0].TLS, Username: seeds[0].Username, Password: seeds[0].Password}
	for _, s := range seeds {
		opt.InitAddress = append(opt.InitAddress, s.Addr)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", opt.InitAddress, err)
	}
	t.Cleanup(client.Close)
	if client.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", client.Mode())
	}
	return redlockrueidis.NewPool(client)
}

// The kit lets Dial meet a paused server, though no scenario does yet: Dial
// returns after Dialer.Timeout with a Pool whose calls fail within the node
// timeout while the server is paused, and work once it resumes.
func TestDialPausedServer(t *testing.T) {
	requireRedis(t, false)
	s := redistest.Start(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	start := time.Now()
	pool := dial(t, redlocktest.Server{Addr: s.Addr})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Dial of a paused server took %v, want about Dialer.Timeout (1s)", took)
	}
	c, err := redlock.New([]redlock.Pool{pool}, redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start = time.Now()
	_, err = c.TryLock(ctx, "paused", time.Second)
	if took := time.Since(start); !errors.Is(err, redlock.ErrNodeTimeout) || took > time.Second {
		t.Errorf("TryLock on a paused server: %v after %v, want ErrNodeTimeout within 200ms or so", err, took)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := c.TryLock(ctx, "paused", time.Second)
		if err == nil {
			l.Unlock(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TryLock 5s after the server resumed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

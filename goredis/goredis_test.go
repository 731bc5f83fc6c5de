package goredis_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlocktest"
)

func TestMain(m *testing.M) {
	// redis.SetLogger writes a global that every client's dials read, with
	// no lock: it must be called before any client exists, as the package
	// Example says. The tests that watch the log swap testLog's target.
	redis.SetLogger(testLog)
	goleak.VerifyTestMain(m)
}

// newClient makes a *redis.Client for s the way the package doc advises: the
// node timeout bounds socket reads and writes. It connects lazily, so it
// neither blocks nor fails on a paused or misconfigured server.
func newClient(t testing.TB, s redlocktest.Server) *redis.Client {
	return dial(t, s, true)
}

func dial(t testing.TB, s redlocktest.Server, contextTimeout bool) *redis.Client {
	client := redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		TLSConfig:             s.TLS,
		Username:              s.Username,
		Password:              s.Password,
		ContextTimeoutEnabled: contextTimeout,
	})
	t.Cleanup(func() { client.Close() })
	return client
}

func dialCluster(t testing.TB, seeds []redlocktest.Server, contextTimeout bool) *redis.ClusterClient {
	opts := &redis.ClusterOptions{
		TLSConfig:             seeds[0].TLS,
		Username:              seeds[0].Username,
		Password:              seeds[0].Password,
		ContextTimeoutEnabled: contextTimeout,
	}
	for _, s := range seeds {
		opts.Addrs = append(opts.Addrs, s.Addr)
	}
	client := redis.NewClusterClient(opts)
	t.Cleanup(func() { client.Close() })
	return client
}

// The go-redis adapter passes the conformance kit, with standalone masters
// and with Redis Cluster members: with the options the package doc advises
// (ContextTimeout), and with go-redis's defaults, which ignore context
// deadlines on sockets (Defaults); the core bounds every call either way.
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name           string
		contextTimeout bool
	}{{"ContextTimeout", true}, {"Defaults", false}} {
		t.Run(mode.name, func(t *testing.T) {
			redlocktest.Run(t, redlocktest.Adapter{
				Dial: func(t testing.TB, s redlocktest.Server) redlock.Pool {
					return goredis.NewPool(dial(t, s, mode.contextTimeout))
				},
				DialCluster: func(t testing.TB, seeds []redlocktest.Server) redlock.Pool {
					return goredis.NewPool(dialCluster(t, seeds, mode.contextTimeout))
				},
			})
		})
	}
}

// An outcome is what the inject hook makes of one command: a value, or an
// error.
type outcome struct {
	val any
	err error
}

// inject is a go-redis hook that answers every command itself, with the
// next of its outcomes, and never dials: it puts each outcome go-redis can
// report in front of Exec, through go-redis's real Process and pipeline.
type inject struct {
	outcomes  []outcome
	seen      [][]any // each command's arguments, as go-redis got them
	processed int     // commands sent alone
	pipelines int     // pipelines sent
}

func (h *inject) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("inject: no dialing")
	}
}

func (h *inject) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		h.processed++
		return h.answer(cmd)
	}
}

func (h *inject) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		h.pipelines++
		var first error
		for _, cmd := range cmds {
			if err := h.answer(cmd); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

func (h *inject) answer(cmd redis.Cmder) error {
	h.seen = append(h.seen, cmd.Args())
	o := h.outcomes[0]
	h.outcomes = h.outcomes[1:]
	if o.err != nil {
		cmd.SetErr(o.err)
		return o.err
	}
	cmd.(interface{ SetVal(any) }).SetVal(o.val)
	return nil
}

// replyErr is an error reply as a go-redis hook or a wrapper may make one:
// any error with a RedisError method is one to go-redis.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// Each outcome go-redis reports reaches the core as the port says: values
// pass through, a null reply is a nil value, an error reply is a
// ReplyError with the server's text, and anything else fails the batch.
func TestExecReplies(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	noscript := redis.ErrNoScript.Error()
	tests := []struct {
		name     string
		outcomes []outcome
		want     []driver.Reply // when the batch succeeds
		wantErr  error          // else
	}{
		{name: "status", outcomes: []outcome{{val: "OK"}}, want: []driver.Reply{{Value: "OK"}}},
		{name: "integer", outcomes: []outcome{{val: int64(7)}}, want: []driver.Reply{{Value: int64(7)}}},
		{name: "array", outcomes: []outcome{{val: []any{"a", int64(1)}}}, want: []driver.Reply{{Value: []any{"a", int64(1)}}}},
		{name: "null", outcomes: []outcome{{err: redis.Nil}}, want: []driver.Reply{{}}},
		{name: "error reply", outcomes: []outcome{{err: redis.ErrNoScript}},
			want: []driver.Reply{{Err: driver.ReplyError(noscript)}}},
		{name: "error reply of another type", outcomes: []outcome{{err: replyErr("LOADING busy")}},
			want: []driver.Reply{{Err: driver.ReplyError("LOADING busy")}}},
		{name: "wrapped error reply", outcomes: []outcome{{err: fmt.Errorf("hook: %w", redis.ErrNoScript)}},
			want: []driver.Reply{{Err: driver.ReplyError(noscript)}}},
		{name: "broken connection", outcomes: []outcome{{err: io.EOF}}, wantErr: io.EOF},
		{name: "socket timeout", outcomes: []outcome{{err: timeout}}, wantErr: timeout},
		{name: "context", outcomes: []outcome{{err: context.DeadlineExceeded}}, wantErr: context.DeadlineExceeded},
		{name: "pool", outcomes: []outcome{{err: redis.ErrPoolTimeout}}, wantErr: redis.ErrPoolTimeout},

		{name: "pipeline of replies", outcomes: []outcome{{val: "OK"}, {err: redis.Nil}, {err: redis.ErrNoScript}, {val: int64(1)}},
			want: []driver.Reply{{Value: "OK"}, {}, {Err: driver.ReplyError(noscript)}, {Value: int64(1)}}},
		{name: "pipeline broken after a reply", outcomes: []outcome{{val: "OK"}, {err: io.EOF}, {err: io.EOF}}, wantErr: io.EOF},
		{name: "pipeline broken after an error reply", outcomes: []outcome{{err: redis.ErrNoScript}, {err: io.EOF}}, wantErr: io.EOF},
		{name: "pipeline broken after a null", outcomes: []outcome{{err: redis.Nil}, {val: "OK"}, {err: timeout}}, wantErr: timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hook := &inject{outcomes: tt.outcomes}
			client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
			defer client.Close()
			client.AddHook(hook)
			pool := goredis.NewPool(client)

			cmds := make([]driver.Command, len(tt.outcomes))
			replies := make([]driver.Reply, len(tt.outcomes))
			for i := range cmds {
				cmds[i] = driver.Command{Name: "EVALSHA", Args: []any{"sha", int64(1), fmt.Sprint("k", i), "token"}, FirstKey: 2, NumKeys: 1}
				replies[i] = driver.Reply{Value: "stale", Err: errors.New("stale")}
			}
			err := pool.Exec(context.Background(), cmds, replies)
			if len(hook.outcomes) != 0 {
				t.Errorf("%d commands were not sent", len(hook.outcomes))
			}
			if alone := len(cmds) == 1; (alone && hook.processed != 1) || (!alone && hook.pipelines != 1) {
				t.Errorf("%d commands went out as %d alone and %d pipelines, want one of either", len(cmds), hook.processed, hook.pipelines)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Exec: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if !reflect.DeepEqual(replies, tt.want) {
				t.Errorf("replies %#v, want %#v", replies, tt.want)
			}
			for i, args := range hook.seen {
				want := []any{"evalsha", "sha", int64(1), fmt.Sprint("k", i), "token"}
				if !reflect.DeepEqual(args, want) {
					t.Errorf("command %d went out as %v, want %v", i, args, want)
				}
			}
		})
	}
}

// requireRedis skips t if redis-server is missing, or fails it when the
// environment demands real servers, as the kit does.
func requireRedis(t testing.TB) {
	t.Helper()
	if ok, why := redistest.Available(); !ok {
		if os.Getenv("REDLOCK_REQUIRE_DOCKER") == "1" || os.Getenv("REDLOCK_REQUIRE_REDIS") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// loading is a stand-in server that answers every command but the
// connection handshake with a LOADING error, and counts those commands.
type loading struct {
	l        net.Listener
	commands atomic.Int64
}

func startLoading(t *testing.T) *loading {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &loading{l: l}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return s
}

func (s *loading) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		var args []string
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(arg))
		}
		reply := "+OK\r\n"
		switch strings.ToLower(args[0]) {
		case "hello":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "client", "ping":
		default:
			s.commands.Add(1)
			reply = "-LOADING Redis is loading the dataset in memory\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// go-redis retries a command that failed with LOADING (and with READONLY, a
// broken connection, a timeout...) up to MaxRetries times, three by default.
// The adapter's commands go out once, single or pipelined: retries are the
// core's. The plain Do shows that the stand-in would see go-redis's retries.
func TestNoDriverRetries(t *testing.T) {
	s := startLoading(t)
	client := redis.NewClient(&redis.Options{Addr: s.l.Addr().String(), MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
	defer client.Close()
	ctx := context.Background()

	if err := client.Do(ctx, "set", "k", "v").Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("Do: %v, want LOADING", err)
	}
	if n := s.commands.Swap(0); n < 2 {
		t.Fatalf("the stand-in saw %d SETs from a plain Do, want go-redis's retries", n)
	}

	pool := goredis.NewPool(client)
	for _, n := range []int{1, 3} {
		cmds := make([]driver.Command, n)
		for i := range cmds {
			cmds[i] = driver.Command{Name: "SET", Args: []any{"k", "v", "NX", "PX", int64(1000)}, NumKeys: 1}
		}
		replies := make([]driver.Reply, n)
		if err := pool.Exec(ctx, cmds, replies); err != nil {
			t.Fatalf("Exec of %d: %v", n, err)
		}
		for i, r := range replies {
			if rerr, ok := r.Err.(driver.ReplyError); !ok || rerr.Code() != "LOADING" {
				t.Errorf("Exec of %d: reply %d is %#v, want a LOADING ReplyError", n, i, r)
			}
		}
		if got := s.commands.Swap(0); got != int64(n) {
			t.Errorf("Exec of %d commands sent %d", n, got)
		}
	}
}

// startSentinel starts a Sentinel that monitors master as "mymaster" and
// returns its address once it knows the master.
func startSentinel(t *testing.T, master *redistest.Server) string {
	t.Helper()
	s := redistest.StartSentinel(t, fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1", master.Port))
	addr := s.Addr
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sentinel.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := sentinel.GetMasterAddrByName(context.Background(), "mymaster").Result()
		if err == nil && net.JoinHostPort(got[0], got[1]) == master.Addr {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel on %s does not know the master: %v %v\n%s", addr, got, err, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockOnce locks and unlocks a key through pool alone, and checks on the
// master that the lock held the key in between.
func lockOnce(t *testing.T, pool redlock.Pool, master *redistest.Server, key string) {
	t.Helper()
	locker, err := redlock.New([]redlock.Pool{pool}, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := locker.Lock(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("Lock through %T: %v", pool, err)
	}
	direct := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer direct.Close()
	if got, err := direct.Get(ctx, key).Result(); err != nil || got != l.Value() {
		t.Errorf("the master holds %q (%v), want the token %q", got, err, l.Value())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if n, err := direct.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("after Unlock the key exists: %d %v", n, err)
	}
}

// The clients a program may hold all make working Pools: a Sentinel
// failover client, and the clients redis.NewUniversalClient returns.
func TestClients(t *testing.T) {
	requireRedis(t)
	master := redistest.Start(t)
	sentinel := startSentinel(t, master)

	t.Run("FailoverClient", func(t *testing.T) {
		client := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            "mymaster",
			SentinelAddrs:         []string{sentinel},
			ContextTimeoutEnabled: true,
		})
		defer client.Close()
		if name := goredis.NewPool(client).Name(); name != "" {
			t.Errorf("a failover client's Pool is named %q, want \"\": its options name no server", name)
		}
		pool := goredis.NewNamedPool(client, "mymaster")
		if pool.Name() != "mymaster" {
			t.Errorf("Name() = %q, want mymaster", pool.Name())
		}
		lockOnce(t, pool, master, "clients:failover")
	})
	t.Run("UniversalSentinel", func(t *testing.T) {
		client := redis.NewUniversalClient(&redis.UniversalOptions{
			MasterName:            "mymaster",
			Addrs:                 []string{sentinel},
			ContextTimeoutEnabled: true,
		})
		defer client.Close()
		lockOnce(t, goredis.NewNamedPool(client, "mymaster"), master, "clients:universal-sentinel")
	})
	t.Run("UniversalSimple", func(t *testing.T) {
		client := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs:                 []string{master.Addr},
			ContextTimeoutEnabled: true,
		})
		defer client.Close()
		pool := goredis.NewPool(client)
		if pool.Name() != master.Addr {
			t.Errorf("Name() = %q, want %q", pool.Name(), master.Addr)
		}
		lockOnce(t, pool, master, "clients:universal")
	})
}

// A Ring, or no client, is refused at construction, loudly, with an error
// and not a panic.
func TestNewPoolRefusesRing(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	for name, client := range map[string]redis.UniversalClient{"ring": ring, "nil": nil} {
		pool := goredis.NewPool(client)
		if pool.Valid() == nil {
			t.Errorf("NewPool(%s).Valid() = nil, want an error", name)
		}
		_, err := redlock.New([]redlock.Pool{pool})
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("redlock.New with NewPool(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

// The zero Pool, a nil *Pool and a Pool of a typed nil client are refused
// with an error wrapping redlock.ErrInvalid where a Pool is checked, and
// every method returns an error or a zero value, never a panic.
func TestZeroAndNilPool(t *testing.T) {
	ctx := context.Background()
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	for name, p := range map[string]*goredis.Pool{
		"zero Pool":                 {},
		"nil *Pool":                 nil,
		"NewPool(nil)":              goredis.NewPool(nil),
		"NewPool(nil *Client)":      goredis.NewPool(nilClient),
		"NewPool(nil *Cluster)":     goredis.NewPool(nilCluster),
		"NewNamedPool(nil *Client)": goredis.NewNamedPool(nilClient, "x"),
	} {
		t.Run(name, func(t *testing.T) {
			if p.Valid() == nil {
				t.Error("Valid() = nil, want an error")
			}
			if p != nil {
				if _, err := redlock.New([]redlock.Pool{p}); !errors.Is(err, redlock.ErrInvalid) {
					t.Errorf("redlock.New = %v, want ErrInvalid", err)
				}
			}
			if err := p.Exec(ctx, []driver.Command{{Name: "PING"}}, make([]driver.Reply, 1)); err == nil {
				t.Error("Exec = nil, want an error")
			}
			sub := &driver.Subscription{
				Channels: func() []string { return []string{"c"} },
				Ready:    func(string) { t.Error("ready") },
				Deliver:  func(string, string) {},
			}
			if err := p.Subscribe(ctx, sub); err == nil {
				t.Error("Subscribe = nil, want an error")
			}
			if p.HonorsDeadline() || p.SingleServer() {
				t.Error("HonorsDeadline or SingleServer reports true")
			}
			_ = p.Name()
		})
	}
}

// An idle subscription outlives many ping intervals, and one to a server
// that stops answering (SIGSTOP: the connection stays open) ends with an
// error within two.
func TestSubscribeSilentServer(t *testing.T) {
	requireRedis(t)
	const interval = 100 * time.Millisecond
	defer goredis.SetPubsubPing(interval)()
	s := redistest.Start(t)
	client := newClient(t, redlocktest.Server{Addr: s.Addr})
	pool := goredis.NewPool(client)

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	got := make(chan string, 1)
	done := make(chan error, 1)
	exited := make(chan struct{})
	sub := &driver.Subscription{
		Channels: func() []string { return []string{"silent"} },
		Ready:    func(string) { close(ready) },
		Deliver:  func(_, p string) { got <- p },
	}
	go func() {
		defer close(exited)
		done <- pool.Subscribe(ctx, sub)
	}()
	defer func() { // before the interval is restored
		cancel()
		<-exited
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Subscribe returned before it was ready: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe not ready after 5s")
	}

	time.Sleep(5 * interval)
	select {
	case err := <-done:
		t.Fatalf("an idle subscription ended: %v", err)
	default:
	}
	if err := client.Publish(ctx, "silent", "still here").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "still here" {
			t.Errorf("got %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message after 5 idle intervals")
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	start := time.Now()
	select {
	case err := <-done:
		if err == nil || ctx.Err() != nil {
			t.Errorf("Subscribe to a silent server returned %v, want its error", err)
		}
		if d := time.Since(start); d > 2*interval+time.Second {
			t.Errorf("Subscribe noticed the silence after %v, want about %v", d, 2*interval)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running 5s after its server went silent")
	}
}

// A channel added while the subscription runs, which the server refuses
// (NOPERM: the ACL user may not hear it), ends Subscribe with the server's
// error rather than leaving the channel silently unheard.
func TestSubscribeRefusedChannel(t *testing.T) {
	requireRedis(t)
	s := redistest.Start(t, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
		"--user", "anchored", "on", ">pw", "~*", "&kit:anchor", "+@connection", "+subscribe", "+unsubscribe")
	pool := goredis.NewPool(newClient(t, redlocktest.Server{Addr: s.Addr, Username: "anchored", Password: "pw"}))
	var mu sync.Mutex
	wanted := []string{"kit:anchor"}
	changed := make(chan struct{}, 1)
	ready := make(chan string, 2)
	sub := &driver.Subscription{
		Channels: func() []string {
			mu.Lock()
			defer mu.Unlock()
			return wanted
		},
		Changed: changed,
		Ready:   func(ch string) { ready <- ch },
		Deliver: func(string, string) {},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- pool.Subscribe(ctx, sub) }()
	select {
	case ch := <-ready:
		if ch != "kit:anchor" {
			t.Fatalf("Ready(%q), want kit:anchor", ch)
		}
	case err := <-done:
		t.Fatalf("Subscribe returned before it was ready: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe not ready after 5s")
	}
	mu.Lock()
	wanted = []string{"kit:anchor", "kit:forbidden"}
	mu.Unlock()
	changed <- struct{}{}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("Subscribe after a refused channel: %v, want the NOPERM error", err)
		}
	case ch := <-ready:
		t.Errorf("Ready(%q) for a refused channel", ch)
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running 5s after the server refused a channel")
	}
}

// Only a standalone client without TLS and with ContextTimeoutEnabled
// promises to keep its deadlines.
func TestHonorsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"default options", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"TLS", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, TLSConfig: &tls.Config{}}), false},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
		{"failover", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
		{"nil", nil, false},
		{"ReadTimeout -2", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"WriteTimeout -2", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		// -1 is no timeout of go-redis's own: ctx's deadline still applies.
		{"ReadTimeout -1", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -1}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.client != nil {
				defer tc.client.Close()
			}
			if got := goredis.NewPool(tc.client).HonorsDeadline(); got != tc.want {
				t.Errorf("HonorsDeadline() = %v, want %v", got, tc.want)
			}
		})
	}
}

// SingleServer: a *redis.Client has one master, a ClusterClient does not,
// so only the first may carry several keys' releases in one script call.
func TestSingleServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"standalone", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"failover", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), true},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.client != nil {
				defer tc.client.Close()
			}
			if got := goredis.NewPool(tc.client).SingleServer(); got != tc.want {
				t.Errorf("SingleServer() = %v, want %v", got, tc.want)
			}
		})
	}
}

package redlock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redigo"
)

// seenPool records every command it passes on, and says it reaches one
// server (driver.SingleServer) if single.
type seenPool struct {
	Pool
	single bool
	mu     sync.Mutex
	cmds   []driver.Command
}

func (p *seenPool) SingleServer() bool { return p.single }

func (p *seenPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.mu.Lock()
	for _, c := range cmds {
		c.Args = slices.Clone(c.Args)
		p.cmds = append(p.cmds, c)
	}
	p.mu.Unlock()
	return p.Pool.Exec(ctx, cmds, replies)
}

// take returns the commands seen since the last take.
func (p *seenPool) take() []driver.Command {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmds := p.cmds
	p.cmds = nil
	return cmds
}

// exchangeOps sends one batch of ops through a wire of n's pipe to n's
// Pool, as a runner would, and returns its calls, their replies set: a
// release of key with token (rel) or a SET NX of key, in order.
type batchOp struct {
	rel        bool
	key, token string
}

func exchangeOps(n *node, ops ...batchOp) []*call {
	deadline := time.Now().Add(5 * time.Second)
	var batch []*call
	for _, op := range ops {
		var c *call
		if op.rel {
			c = n.pipe.newCall(context.Background(), deadline, "EVALSHA", 2, 1,
				[]any{releaseScript.hashArg, releaseScript.keysArg, op.key, op.token, "redlock:test"})
		} else {
			c = n.pipe.newCall(context.Background(), deadline, "SET", 0, 1,
				[]any{op.key, op.token, "NX", "PX", int64(60000)})
		}
		c.lane = 1 << laneOf(op.key)
		batch = append(batch, c)
	}
	var wr wire
	wr.exchange(&n.pipe, n.pool, batch)
	return batch
}

// The release scripts of one batch go as one call of release_many.lua on a
// Pool that reaches one server, each release with its own key's answer:
// deleted, not its token, a key of another type, gone. A release whose key
// another command of the batch names keeps its place, so that the SET
// after it finds the key free. The script goes by EVAL until the node has
// it, by EVALSHA after, and by EVAL again after a NOSCRIPT, which reaches
// every release it carried.
func TestCombinedReleasesGoAsOneScript(t *testing.T) {
	servers := map[string]func(t *testing.T) string{
		"redis-server": func(t *testing.T) string { return redistest.Start(t).Addr },
		"miniredis":    func(t *testing.T) string { return miniredis.RunT(t).Addr() },
	}
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			rp := redigo.NewPool(start(t))
			defer rp.Close()
			pool := &seenPool{Pool: rp, single: true}
			n := newNode(0, pool)
			if !n.pipe.combine {
				t.Fatal("a node over a SingleServer Pool does not combine releases")
			}
			conn := rp.Get()
			defer conn.Close()
			must := func(args ...any) {
				t.Helper()
				if _, err := conn.Do(args[0].(string), args[1:]...); err != nil {
					t.Fatal(err)
				}
			}
			must("SCRIPT", "LOAD", releaseSource)
			for _, k := range []string{"a", "b", "c", "h", "i"} {
				must("SET", k, "tok-"+k)
			}
			must("SET", "d", "someone else's")
			must("HSET", "e", "f", "v")
			// Each release that deleted its key announces it on the key's
			// own channel: the prefix given, then the key.
			sub := redis.PubSubConn{Conn: rp.Get()}
			defer sub.Close()
			if err := sub.PSubscribe("redlock:test*"); err != nil {
				t.Fatal(err)
			}
			if _, ok := sub.Receive().(redis.Subscription); !ok {
				t.Fatal("no PSUBSCRIBE confirmation")
			}

			batch := exchangeOps(n,
				batchOp{true, "a", "tok-a"},
				batchOp{false, "g", "tok-g"},
				batchOp{false, "i", "tok-i2"}, // refused: i is held until its release below
				batchOp{true, "h", "tok-h"},   // the SET on h below keeps it in place
				batchOp{true, "b", "tok-b"},
				batchOp{true, "i", "tok-i"}, // after the SET on i, still
				batchOp{true, "d", "tok-d"},
				batchOp{true, "e", "tok-e"},
				batchOp{false, "h", "tok-h2"},
				batchOp{true, "f", "tok-f"},
				batchOp{true, "c", "tok-c"},
			)

			sent := pool.take()
			var names []string
			for _, c := range sent {
				names = append(names, c.Name)
			}
			if want := []string{"EVAL", "SET", "SET", "EVALSHA", "EVALSHA", "SET"}; !slices.Equal(names, want) {
				t.Fatalf("sent %v, want %v", names, want)
			}
			if keys := sent[0].Keys(); !slices.Equal(keys, []any{"a", "b", "d", "e", "f", "c"}) {
				t.Errorf("combined release of %v, want a, b, d, e, f, c in the batch's order", keys)
			}
			if h, i := sent[3].Keys(), sent[4].Keys(); h[0] != "h" || i[0] != "i" {
				t.Errorf("single releases of %v and %v, want h and i", h, i)
			}
			want := map[string]any{"a": int64(1), "b": int64(1), "c": int64(1), "d": int64(0), "f": int64(0), "h": int64(1), "i": int64(1)}
			for _, c := range batch {
				key := c.args[c.cmd.FirstKey]
				switch {
				case key == "e" && c.cmd.Name == "EVALSHA":
					if code := replyCode(c.reply.Err); code != "WRONGTYPE" {
						t.Errorf("release of e: %+v, want its own WRONGTYPE error", c.reply)
					}
				case c.cmd.Name == "SET" && key == "i":
					if c.reply.Err != nil || c.reply.Value != nil {
						t.Errorf("SET i: %+v, want refused (i released after it)", c.reply)
					}
				case c.cmd.Name == "SET":
					if c.reply.Err != nil || c.reply.Value != "OK" {
						t.Errorf("SET %v: %+v, want OK (h released before it)", key, c.reply)
					}
				default:
					if c.reply.Err != nil || c.reply.Value != want[key.(string)] {
						t.Errorf("release of %v: %+v, want %v", key, c.reply, want[key.(string)])
					}
				}
			}
			if v, _ := redis.String(conn.Do("GET", "d")); v != "someone else's" {
				t.Errorf("d holds %q after another token's release", v)
			}
			announced := map[string]bool{}
			for range 5 {
				switch m := sub.ReceiveWithTimeout(5 * time.Second).(type) {
				case redis.Message:
					if m.Channel != "redlock:test"+string(m.Data) {
						t.Errorf("%q announced on %q, want its own channel", m.Data, m.Channel)
					}
					announced[string(m.Data)] = true
				default:
					t.Fatalf("announcements so far %v, then %v", announced, m)
				}
			}
			if want := map[string]bool{"a": true, "b": true, "c": true, "h": true, "i": true}; !maps.Equal(announced, want) {
				t.Errorf("announced %v, want the keys deleted: %v", announced, want)
			}
			if !n.pipe.manyCached.Load() {
				t.Error("the combined script is not known cached after it ran")
			}

			// Cached: EVALSHA. Then flushed: NOSCRIPT for each, and EVAL next.
			for round, wantName := range []string{"EVALSHA", "EVALSHA", "EVAL"} {
				if round == 1 {
					must("SCRIPT", "FLUSH")
				}
				must("SET", "x", "tok-x")
				must("SET", "y", "tok-y")
				batch := exchangeOps(n, batchOp{true, "x", "tok-x"}, batchOp{true, "y", "tok-y"})
				sent := pool.take()
				if len(sent) != 1 || sent[0].Name != wantName {
					t.Fatalf("round %d: sent %v, want one %s", round, sent, wantName)
				}
				for _, c := range batch {
					if round == 1 {
						if replyCode(c.reply.Err) != "NOSCRIPT" {
							t.Errorf("round %d: %+v, want NOSCRIPT", round, c.reply)
						}
					} else if c.reply.Value != int64(1) {
						t.Errorf("round %d: %+v, want 1", round, c.reply)
					}
				}
				if cached := n.pipe.manyCached.Load(); cached != (round != 1) {
					t.Errorf("round %d: cached %v", round, cached)
				}
			}
		})
	}
}

// A Pool that does not say it reaches one server (a Cluster member, a
// program's own redigo pool) never gets a command naming several locks'
// keys.
func TestReleasesNotCombinedWithoutSingleServer(t *testing.T) {
	rp := redigo.NewPool(miniredis.RunT(t).Addr())
	defer rp.Close()
	for _, pool := range []Pool{&seenPool{Pool: rp}, &redigo.Pool{Pool: rp.Pool, Addr: rp.Addr}} {
		n := newNode(0, pool)
		if n.pipe.combine {
			t.Fatalf("%T combines releases", pool)
		}
	}
	pool := &seenPool{Pool: rp}
	n := newNode(0, pool)
	exchangeOps(n, batchOp{true, "a", "t"}, batchOp{true, "b", "t"})
	if sent := pool.take(); len(sent) != 2 {
		t.Errorf("sent %d commands for two releases, want 2", len(sent))
	}
}

// Through the whole client: 48 callers lock and unlock over three nodes,
// so that releases share batches; every Unlock deletes its keys.
func TestCombinedReleasesUnlockEveryKey(t *testing.T) {
	var (
		pools []Pool
		seen  []*seenPool
		mrs   []*miniredis.Miniredis
	)
	for range 3 {
		mr := miniredis.RunT(t)
		rp := redigo.NewPool(mr.Addr())
		t.Cleanup(func() { rp.Close() })
		sp := &seenPool{Pool: rp, single: true}
		pools, seen, mrs = append(pools, sp), append(seen, sp), append(mrs, mr)
	}
	// A node timeout long enough that no release waits past it on a loaded
	// machine: a release that times out leaves its key to the ttl.
	c, err := New(pools, WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 48*10)
	for g := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				l, err := c.TryLock(context.Background(), "k"+string(rune('A'+g))+string(rune('0'+i)), time.Minute)
				if err != nil {
					errs <- err
					continue
				}
				if err := l.Unlock(context.Background()); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Unlock returns once a majority has answered; the last node's release
	// is answered within the node timeout.
	for i, mr := range mrs {
		for start := time.Now(); len(mr.Keys()) != 0; time.Sleep(time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("node %d still holds %v after every Unlock", i, mr.Keys())
			}
		}
	}
	combined := 0
	for _, sp := range seen {
		for _, cmd := range sp.take() {
			if cmd.NumKeys > 1 {
				combined++
			}
		}
	}
	t.Logf("%d combined releases", combined)
}

// A combined release at maxmemory with noeviction still deletes (a release
// needs no memory), and on a replica each key that holds its token gets
// its own READONLY, while a key with another token is refused.
func TestCombinedReleasesAtMaxmemoryAndOnReplica(t *testing.T) {
	exchange := func(t *testing.T, addr string, ops ...batchOp) []*call {
		t.Helper()
		rp := redigo.NewPool(addr)
		t.Cleanup(func() { rp.Close() })
		return exchangeOps(newNode(0, rp), ops...)
	}
	do := func(t *testing.T, addr string, args ...any) any {
		t.Helper()
		conn, err := redis.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		v, err := conn.Do(args[0].(string), args[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("maxmemory", func(t *testing.T) {
		addr := redistest.Start(t).Addr
		do(t, addr, "SET", "a", "tok-a")
		do(t, addr, "SET", "b", "tok-b")
		do(t, addr, "CONFIG", "SET", "maxmemory-policy", "noeviction")
		do(t, addr, "CONFIG", "SET", "maxmemory", "1")
		batch := exchange(t, addr, batchOp{true, "a", "tok-a"}, batchOp{true, "b", "tok-b"}, batchOp{false, "c", "tok-c"})
		for _, c := range batch[:2] {
			if c.reply.Err != nil || c.reply.Value != int64(1) {
				t.Errorf("release of %v at maxmemory: %+v, want 1", c.args[2], c.reply)
			}
		}
		if code := replyCode(batch[2].reply.Err); code != "OOM" {
			t.Errorf("SET at maxmemory: %+v, want OOM (the node is not full, the test proves nothing)", batch[2].reply)
		}
	})

	t.Run("replica", func(t *testing.T) {
		master := redistest.Start(t)
		host, port, _ := strings.Cut(master.Addr, ":")
		replica := redistest.Start(t, "--replicaof", host, port)
		do(t, master.Addr, "SET", "a", "tok-a")
		do(t, master.Addr, "SET", "b", "tok-b")
		for start := time.Now(); do(t, replica.Addr, "EXISTS", "b") != int64(1); time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 10*time.Second {
				t.Fatal("the replica never caught up")
			}
		}
		batch := exchange(t, replica.Addr, batchOp{true, "a", "tok-a"}, batchOp{true, "b", "not b's"})
		if code := replyCode(batch[0].reply.Err); code != "READONLY" {
			t.Errorf("release of a on a replica: %+v, want READONLY", batch[0].reply)
		}
		if batch[1].reply.Err != nil || batch[1].reply.Value != int64(0) {
			t.Errorf("release of b with another token on a replica: %+v, want 0", batch[1].reply)
		}
	})
}

// A combined release that the node refuses as a whole before it runs, for
// a reason one key's own release might not meet, does not fail the
// releases it carries: an ACL user who may run EVALSHA but not EVAL (the
// scripts loaded for it), or whose key pattern grants one of the keys and
// not the other. Each release goes again as it came, with its own answer,
// and the node gets no combined call afterwards.
func TestCombinedReleaseRefusedAsAWhole(t *testing.T) {
	srv := redistest.Start(t)
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	do := func(args ...any) any {
		t.Helper()
		v, err := admin.Do(args[0].(string), args[1:]...)
		if err != nil {
			t.Fatal(args, err)
		}
		return v
	}
	do("ACL", "SETUSER", "shaonly", "on", ">pw", "~*", "&*", "+@all", "-eval")
	do("ACL", "SETUSER", "part", "on", ">pw", "~ok:*", "&*", "+@all")
	do("SCRIPT", "LOAD", releaseSource)
	for _, tc := range []struct {
		user string
		keys []string
		want []string // each release's answer: "1", or an error code
	}{
		{"shaonly", []string{"ok:a", "ok:b"}, []string{"1", "1"}},
		{"part", []string{"ok:c", "no:d"}, []string{"1", "NOPERM"}},
	} {
		t.Run(tc.user, func(t *testing.T) {
			rp := redigo.NewPool(srv.Addr, redis.DialUsername(tc.user), redis.DialPassword("pw"))
			defer rp.Close()
			pool := &seenPool{Pool: rp, single: true}
			n := newNode(0, pool)
			for round := range 2 {
				var ops []batchOp
				for _, k := range tc.keys {
					do("SET", k, "tok")
					ops = append(ops, batchOp{true, k, "tok"})
				}
				batch := exchangeOps(n, ops...)
				for i, c := range batch {
					got := replyCode(c.reply.Err)
					if c.reply.Err == nil {
						got = fmt.Sprint(c.reply.Value)
					}
					if got != tc.want[i] {
						t.Errorf("round %d: release of %v: %+v, want %s", round, tc.keys[i], c.reply, tc.want[i])
					}
				}
				sent := pool.take()
				if round == 1 && len(sent) != len(tc.keys) {
					t.Errorf("round %d: sent %d commands for %d releases, want one each", round, len(sent), len(tc.keys))
				}
			}
		})
	}
}

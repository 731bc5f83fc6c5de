// Package redlocktest is the conformance kit for redlock.Pool adapters: one
// set of scenarios, run against real redis-server processes, that every
// adapter must pass to give the guarantees of the redigo path. The adapters
// in this repository (redigo, go-redis, rueidis, valkey-go) run it, and so
// can a third party's:
//
//	func TestConformance(t *testing.T) {
//		redlocktest.Run(t, redlocktest.Adapter{
//			Dial: func(t testing.TB, s redlocktest.Server) redlock.Pool {
//				client := mydriver.New(s.Addr, s.TLS, s.Username, s.Password)
//				t.Cleanup(func() { client.Close() })
//				return myadapter.NewPool(client)
//			},
//		})
//	}
//
// The kit starts local redis-server processes (Debian's redis-server, or
// the build REDLOCK_SERVER names: make servers installs Redis 8.0 and
// Valkey 8.0 and 8.1 builds; redis-cli too for the Redis Cluster
// scenarios) and skips, saying why, where
// they are missing; with REDLOCK_REQUIRE_DOCKER=1 or REDLOCK_REQUIRE_REDIS=1
// set it fails instead. Scenarios:
//
//   - Basics: Lock, Extend and Unlock leave, stretch and delete the key on
//     every node, with the token; a held key is refused, not failed.
//   - Race: 100 goroutines Lock one key; exactly one wins.
//   - Fencing: tokens of successive locks grow by one.
//   - FrozenNode: paused servers (SIGSTOP: they accept connections and never
//     answer) cost no call more than its bound, with a minority and a
//     majority of them; a Pool dialled while its server is paused works once
//     it resumes.
//   - FrozenSingleNode: the same for a Client of one node, the case in which
//     a Pool that declares driver.DeadlineHonorer is trusted to end its own
//     calls; such a Pool's Exec must also return by its deadline.
//   - ErrorReplies: NOPERM, NOAUTH, OOM, READONLY, WRONGTYPE, MOVED and LOADING
//     from real servers (LOADING from a stand-in that answers every command
//     that way) never count as agreement, and reach the caller as a
//     driver.ReplyError with the server's code; the driver sends each
//     command once (no retries behind the core's back); NOSCRIPT falls back
//     to EVAL.
//   - TLS and ACL: a TLS-only server with client certificates, and an ACL
//     user allowed only what the library sends; with each, a waiting Lock
//     is woken by release notices (a driver.Subscriber's).
//   - Names: node errors carry the node's address (driver.Namer).
//   - Subscribe: a driver.Subscriber follows its channels as they change:
//     Ready confirms the first ones and each one added, messages arrive
//     with their channel, a dropped channel delivers nothing once the
//     server took the drop, and a drop then a quick re-add is confirmed
//     again (on a standalone master, and with Adapter.DialCluster on a
//     Redis Cluster); the subscription ends with its ctx, and with an
//     error when the server stops or ends a subscription on its own (a
//     stand-in server does that).
//   - Cluster (with Adapter.DialCluster): three members, each a 3-primary
//     Redis Cluster; plain and fenced locks work, and killing a primary in
//     one member loses no lock.
//   - ClusterTLSACL (with Adapter.DialCluster): the same over members that
//     speak only TLS, their cluster bus too, and let in only ACL users; the
//     seeds carry the TLS configuration and the login of a user allowed
//     only what the library and a cluster client send. Fenced locks work,
//     and a waiting Lock is woken by release notices.
package redlocktest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
)

// A Server is a redis-server the kit started, as an adapter must dial it.
type Server struct {
	Addr               string      // host:port
	TLS                *tls.Config // nil for plain TCP; else trusts the server and presents a client certificate
	Username, Password string      // empty for the default user without a password
}

// An Adapter is what the kit needs of the adapter under test.
type Adapter struct {
	// Dial returns the adapter's Pool for the standalone master s, made the
	// way a user would make it, and registers with t.Cleanup whatever must
	// be closed. It may be called while s is paused or misconfigured, and
	// must not fail then: a driver that connects eagerly should do so in
	// the background, or report the failure from Exec.
	Dial func(t testing.TB, s Server) redlock.Pool

	// DialCluster, if set, returns the adapter's Pool for a whole Redis
	// Cluster reached through seeds, its primaries. Without it the Cluster
	// scenarios are skipped.
	DialCluster func(t testing.TB, seeds []Server) redlock.Pool
}

// nodeTimeout is the node timeout of the kit's clients: generous for a
// loaded machine running -race, small against the bounds the kit asserts.
const nodeTimeout = 250 * time.Millisecond

// Run runs every scenario as a subtest of t.
func Run(t *testing.T, a Adapter) {
	if a.Dial == nil {
		t.Fatal("redlocktest: Adapter.Dial is nil")
	}
	k := &kit{a: a}
	t.Run("Basics", k.basics)
	t.Run("Race", k.race)
	t.Run("Fencing", k.fencing)
	t.Run("FrozenNode", k.frozenNode)
	t.Run("FrozenSingleNode", k.frozenSingleNode)
	t.Run("ErrorReplies", k.errorReplies)
	t.Run("TLS", k.tls)
	t.Run("ACL", k.acl)
	t.Run("Names", k.names)
	t.Run("Subscribe", k.subscribe)
	t.Run("Cluster", k.cluster)
	t.Run("ClusterTLSACL", k.clusterSecure)
}

type kit struct{ a Adapter }

// requireRedis skips t, saying why, if redis-server is missing; with
// REDLOCK_REQUIRE_DOCKER or REDLOCK_REQUIRE_REDIS set it fails instead.
func requireRedis(t testing.TB, cluster bool) {
	t.Helper()
	if cluster {
		redistest.RequireCluster(t)
		return
	}
	redistest.Require(t)
}

// start starts n plain servers with extra arguments.
func start(t testing.TB, n int, extra ...string) []*redistest.Server {
	t.Helper()
	requireRedis(t, false)
	return redistest.StartN(t, n, extra...)
}

// startAuth starts n servers that need dial options (a password, an ACL
// user) to answer PING.
func startAuth(t testing.TB, n int, dial []redis.DialOption, extra ...string) []*redistest.Server {
	t.Helper()
	requireRedis(t, false)
	servers := make([]*redistest.Server, n)
	for i := range servers {
		servers[i] = redistest.StartWith(t, dial, extra...)
	}
	return servers
}

// client dials every server through the adapter and returns a Client over
// them.
func (k *kit) client(t testing.TB, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]redlock.Pool, len(servers))
	for i, s := range servers {
		pools[i] = k.a.Dial(t, Server{Addr: s.Addr})
	}
	return newClient(t, pools, opts...)
}

func newClient(t testing.TB, pools []redlock.Pool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	defaults := []redlock.Option{
		redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond),
	}
	c, err := redlock.New(pools, append(defaults, opts...)...)
	if err != nil {
		t.Fatalf("redlock.New: %v", err)
	}
	return c
}

// conn dials addr with redigo, the kit's own view of a node.
func conn(t testing.TB, addr string, opts ...redis.DialOption) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", addr, append([]redis.DialOption{redis.DialReadTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls cond until it holds or 5 seconds pass. Nodes a call left
// in the background answer within a node timeout; this waits for them.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func get(t testing.TB, c redis.Conn, key string) string {
	t.Helper()
	v, err := redis.String(c.Do("GET", key))
	if err != nil && !errors.Is(err, redis.ErrNil) {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func (k *kit) basics(t *testing.T) {
	servers := start(t, 3)
	c := k.client(t, servers)
	ctx := context.Background()
	conns := make([]redis.Conn, len(servers))
	for i, s := range servers {
		conns[i] = conn(t, s.Addr)
	}
	held := func(key, token string) int {
		n := 0
		for _, c := range conns {
			if get(t, c, key) == token {
				n++
			}
		}
		return n
	}

	l, err := c.Lock(ctx, "kit:basics", 2*time.Second)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	eventually(t, "every node holds the token", func() bool { return held("kit:basics", l.Value()) == 3 })
	for i, c := range conns {
		if pttl, _ := redis.Int64(c.Do("PTTL", "kit:basics")); pttl <= 0 || pttl > 2000 {
			t.Errorf("node %d: PTTL %d after Lock with ttl 2s", i, pttl)
		}
	}

	_, err = c.TryLock(ctx, "kit:basics", time.Second)
	var ne *redlock.NodeError
	if !errors.Is(err, redlock.ErrNotObtained) || errors.As(err, &ne) {
		t.Errorf("TryLock of a held key: %v, want ErrNotObtained with no node failure", err)
	}

	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	eventually(t, "Extend raised every node's ttl", func() bool {
		for _, c := range conns {
			if pttl, _ := redis.Int64(c.Do("PTTL", "kit:basics")); pttl < 10_000 {
				return false
			}
		}
		return true
	})

	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	eventually(t, "Unlock deleted the key everywhere", func() bool { return held("kit:basics", l.Value()) == 0 })
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrReleased) {
		t.Errorf("second Unlock: %v", err)
	}

	// Another holder's key is never touched.
	for _, c := range conns {
		if _, err := c.Do("SET", "kit:other", "theirs"); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.TryLock(ctx, "kit:other", time.Second)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("TryLock of another holder's key: %v", err)
	}
	if held("kit:other", "theirs") != 3 {
		t.Error("a failed TryLock changed another holder's key")
	}
	// A Lock that waits for it: once it waits for wake-ups, its attempts
	// ask each node for the holder (SET ... NX GET), whose refusal is the
	// holder's token and whose agreement is a null reply. It gets nothing,
	// no node fails, and the key stays as it was.
	waiter := k.client(t, servers, redlock.WithTries(4), redlock.WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))
	_, err = waiter.Lock(ctx, "kit:other", time.Second)
	if !errors.Is(err, redlock.ErrNotObtained) || errors.As(err, &ne) {
		t.Errorf("Lock of another holder's key, four tries: %v, want ErrNotObtained with no node failure", err)
	}
	if held("kit:other", "theirs") != 3 {
		t.Error("a failed Lock changed another holder's key")
	}
}

func (k *kit) race(t *testing.T) {
	servers := start(t, 5)
	c := k.client(t, servers, redlock.WithTries(20))
	const racers = 100
	var (
		wg              sync.WaitGroup
		winners, others atomic.Int32
		startGun        = make(chan struct{})
		lastOther       atomic.Value
	)
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGun
			_, err := c.Lock(context.Background(), "kit:race", time.Minute)
			switch {
			case err == nil:
				winners.Add(1)
			case !errors.Is(err, redlock.ErrNotObtained):
				others.Add(1)
				lastOther.Store(err)
			}
		}()
	}
	close(startGun)
	wg.Wait()
	if winners.Load() != 1 {
		t.Errorf("%d winners, want exactly 1", winners.Load())
	}
	if others.Load() != 0 {
		t.Errorf("%d errors other than ErrNotObtained; last: %v", others.Load(), lastOther.Load())
	}
}

func (k *kit) fencing(t *testing.T) {
	servers := start(t, 3)
	c := k.client(t, servers, redlock.WithFencing())
	ctx := context.Background()
	var last uint64
	for i := range 5 {
		l, err := c.Lock(ctx, "kit:fenced", time.Second)
		if err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		if l.Token() != last+1 {
			t.Errorf("lock %d: token %d after %d, want %d", i, l.Token(), last, last+1)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
	}
}

func (k *kit) frozenNode(t *testing.T) {
	servers := start(t, 5)
	c := k.client(t, servers)
	ctx := context.Background()
	// Warm every connection while all nodes answer.
	warm, err := c.Lock(ctx, "kit:frozen:warm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	pause := func(ss ...*redistest.Server) {
		for _, s := range ss {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Resume() })
		}
	}
	resume := func(ss ...*redistest.Server) {
		for _, s := range ss {
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Generous slack for a loaded machine; a call that waited for a frozen
	// node's driver would take its driver's timeout, seconds.
	const slack = 750 * time.Millisecond
	timed := func(what string, bound time.Duration, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if d := time.Since(start); d > bound+slack {
			t.Errorf("%s took %v, want at most %v (+%v slack)", what, d, bound, slack)
		}
		return err
	}

	pause(servers[0], servers[1]) // a minority
	var l *redlock.Lock
	err = timed("Lock with 2 of 5 frozen", nodeTimeout, func() (err error) {
		l, err = c.Lock(ctx, "kit:frozen", 10*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("Lock with a frozen minority: %v", err)
	}
	if err := timed("Extend with 2 of 5 frozen", nodeTimeout, func() error { return l.Extend(ctx, 10*time.Second) }); err != nil {
		t.Errorf("Extend with a frozen minority: %v", err)
	}
	if err := timed("Unlock with 2 of 5 frozen", nodeTimeout, func() error { return l.Unlock(ctx) }); err != nil {
		t.Errorf("Unlock with a frozen minority: %v", err)
	}

	pause(servers[2]) // now a majority
	err = timed("TryLock with 3 of 5 frozen", 2*nodeTimeout, func() error {
		_, err := c.TryLock(ctx, "kit:frozen:2", 10*time.Second)
		return err
	})
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("TryLock with a frozen majority: %v, want ErrNotObtained with ErrNodeTimeout", err)
	}
	// A Pool made while its server is frozen: making it must not hang, and
	// it works once the server thaws.
	late := make(chan redlock.Pool, 1)
	go func() { late <- k.a.Dial(t, Server{Addr: servers[0].Addr}) }()
	var latePool redlock.Pool
	select {
	case latePool = <-late:
	case <-time.After(10 * time.Second):
		t.Fatal("Dial of a frozen server still blocked after 10s")
	}
	resume(servers[0], servers[1], servers[2])
	lateClient := newClient(t, []redlock.Pool{latePool})
	eventually(t, "a Lock through the Pool made while its server was frozen", func() bool {
		l, err := lateClient.TryLock(ctx, "kit:frozen:late", time.Second)
		return err == nil && l.Unlock(ctx) == nil
	})

	// The nodes work again once they thaw.
	eventually(t, "a Lock after the nodes resumed", func() bool {
		l, err := c.TryLock(ctx, "kit:frozen:3", time.Second)
		if err != nil {
			return false
		}
		return l.Unlock(ctx) == nil
	})
}

// errorReplies checks that each kind of error reply fails a node, never
// counts as agreement, and keeps the server's code in the error.
func (k *kit) errorReplies(t *testing.T) {
	ctx := context.Background()
	// lockFails asserts that a one-node Lock through pool fails with code.
	lockFails := func(t *testing.T, pool redlock.Pool, key, code string) {
		t.Helper()
		c := newClient(t, []redlock.Pool{pool})
		l, err := c.TryLock(ctx, key, time.Second)
		if err == nil {
			l.Unlock(ctx)
			t.Fatalf("TryLock succeeded on a node that answers %s", code)
		}
		if !errors.Is(err, redlock.ErrNotObtained) || !hasCode(err, code) {
			t.Errorf("TryLock: %v, want ErrNotObtained with a %s driver.ReplyError", err, code)
		}
	}

	t.Run("NOPERM", func(t *testing.T) {
		s := start(t, 1, "--user", "default", "on", "nopass", "~*", "&*", "+@all",
			"--user", "noperm", "on", ">pw", "~*", "&*", "+@connection", "-set", "-eval", "-evalsha")[0]
		lockFails(t, k.a.Dial(t, Server{Addr: s.Addr, Username: "noperm", Password: "pw"}), "kit:noperm", "NOPERM")
	})
	t.Run("NOAUTH", func(t *testing.T) {
		s := startAuth(t, 1, []redis.DialOption{redis.DialPassword("secret")}, "--requirepass", "secret")[0]
		lockFails(t, k.a.Dial(t, Server{Addr: s.Addr}), "kit:noauth", "NOAUTH")
	})
	t.Run("OOM", func(t *testing.T) {
		s := start(t, 1, "--maxmemory-policy", "noeviction")[0]
		if _, err := conn(t, s.Addr).Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
			t.Fatal(err)
		}
		lockFails(t, k.a.Dial(t, Server{Addr: s.Addr}), "kit:oom", "OOM")
	})
	t.Run("READONLY", func(t *testing.T) {
		primary := start(t, 1)[0]
		replica := start(t, 1, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port))[0]
		lockFails(t, k.a.Dial(t, Server{Addr: replica.Addr}), "kit:readonly", "READONLY")
	})
	t.Run("WRONGTYPE", func(t *testing.T) {
		s := start(t, 1)[0]
		c := newClient(t, []redlock.Pool{k.a.Dial(t, Server{Addr: s.Addr})})
		l, err := c.Lock(ctx, "kit:wrongtype", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Someone replaces the key with a list: the scripts' GET fails.
		rc := conn(t, s.Addr)
		if _, err := rc.Do("DEL", "kit:wrongtype"); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Do("RPUSH", "kit:wrongtype", "x"); err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, redlock.ErrNotObtained) || !hasCode(err, "WRONGTYPE") {
			t.Errorf("Extend over a list: %v, want ErrNotObtained with a WRONGTYPE ReplyError", err)
		}
		if err := l.Unlock(ctx); err == nil || !hasCode(err, "WRONGTYPE") {
			t.Errorf("Unlock over a list: %v, want a WRONGTYPE ReplyError", err)
		}
	})
	t.Run("NOSCRIPT", func(t *testing.T) {
		servers := start(t, 3)
		c := k.client(t, servers)
		l, err := c.Lock(ctx, "kit:noscript", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range servers {
			if _, err := conn(t, s.Addr).Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Errorf("Extend after SCRIPT FLUSH: %v, want the EVAL fallback to work", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	})
	t.Run("MOVED", func(t *testing.T) {
		requireRedis(t, true)
		rc := redistest.StartRedisCluster(t, 3)
		node := rc.Primaries[0]
		key := keyElsewhere(t, rc, node)
		// A client for one cluster node that does not follow redirections.
		lockFails(t, k.a.Dial(t, Server{Addr: node.Addr}), key, "MOVED")
	})
	t.Run("LOADING", func(t *testing.T) {
		f := startLoading(t)
		lockFails(t, k.a.Dial(t, Server{Addr: f.addr()}), "kit:loading", "LOADING")
		// One TryLock sends its SET, then the release that undoes it. A
		// driver that resends commands on LOADING (or on a lost reply)
		// hides failures the core must count, and a resent SET NX whose
		// first reply was lost reads as a refusal.
		if n := f.commands(); n != 2 {
			t.Errorf("the stand-in got %d commands for one TryLock, want 2 (the SET and its release): does the driver retry?", n)
		}
	})
}

// hasCode reports whether err holds a ReplyError with code.
func hasCode(err error, code string) bool {
	var rerr driver.ReplyError
	return errors.As(err, &rerr) && rerr.Code() == code
}

// keyElsewhere returns a key that node does not serve.
func keyElsewhere(t testing.TB, rc *redistest.RedisCluster, node *redistest.Server) string {
	t.Helper()
	for i := range 1000 {
		key := fmt.Sprintf("kit:moved:%d", i)
		if rc.Owner(t, key) != node {
			return key
		}
	}
	t.Fatal("no key outside the node's slots")
	return ""
}

func (k *kit) tls(t *testing.T) {
	requireRedis(t, false)
	files := redistest.GenerateTLS(t)
	servers := []*redistest.Server{redistest.StartTLS(t, files), redistest.StartTLS(t, files), redistest.StartTLS(t, files)}
	pools := make([]redlock.Pool, len(servers))
	for i, s := range servers {
		pools[i] = k.a.Dial(t, Server{Addr: s.Addr, TLS: files.Client})
	}
	c := newClient(t, pools, redlock.WithFencing())
	l, err := c.Lock(context.Background(), "kit:tls", 10*time.Second)
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if err := l.Extend(context.Background(), 10*time.Second); err != nil {
		t.Errorf("Extend over TLS: %v", err)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Errorf("Unlock over TLS: %v", err)
	}

	// Release notices reach a waiter over TLS too.
	rcs := make([]redis.Conn, len(servers))
	for i, s := range servers {
		rcs[i] = conn(t, s.Addr, redis.DialUseTLS(true), redis.DialTLSConfig(files.Client))
	}
	wakes(t, pools, "kit:tls:wake", rcs)

	// Without TLS the same servers answer nothing useful.
	plain := newClient(t, []redlock.Pool{k.a.Dial(t, Server{Addr: servers[0].Addr})})
	if _, err := plain.TryLock(context.Background(), "kit:tls:plain", time.Second); err == nil {
		t.Error("a plain-text client locked on a TLS-only server")
	}
}

// aclRules allow only what the library sends, plus the connection commands
// drivers send when they connect (HELLO, CLIENT, AUTH...), and only the
// release channels, "redlock:released:" and the key after it (the
// subscriptions' anchor is the prefix alone, which the pattern matches).
var aclRules = []string{"~*", "&redlock:released:*", "+@connection", "+set", "+get", "+del", "+pexpire", "+eval", "+evalsha", "+publish", "+subscribe", "+unsubscribe"}

func (k *kit) acl(t *testing.T) {
	args := append([]string{"--user", "default", "off", "--user", "locker", "on", ">lockpw"}, aclRules...)
	servers := startAuth(t, 3, []redis.DialOption{redis.DialUsername("locker"), redis.DialPassword("lockpw")}, args...)
	pools := make([]redlock.Pool, len(servers))
	for i, s := range servers {
		pools[i] = k.a.Dial(t, Server{Addr: s.Addr, Username: "locker", Password: "lockpw"})
	}
	c := newClient(t, pools, redlock.WithFencing())
	ctx := context.Background()
	l, err := c.Lock(ctx, "kit:acl", 10*time.Second)
	if err != nil {
		t.Fatalf("Lock as an ACL user: %v", err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("Extend as an ACL user: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock as an ACL user: %v", err)
	}

	// Release notices reach a waiter that is an ACL user too.
	rcs := make([]redis.Conn, len(servers))
	for i, s := range servers {
		rcs[i] = conn(t, s.Addr, redis.DialUsername("locker"), redis.DialPassword("lockpw"))
	}
	wakes(t, pools, "kit:acl:wake", rcs)

	wrong := newClient(t, []redlock.Pool{k.a.Dial(t, Server{Addr: servers[0].Addr, Username: "locker", Password: "wrong"})})
	if _, err := wrong.TryLock(ctx, "kit:acl:wrong", time.Second); err == nil {
		t.Error("a wrong password locked")
	}
}

// wakes checks that a Lock waiting on key through pools is woken by release
// notices, through the adapter's driver.Subscriber, and not by its next
// timed attempt, a minute away. rcs reach the same nodes, as pools do (over
// TLS, as an ACL user): they hold the key for someone else until the
// waiter's first attempt has failed, then free it, and announce its release
// on every node, again every 50 ms (a notice sent before the waiter's
// subscription opened is lost, as a hint may be), until the waiter has it.
// A Pool that is no Subscriber is not woken, and is not checked.
func wakes(t *testing.T, pools []redlock.Pool, key string, rcs []redis.Conn) {
	t.Helper()
	if _, ok := pools[0].(driver.Subscriber); !ok {
		t.Logf("%T is no driver.Subscriber: waiters are not woken on release", pools[0])
		return
	}
	for _, rc := range rcs {
		if _, err := rc.Do("SET", key, "someone else", "PX", 60000); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	waiting := make(chan struct{}, 1)
	var woken atomic.Bool
	obs := observerFunc(func(e observe.Event) {
		switch e.Kind {
		case observe.KindRetry:
			select {
			case waiting <- struct{}{}:
			default:
			}
		case observe.KindAcquired:
			woken.Store(e.Woken)
		}
	})
	waiter := newClient(t, pools, redlock.WithRetryStrategy(redlock.ConstantRetry(time.Minute)), redlock.WithObserver(obs))
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, 10*time.Second)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	select {
	case <-waiting:
	case err := <-got:
		t.Fatalf("the waiter's Lock returned %v before it waited", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter's first attempt did not fail")
	}
	for _, rc := range rcs {
		if _, err := rc.Do("DEL", key); err != nil {
			t.Fatalf("DEL %s: %v", key, err)
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(10 * time.Second); ; {
		for _, rc := range rcs {
			// The key's release channel, for a Client without WithKeyPrefix.
			if _, err := rc.Do("PUBLISH", "redlock:released:"+key, key); err != nil {
				t.Fatalf("PUBLISH: %v", err)
			}
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("the waiter: %v", err)
			}
			if !woken.Load() {
				t.Error("the waiter's winning attempt was not a woken one")
			}
			return
		case <-deadline:
			t.Fatal("the waiter was not woken within 10s of the key's release (its timed attempt is a minute away)")
		case <-tick.C:
		}
	}
}

// observerFunc is an observe.Observer.
type observerFunc func(observe.Event)

func (f observerFunc) Observe(_ context.Context, e observe.Event) { f(e) }

func (k *kit) names(t *testing.T) {
	s := start(t, 1)[0]
	pool := k.a.Dial(t, Server{Addr: s.Addr})
	namer, ok := pool.(driver.Namer)
	if !ok {
		t.Skipf("%T does not implement driver.Namer: node errors will show indexes only", pool)
	}
	if namer.Name() != s.Addr {
		t.Errorf("Name() = %q, want %q", namer.Name(), s.Addr)
	}
	s.Stop()
	c := newClient(t, []redlock.Pool{pool})
	_, err := c.TryLock(context.Background(), "kit:names", time.Second)
	var ne *redlock.NodeError
	if !errors.As(err, &ne) || ne.Addr != s.Addr || !strings.Contains(err.Error(), s.Addr) {
		t.Errorf("TryLock on a stopped node: %v, want a NodeError naming %s", err, s.Addr)
	}
}

// subscribe checks a driver.Subscriber against what the core needs of it:
// a subscription whose channels change while it runs, each confirmation
// reported by Ready, each message by Deliver with its channel, and an end
// that the caller hears of.
func (k *kit) subscribe(t *testing.T) {
	t.Run("Channels", func(t *testing.T) {
		s := start(t, 1)[0]
		sub := subscriber(t, k.a.Dial(t, Server{Addr: s.Addr}))
		subscribeChannels(t, sub, []redis.Conn{conn(t, s.Addr)})
	})
	t.Run("ClusterChannels", func(t *testing.T) {
		if k.a.DialCluster == nil {
			t.Skip("Adapter.DialCluster is not set: the adapter does not support Redis Cluster members")
		}
		requireRedis(t, true)
		rc := redistest.StartRedisCluster(t, 3)
		var seeds []Server
		var nodes []redis.Conn
		for _, addr := range rc.Addrs() {
			seeds = append(seeds, Server{Addr: addr})
			nodes = append(nodes, conn(t, addr))
		}
		subscribeChannels(t, subscriber(t, k.a.DialCluster(t, seeds)), nodes)
	})
	t.Run("ServerStops", k.subscribeServerStops)
	t.Run("ServerUnsubscribes", k.subscribeServerUnsubscribes)
}

// subscriber returns pool as a driver.Subscriber, or skips t if it is none.
func subscriber(t *testing.T, pool redlock.Pool) driver.Subscriber {
	t.Helper()
	sub, ok := pool.(driver.Subscriber)
	if !ok {
		t.Skipf("%T does not implement driver.Subscriber: waiters cannot be woken on release", pool)
	}
	return sub
}

// subscribeChannels: the anchor channel and channels added while the
// subscription runs are confirmed by Ready and deliver their messages; a
// dropped channel delivers nothing once the server has taken the drop; a
// drop and a quick re-add keep the subscription running and confirm the
// channel again; the subscription ends with its ctx. nodes reach every
// server that sub's connection may be on (the nodes of a Redis Cluster,
// which forwards each PUBLISH to all of them); the kit publishes through
// the first.
func subscribeChannels(t *testing.T, sub driver.Subscriber, nodes []redis.Conn) {
	publish := func(channel, payload string) {
		t.Helper()
		if _, err := nodes[0].Do("PUBLISH", channel, payload); err != nil {
			t.Fatalf("PUBLISH %s: %v", channel, err)
		}
	}
	// subscribers counts the connections subscribed to channel on every node.
	subscribers := func(channel string) int64 {
		var sum int64
		for _, n := range nodes {
			v, err := redis.Values(n.Do("PUBSUB", "NUMSUB", channel))
			if err != nil || len(v) != 2 {
				t.Fatalf("PUBSUB NUMSUB %s: %v %v", channel, v, err)
			}
			sum += v[1].(int64)
		}
		return sum
	}
	const anchor, a, b, c = "kit:anchor", "kit:a", "kit:b", "kit:c"

	p := newProbe(anchor)
	defer p.check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := p.run(ctx, sub)
	p.expectReady(t, done, anchor)
	publish(anchor, "one")
	p.expectMessage(t, done, anchor, "one")

	// Added while running: confirmed, then delivered, with its channel.
	p.set(anchor, a)
	p.expectReady(t, done, a)
	publish(a, "two")
	p.expectMessage(t, done, a, "two")

	// Two added in one change: each confirmed on its own.
	p.set(anchor, a, b, c)
	p.expectReady(t, done, b, c)

	// Dropped: once the server has taken the drop, a message on the
	// channel is not delivered, and one on a channel still wanted is.
	p.set(anchor, b, c)
	eventually(t, "the server unsubscribed the connection from "+a, func() bool { return subscribers(a) == 0 })
	publish(a, "dropped")
	publish(b, "three")
	p.expectMessage(t, done, b, "three")

	// Dropped and added again the moment the Subscriber has read the drop:
	// its UNSUBSCRIBE's confirmation comes after the re-add, and must not
	// end the subscription; the new SUBSCRIBE is confirmed again.
	p.setThen([]string{anchor, c}, []string{anchor, b, c})
	p.expectReady(t, done, b)
	publish(b, "four")
	p.expectMessage(t, done, b, "four")
	publish(anchor, "five")
	p.expectMessage(t, done, anchor, "five")

	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Subscribe after its ctx ended: %v, want nil or context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running 5s after its context ended")
	}
	time.Sleep(50 * time.Millisecond) // a late Ready or Deliver would show in check
}

// subscribeServerStops: a subscription to a server that goes away ends
// with an error.
func (k *kit) subscribeServerStops(t *testing.T) {
	s := start(t, 1)[0]
	sub := subscriber(t, k.a.Dial(t, Server{Addr: s.Addr}))
	p := newProbe("kit:anchor", "kit:a")
	defer p.check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := p.run(ctx, sub)
	p.expectReady(t, done, "kit:anchor", "kit:a")
	s.Stop()
	expectFailed(t, done, 10*time.Second, "its server stopped")
}

// subscribeServerUnsubscribes: an "unsubscribe" that the server sends on
// its own, for a channel still wanted, ends the subscription with an error:
// the channel's messages no longer arrive. A stand-in server sends it
// (pubsubServer).
func (k *kit) subscribeServerUnsubscribes(t *testing.T) {
	f := startPubsub(t)
	sub := subscriber(t, k.a.Dial(t, Server{Addr: f.addr()}))
	p := newProbe("kit:anchor", "kit:a")
	defer p.check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := p.run(ctx, sub)
	p.expectReady(t, done, "kit:anchor", "kit:a")
	f.publish("kit:a", "one")
	p.expectMessage(t, done, "kit:a", "one")

	// A channel the Subscriber drops itself does not end it.
	p.set("kit:anchor")
	eventually(t, "the stand-in unsubscribed the connection from kit:a", func() bool { return !f.subscribed("kit:a") })
	f.publish("kit:anchor", "two")
	p.expectMessage(t, done, "kit:anchor", "two")

	f.kick("kit:anchor")
	expectFailed(t, done, 5*time.Second, "the server ended its subscription on its own")
}

// A probe is the core's side of a driver.Subscription, as the kit plays
// it: it sets the channels wanted and signals each change, and records
// what the Subscriber reports, checking that Ready and Deliver never
// overlap and never come after Subscribe returned.
type probe struct {
	sub     driver.Subscription
	changed chan struct{} // sub.Changed
	events  chan probeEvent

	mu      sync.Mutex
	want    []string
	then    []string // if set, the channels wanted once Channels was read
	faults  []string // broken rules, reported by check
	calls   atomic.Int32
	stopped atomic.Bool // Subscribe returned
}

// A probeEvent is one call of Ready (ready set, no payload) or Deliver.
type probeEvent struct {
	ready            bool
	channel, payload string
}

func (e probeEvent) String() string {
	if e.ready {
		return fmt.Sprintf("Ready(%q)", e.channel)
	}
	return fmt.Sprintf("Deliver(%q, %q)", e.channel, e.payload)
}

func newProbe(channels ...string) *probe {
	p := &probe{events: make(chan probeEvent, 256), changed: make(chan struct{}, 1), want: channels}
	p.sub = driver.Subscription{
		Channels: func() []string {
			p.mu.Lock()
			defer p.mu.Unlock()
			now := slices.Clone(p.want)
			if p.then != nil {
				p.want, p.then = p.then, nil
				p.signal()
			}
			return now
		},
		Changed: p.changed,
		Ready:   func(channel string) { p.record(probeEvent{ready: true, channel: channel}) },
		Deliver: func(channel, payload string) { p.record(probeEvent{channel: channel, payload: payload}) },
	}
	return p
}

// record checks the rules for a Ready or Deliver call and queues e.
func (p *probe) record(e probeEvent) {
	if p.calls.Add(1) != 1 {
		p.fault(e.String() + " ran while another Ready or Deliver ran")
	}
	defer p.calls.Add(-1)
	if p.stopped.Load() {
		p.fault(e.String() + " came after Subscribe returned")
	}
	select {
	case p.events <- e:
	default:
		p.fault(e.String() + ": too many events unread")
	}
}

func (p *probe) fault(msg string) {
	p.mu.Lock()
	p.faults = append(p.faults, msg)
	p.mu.Unlock()
}

// check reports the rules broken so far.
func (p *probe) check(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		t.Error(f)
	}
}

// run starts Subscribe on a goroutine and returns its result.
func (p *probe) run(ctx context.Context, s driver.Subscriber) <-chan error {
	done := make(chan error, 1)
	go func() {
		err := s.Subscribe(ctx, &p.sub)
		p.stopped.Store(true)
		done <- err
	}()
	return done
}

// set makes channels the ones wanted, and signals the change.
func (p *probe) set(channels ...string) {
	p.mu.Lock()
	p.want = channels
	p.mu.Unlock()
	p.signal()
}

// signal tells the Subscriber that the channels changed.
func (p *probe) signal() {
	select {
	case p.changed <- struct{}{}:
	default: // a change already pending covers this one
	}
}

// setThen makes channels the ones wanted, and then, as soon as the
// Subscriber has read them, makes next the ones wanted.
func (p *probe) setThen(channels, next []string) {
	p.mu.Lock()
	p.then = next
	p.mu.Unlock()
	p.set(channels...)
}

// expectFailed waits up to within for Subscribe to return, after what
// happened, and fails t unless it returns an error.
func expectFailed(t *testing.T, done <-chan error, within time.Duration, after string) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("Subscribe returned nil after %s", after)
		}
	case <-time.After(within):
		t.Fatalf("Subscribe still running %v after %s", within, after)
	}
}

// next returns the next event, failing t if none comes within 5 seconds or
// Subscribe returns first.
func (p *probe) next(t *testing.T, done <-chan error, want string) probeEvent {
	t.Helper()
	select {
	case e := <-p.events:
		return e
	case err := <-done:
		t.Fatalf("Subscribe returned %v while waiting for %s", err, want)
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s after 5s", want)
	}
	panic("unreachable")
}

// expectReady waits for Ready with each of channels, in any order, and
// fails t on any other event.
func (p *probe) expectReady(t *testing.T, done <-chan error, channels ...string) {
	t.Helper()
	left := slices.Clone(channels)
	for len(left) > 0 {
		want := fmt.Sprintf("Ready for %q", left)
		e := p.next(t, done, want)
		i := slices.Index(left, e.channel)
		if !e.ready || i < 0 {
			t.Fatalf("got %v, want %s", e, want)
		}
		left = slices.Delete(left, i, i+1)
	}
}

// expectMessage waits for the next event, which must be the delivery of
// payload on channel.
func (p *probe) expectMessage(t *testing.T, done <-chan error, channel, payload string) {
	t.Helper()
	want := probeEvent{channel: channel, payload: payload}
	if e := p.next(t, done, want.String()); e != want {
		t.Fatalf("got %v, want %v", e, want)
	}
}

func (k *kit) cluster(t *testing.T) {
	if k.a.DialCluster == nil {
		t.Skip("Adapter.DialCluster is not set: the adapter does not support Redis Cluster members")
	}
	requireRedis(t, true)
	members := make([]*redistest.RedisCluster, 3)
	pools := make([]redlock.Pool, 3)
	for i := range members {
		members[i] = redistest.StartRedisCluster(t, 3)
		var seeds []Server
		for _, addr := range members[i].Addrs() {
			seeds = append(seeds, Server{Addr: addr})
		}
		pools[i] = k.a.DialCluster(t, seeds)
	}
	ctx := context.Background()

	for _, fenced := range []bool{false, true} {
		var opts []redlock.Option
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		c := newClient(t, pools, opts...)
		for _, key := range []string{"kit:cluster", "kit:{tagged}:cluster"} {
			l, err := c.Lock(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatalf("Lock %q (fencing %v) on cluster members: %v", key, fenced, err)
			}
			if fenced && l.Token() == 0 {
				t.Errorf("Lock %q: no fencing token", key)
			}
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Errorf("Extend %q (fencing %v): %v", key, fenced, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock %q (fencing %v): %v", key, fenced, err)
			}
		}
	}

	// A primary of one member dies: that member fails, the other two hold.
	c := newClient(t, pools, redlock.WithFencing())
	l, err := c.Lock(ctx, "kit:cluster:kill", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	members[0].Owner(t, "kit:cluster:kill").Stop()
	if _, err := c.TryLock(ctx, "kit:cluster:kill", time.Second); !errors.Is(err, redlock.ErrNotObtained) {
		t.Errorf("TryLock by another holder after a primary died: %v, want ErrNotObtained", err)
	}
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Errorf("Extend on the two surviving members: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock on the two surviving members: %v", err)
	}
}

// clusterRules add to aclRules what a cluster client sends to learn the
// slots' owners: CLUSTER SLOTS (go-redis; rueidis and valkey-go before
// Redis 8), or CLUSTER SHARDS (rueidis and valkey-go from 8 on).
var clusterRules = []string{"+cluster|slots", "+cluster|shards"}

// clusterSecure: Cluster members that speak only TLS (their bus too) and
// let in only ACL users, as a production cluster may. The adapter's Pool for
// each, made by DialCluster with seeds that carry the TLS configuration and
// the login of a user allowed only what the library sends, locks, fences,
// extends, releases, and wakes a waiter.
func (k *kit) clusterSecure(t *testing.T) {
	if k.a.DialCluster == nil {
		t.Skip("Adapter.DialCluster is not set: the adapter does not support Redis Cluster members")
	}
	requireRedis(t, true)
	files := redistest.GenerateTLS(t)
	users := append([]string{"--user", "default", "off",
		"--user", "admin", "on", ">adminpw", "~*", "&*", "+@all",
		"--user", "locker", "on", ">lockpw"}, append(aclRules, clusterRules...)...)
	sec := redistest.Secure{TLS: files, Args: users, Admin: "admin", AdminPassword: "adminpw"}
	members := make([]*redistest.RedisCluster, 3)
	pools := make([]redlock.Pool, len(members))
	for i := range members {
		members[i] = redistest.StartRedisClusterSecure(t, 3, sec)
		var seeds []Server
		for _, addr := range members[i].Addrs() {
			seeds = append(seeds, Server{Addr: addr, TLS: files.Client, Username: "locker", Password: "lockpw"})
		}
		pools[i] = k.a.DialCluster(t, seeds)
	}
	c := newClient(t, pools, redlock.WithFencing())
	ctx := context.Background()
	for _, key := range []string{"kit:cluster:secure", "kit:{tagged}:secure"} {
		l, err := c.Lock(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatalf("Lock %q on cluster members over TLS, as an ACL user: %v", key, err)
		}
		if l.Token() == 0 {
			t.Errorf("Lock %q: no fencing token", key)
		}
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Errorf("Extend %q: %v", key, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock %q: %v", key, err)
		}
	}

	// Release notices reach a waiter too: rcs reach the key's owner in
	// each member (a PUBLISH on one node reaches its cluster's subscribers).
	const key = "kit:cluster:secure:wake"
	rcs := make([]redis.Conn, len(members))
	for i, m := range members {
		rcs[i] = conn(t, m.Owner(t, key).Addr, append(files.DialTLS(), redis.DialUsername("locker"), redis.DialPassword("lockpw"))...)
	}
	wakes(t, pools, key, rcs)
}

// frozenSingleNode: a Client of one frozen node fails within its bounds. A
// Pool that declares driver.DeadlineHonorer runs such a Client's rounds on
// the caller's goroutine, with no timer of the core's to end them, so this
// is where its promise shows; its Exec is also checked directly.
func (k *kit) frozenSingleNode(t *testing.T) {
	servers := start(t, 1)
	pool := k.a.Dial(t, Server{Addr: servers[0].Addr})
	c := newClient(t, []redlock.Pool{pool})
	ctx := context.Background()
	l, err := c.Lock(ctx, "kit:frozen1", 10*time.Second) // warms a connection
	if err != nil {
		t.Fatal(err)
	}
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers[0].Resume() })

	const slack = 750 * time.Millisecond // a loaded machine under -race
	timed := func(what string, bound time.Duration, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if d := time.Since(start); d > bound+slack {
			t.Errorf("%s took %v, want at most %v (+%v slack)", what, d, bound, slack)
		}
		return err
	}
	if h, ok := pool.(driver.DeadlineHonorer); ok && h.HonorsDeadline() {
		err := timed("Exec on a frozen server", nodeTimeout, func() error {
			ctx, cancel := context.WithTimeout(ctx, nodeTimeout)
			defer cancel()
			return pool.Exec(ctx, []driver.Command{{Name: "PING"}}, make([]driver.Reply, 1))
		})
		if err == nil {
			t.Error("Exec on a frozen server succeeded")
		}
	}
	// The SET times out, and so does its undo: two node timeouts.
	err = timed("TryLock on a frozen node", 2*nodeTimeout, func() error {
		_, err := c.TryLock(ctx, "kit:frozen1:2", 10*time.Second)
		return err
	})
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("TryLock on a frozen node: %v, want ErrNotObtained with ErrNodeTimeout", err)
	}
	if err := timed("Unlock on a frozen node", nodeTimeout, func() error { return l.Unlock(ctx) }); !errors.Is(err, redlock.ErrNodeTimeout) {
		t.Errorf("Unlock on a frozen node: %v, want ErrNodeTimeout", err)
	}
}

package redlock_test

// Integration tests: every core behaviour again, on real Redis 7 servers
// (local redis-server processes, see internal/redistest), plus TLS, ACL users
// and the failures a misconfigured client must see.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// realNodes starts n local servers and returns their addresses.
func realNodes(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for _, s := range redistest.StartN(t, n) {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// realPTTL returns key's remaining ttl on the node behind conn.
func realPTTL(t *testing.T, conn redis.Conn, key string) time.Duration {
	t.Helper()
	ms, err := redis.Int64(conn.Do("PTTL", key))
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return time.Duration(ms) * time.Millisecond
}

func TestRealAcquireAndRefuse(t *testing.T) {
	addrs := realNodes(t, 5)
	a, b := realClient(t, addrs), realClient(t, addrs, redlock.WithTries(1))
	ctx := context.Background()
	const key, ttl = "real:acquire", 10 * time.Second

	start := time.Now()
	l, err := a.Lock(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if u := l.Until(); u.After(start.Add(ttl)) || u.Before(time.Now().Add(ttl/2)) {
		t.Errorf("Until is %v after the start, want a little under %v", u.Sub(start), ttl)
	}
	for i, addr := range addrs {
		conn := realConn(t, addr)
		// Lock returns on a majority; the rest may still be in flight.
		if !realEventually(2*time.Second, func() bool { return realGet(t, conn, key) == l.Value() }) {
			t.Errorf("node %d does not hold the token", i)
		}
		if d := realPTTL(t, conn, key); d <= 0 || d > ttl {
			t.Errorf("node %d: PTTL %v, want in (0, %v]", i, d, ttl)
		}
	}

	_, err = b.TryLock(ctx, key, ttl)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("second client: %v, want ErrNotObtained", err)
	}
	if len(realNodeErrors(err)) != 0 {
		t.Errorf("a refusal is not a node failure: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx, key, ttl)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	_ = l2.Unlock(ctx)
}

// Step 4: a lost attempt releases the nodes it won.
func TestRealLostAttemptReleases(t *testing.T) {
	addrs := realNodes(t, 5)
	c := realClient(t, addrs, redlock.WithTries(1))
	const key = "real:partial"
	for _, addr := range addrs[:3] {
		if _, err := realConn(t, addr).Do("SET", key, "someone-else", "PX", 10000); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.TryLock(context.Background(), key, 10*time.Second)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("TryLock = %v, want ErrNotObtained", err)
	}
	for i, addr := range addrs {
		want := map[bool]string{true: "someone-else", false: ""}[i < 3]
		if v := realGet(t, realConn(t, addr), key); v != want {
			t.Errorf("node %d holds %q after the lost attempt, want %q", i, v, want)
		}
	}
}

func TestRealExtend(t *testing.T) {
	addrs := realNodes(t, 5)
	c := realClient(t, addrs)
	ctx := context.Background()
	const key = "real:extend"
	l, err := c.Lock(ctx, key, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Lock returns on a majority. Let the other SETs land first: an Extend
	// that overtakes a SET still in flight on another connection finds no
	// key there, and the SET then sets the old ttl.
	realAwaitToken(t, addrs, key, l.Value())
	before := l.Until()
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !l.Until().After(before.Add(20 * time.Second)) {
		t.Errorf("Until moved from %v to %v, want about 28s later", stamp(before), stamp(l.Until()))
	}
	for i, addr := range addrs {
		conn := realConn(t, addr)
		if !realEventually(2*time.Second, func() bool { return realPTTL(t, conn, key) > 20*time.Second }) {
			t.Errorf("node %d: PTTL %v after Extend(30s)", i, realPTTL(t, conn, key))
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A released lock cannot be extended, and the key stays free.
	if err := l.Extend(ctx, 30*time.Second); !errors.Is(err, redlock.ErrReleased) {
		t.Errorf("Extend after Unlock = %v, want ErrReleased", err)
	}
	for i, addr := range addrs {
		// Unlock returns on a majority; the rest follow within a node timeout.
		conn := realConn(t, addr)
		if !realEventually(2*time.Second, func() bool { return realGet(t, conn, key) == "" }) {
			t.Errorf("node %d: key is %q after Unlock and Extend", i, realGet(t, conn, key))
		}
	}
}

// Unlock and Extend touch a key only where it still holds the lock's token.
func TestRealOnlyOwnToken(t *testing.T) {
	addrs := realNodes(t, 5)
	c := realClient(t, addrs)
	ctx := context.Background()
	const key = "real:own"
	l, err := c.Lock(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	realAwaitToken(t, addrs, key, l.Value())
	// Another holder on nodes 3 and 4, with a short ttl.
	for _, addr := range addrs[3:] {
		if _, err := realConn(t, addr).Do("SET", key, "intruder", "PX", 5000); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, 60*time.Second); err != nil {
		t.Fatalf("Extend with 3 of 5: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for i, addr := range addrs {
		conn := realConn(t, addr)
		want := map[bool]string{true: "intruder", false: ""}[i >= 3]
		// Unlock returns on a majority; the rest follow within a node timeout.
		if !realEventually(2*time.Second, func() bool { return realGet(t, conn, key) == want }) {
			t.Errorf("node %d holds %q, want %q", i, realGet(t, conn, key), want)
		}
		if want != "" {
			if d := realPTTL(t, conn, key); d > 5*time.Second {
				t.Errorf("node %d: Extend changed another holder's ttl to %v", i, d)
			}
		}
	}
}

func TestRealExpiry(t *testing.T) {
	addrs := realNodes(t, 5)
	a, b := realClient(t, addrs), realClient(t, addrs, redlock.WithTries(1))
	ctx := context.Background()
	const key = "real:expiry"
	l, err := a.Lock(ctx, key, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the validity to run out: the instant is known, not guessed.
	time.Sleep(time.Until(l.Until()))
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrExpired) {
		t.Errorf("Extend after expiry = %v, want ErrExpired", err)
	}
	// The keys outlive the validity by the drift allowance at most.
	var l2 *redlock.Lock
	if !realEventually(2*time.Second, func() bool { l2, err = b.TryLock(ctx, key, 10*time.Second); return err == nil }) {
		t.Fatalf("key never freed after its ttl: %v", err)
	}
	// The new holder has a majority; a node where the old key outlived the
	// others by a millisecond refused it. Note where it holds the key.
	conns := make([]redis.Conn, len(addrs))
	holds := func() (n int) {
		for i, addr := range addrs {
			if conns[i] == nil {
				conns[i] = realConn(t, addr)
			}
			if realGet(t, conns[i], key) == l2.Value() {
				n++
			}
		}
		return n
	}
	realEventually(time.Second, func() bool { return holds() == len(addrs) })
	var held []int
	for i := range addrs {
		if realGet(t, conns[i], key) == l2.Value() {
			held = append(held, i)
		}
	}
	if len(held) < 3 {
		t.Fatalf("new holder has the key on nodes %v only", held)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrExpired) {
		t.Errorf("Unlock after expiry = %v, want ErrExpired", err)
	}
	for _, i := range held {
		if v := realGet(t, conns[i], key); v != l2.Value() {
			t.Errorf("node %d: the expired lock's Unlock touched the new holder's key: %q", i, v)
		}
	}
	_ = l2.Unlock(ctx)
}

// Extend and Unlock fall back from EVALSHA to EVAL after SCRIPT FLUSH.
func TestRealScriptFlush(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs)
	ctx := context.Background()
	l, err := c.Lock(ctx, "real:flush", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, addr := range addrs {
			if _, err := realConn(t, addr).Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
	}
}

// Lock gives up when ctx ends and says so.
func TestRealContextDeadline(t *testing.T) {
	addrs := realNodes(t, 3)
	c := realClient(t, addrs)
	l, err := c.Lock(context.Background(), "real:ctx", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	d := realTimed(func() { _, err = c.Lock(ctx, "real:ctx", 10*time.Second) })
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock = %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d > 300*time.Millisecond+chaosSlack {
		t.Errorf("Lock took %v with a 300ms deadline", d)
	}
}

// Eight clients contend for one key on real servers; the chaos checker finds
// no two holders at once.
func TestRealContention(t *testing.T) {
	addrs := realNodes(t, 5)
	const nodeTimeout, tries, retryMax = 100 * time.Millisecond, 3, 10 * time.Millisecond
	ld := &chaosLoad{
		client: realClient(t, addrs, redlock.WithNodeTimeout(nodeTimeout), redlock.WithTries(tries),
			redlock.WithRetryDelay(time.Millisecond, retryMax)),
		key:        "real:contention",
		ttl:        time.Second,
		lockBudget: chaosLockBudget(tries, false, nodeTimeout, retryMax),
		callBudget: nodeTimeout + chaosSlack,
		check:      newChaosChecker(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := ld.start(ctx, 8, 7)
	defer wait()
	if !ld.waitCycles(ctx, 400, time.Minute) {
		t.Errorf("only %d cycles in a minute", ld.cycles.Load())
	}
	cancel()
	wait()
	ld.verdict(t)
}

// TLS with client certificates, made at test time.
func TestRealTLS(t *testing.T) {
	f := redistest.GenerateTLS(t)
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartTLS(t, f).Addr)
	}
	c, err := redlock.New(realPools(t, addrs, f.DialTLS()...), realNodeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	l, err := c.Lock(ctx, "real:tls", 10*time.Second)
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("Extend over TLS: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock over TLS: %v", err)
	}

	// A plain-text client against the TLS-only nodes fails on every node.
	plain, err := redlock.New(realPools(t, addrs), redlock.WithTries(1), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	_, err = plain.Lock(ctx, "real:tls", 10*time.Second)
	t.Logf("plain text against TLS: %v", err)
	realExpectEveryNode(t, err, len(addrs), "")
}

// An ACL user allowed only the commands the library sends is enough; without
// any one of them some operation fails, with Redis's reason.
func TestRealACL(t *testing.T) {
	const pass = "lock-pass"
	needed := []string{"set", "eval", "evalsha", "pexpire", "get", "del", "ping"}
	start := func(t *testing.T, cmds []string) []string {
		rules := []string{"locker", "on", ">" + pass, "~*", "-@all"}
		for _, c := range cmds {
			rules = append(rules, "+"+c)
		}
		var addrs []string
		for range 3 {
			s := redistest.StartWith(t, []redis.DialOption{redis.DialUsername("locker"), redis.DialPassword(pass)},
				append([]string{"--user", "default", "off", "--user"}, rules...)...)
			addrs = append(addrs, s.Addr)
		}
		return addrs
	}
	cycle := func(c *redlock.Client) error {
		ctx := context.Background()
		l, err := c.Lock(ctx, "real:acl", 10*time.Second)
		if err != nil {
			return fmt.Errorf("Lock: %w", err)
		}
		// Twice, so that both EVAL (script not cached) and EVALSHA run.
		for range 2 {
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				return fmt.Errorf("Extend: %w", err)
			}
		}
		if err := l.Unlock(ctx); err != nil {
			return fmt.Errorf("Unlock: %w", err)
		}
		return nil
	}
	auth := []redis.DialOption{redis.DialUsername("locker"), redis.DialPassword(pass)}

	t.Run("enough", func(t *testing.T) {
		addrs := start(t, needed)
		c, err := redlock.New(realPools(t, addrs, auth...), realNodeTimeout, redlock.WithTries(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := cycle(c); err != nil {
			t.Fatal(err)
		}
		// The default user is off: without the ACL user nothing works.
		anon, err := redlock.New(realPools(t, addrs), realNodeTimeout, redlock.WithTries(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = anon.Close() })
		_, err = anon.Lock(context.Background(), "real:acl", time.Second)
		realExpectEveryNode(t, err, len(addrs), "NOAUTH")
	})
	// PING is needed only to test connections idle for 30 seconds; the other
	// commands are needed at once.
	for _, drop := range needed[:len(needed)-1] {
		t.Run("without "+drop, func(t *testing.T) {
			var cmds []string
			for _, c := range needed {
				if c != drop {
					cmds = append(cmds, c)
				}
			}
			c, err := redlock.New(realPools(t, start(t, cmds), auth...), realNodeTimeout, redlock.WithTries(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			// Redis 7.0 reports a command a script may not run without
			// naming it.
			want := "NOPERM this user has no permissions to run the '" + drop + "' command"
			if drop == "get" || drop == "pexpire" || drop == "del" {
				want = "The user executing the script can't run this command"
			}
			err = cycle(c)
			if err == nil || len(realNodeErrors(err)) == 0 || !strings.Contains(err.Error(), want) {
				t.Errorf("without +%s: %v, want node failures with %q", drop, err, want)
			}
		})
	}
}

// An error reply is a failure, never an agreement. Here every node refuses
// an unauthenticated SET with NOAUTH; the same holds for NOPERM, OOM,
// READONLY, or LOADING from a durable node reloading its data after a
// restart. Counting such a reply as a yes would grant a lock that no node
// holds.
func TestRealErrorReplyIsNotAgreement(t *testing.T) {
	var addrs []string
	for range 3 {
		s := redistest.StartWith(t, []redis.DialOption{redis.DialPassword("secret")}, "--requirepass", "secret")
		addrs = append(addrs, s.Addr)
	}
	c := realClient(t, addrs, redlock.WithTries(1))
	l, err := c.Lock(context.Background(), "real:noauth", 10*time.Second)
	if err == nil {
		t.Fatalf("Lock succeeded on nodes that all answered NOAUTH (token %s)", l.Value())
	}
	realExpectEveryNode(t, err, len(addrs), "NOAUTH")
}

// A wrong password fails on every node with Redis's WRONGPASS, for the
// default user and for an ACL user.
func TestRealWrongPassword(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		user  string
	}{
		{"requirepass", []string{"--requirepass", "right"}, ""},
		{"acl user", []string{"--user", "default", "off", "--user", "locker", "on", ">right", "~*", "+@all"}, "locker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial := func(pass string) []redis.DialOption {
				return []redis.DialOption{redis.DialUsername(tc.user), redis.DialPassword(pass)}
			}
			var addrs []string
			for range 3 {
				s := redistest.StartWith(t, dial("right"), tc.extra...)
				addrs = append(addrs, s.Addr)
			}
			c, err := redlock.New(realPools(t, addrs, dial("wrong")...), realNodeTimeout, redlock.WithTries(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			_, err = c.Lock(context.Background(), "real:auth", time.Second)
			t.Logf("wrong password: %v", err)
			realExpectEveryNode(t, err, len(addrs), "WRONGPASS")
		})
	}
}

// realExpectEveryNode checks that err is ErrNotObtained with the failures of
// n nodes that all fail alike, each mentioning want. The error names at least
// n/2+1 of them: Lock stops counting once a majority is out of reach.
func realExpectEveryNode(t *testing.T, err error, n int, want string) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("err = %v, want ErrNotObtained", err)
	}
	causes := realNodeErrors(err)
	if len(causes) < n/2+1 {
		t.Errorf("%d of %d failed nodes named in %v, want at least %d", len(causes), n, err, n/2+1)
	}
	for i, cause := range causes {
		if !strings.Contains(cause.Error(), want) {
			t.Errorf("node %d: %v, want it to mention %q", i, cause, want)
		}
	}
}

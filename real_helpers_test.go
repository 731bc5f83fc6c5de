package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redigo"
)

// realPools returns one production pool (redigo.NewPool) per address,
// closed when the test ends.
func realPools(t testing.TB, addrs []string, dialOpts ...redis.DialOption) []redlock.Pool {
	t.Helper()
	pools := make([]redlock.Pool, len(addrs))
	for i, addr := range addrs {
		p := redigo.NewPool(addr, dialOpts...)
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	return pools
}

// realClient returns a client for the nodes at addrs.
// realNodeTimeout is the node timeout of integration clients unless a test
// sets its own: generous, because make test runs packages in parallel on a
// small machine and a fresh dial can outlast the 50ms default. Tests of the
// timeout itself set it explicitly.
var realNodeTimeout = redlock.WithNodeTimeout(time.Second)

func realClient(t testing.TB, addrs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.New(realPools(t, addrs), append([]redlock.Option{realNodeTimeout}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realNodeErrors returns the cause of each per-node failure in err, by node.
// It walks both single-error chains and joined errors.
func realNodeErrors(err error) map[int]error {
	found := map[int]error{}
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			var ne *redlock.NodeError
			if errors.As(e, &ne) {
				if _, ok := found[ne.Node]; !ok {
					found[ne.Node] = ne.Err
				}
			}
			if joined, ok := e.(interface{ Unwrap() []error }); ok {
				for _, x := range joined.Unwrap() {
					walk(x)
				}
				return
			}
			e = errors.Unwrap(e)
		}
	}
	walk(err)
	return found
}

// realConn dials addr for direct inspection of a node, closed when the test
// ends.
func realConn(t testing.TB, addr string, dialOpts ...redis.DialOption) redis.Conn {
	t.Helper()
	opts := append([]redis.DialOption{
		redis.DialConnectTimeout(2 * time.Second),
		redis.DialReadTimeout(2 * time.Second),
		redis.DialWriteTimeout(2 * time.Second),
	}, dialOpts...)
	c, err := redis.Dial("tcp", addr, opts...)
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// realGet returns key's value on the node behind conn, "" if it has none.
func realGet(t testing.TB, conn redis.Conn, key string) string {
	t.Helper()
	v, err := redis.String(conn.Do("GET", key))
	if errors.Is(err, redis.ErrNil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// realEventually polls cond every 10ms until it holds or timeout passes.
func realEventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// realAwaitToken waits until every node holds key with token. Lock returns
// on a majority; tests that inspect every node let the other SETs land
// first.
func realAwaitToken(t *testing.T, addrs []string, key, token string) {
	t.Helper()
	for i, addr := range addrs {
		conn := realConn(t, addr)
		if !realEventually(2*time.Second, func() bool { return realGet(t, conn, key) == token }) {
			t.Fatalf("node %d never got the token", i)
		}
	}
}

// realTimed returns how long f took.
func realTimed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

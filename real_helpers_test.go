package redlock_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
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

// realTimed returns how long f took, less the spans in which the stall
// watcher's goroutine waited more than stallMin past its tick to run (only
// while a watcher runs: the chaos tests start one, see stallWatch). The
// bounds checked against it are the library's: a two-core machine running
// the race detector beside Docker's faults and other packages' tests has
// starved the process for more than a second, and no deadline of the
// library's can end a call while the runtime cannot run it. Each call
// that has time taken out is logged, with both times, by the tests that
// run the watcher (stallWatch.watch).
func realTimed(f func()) time.Duration {
	start := time.Now()
	f()
	end := time.Now()
	d := end.Sub(start)
	if d > stallMin {
		if left := stalls.during(start, end); left > 0 {
			stalls.excused(d, left)
			d -= left
		}
	}
	return d
}

// stallMin is the shortest stall the watcher records: a wait far longer
// than a timer-woken goroutine sees on a busy machine whose scheduler
// preempts every 10 ms. stallTick is how often the watcher wakes.
const (
	stallMin  = 50 * time.Millisecond
	stallTick = 5 * time.Millisecond
)

// stalls watches for spans in which this process could not run a
// goroutine woken by a timer: a goroutine that asks to wake every
// stallTick and finds it was not run for more than stallMin past it
// records the span. Its causes are outside the library: the vCPUs
// descheduled, the process starved by the machine's other work, a long
// stop-the-world. The library's deadlines are timers of the same runtime,
// ended by goroutines of the same scheduler, so in such a span they wait
// too; the watcher being late does not prove that a given call was, but a
// deadline of the library's that fires late while the watcher's does not
// is still caught, and every call the subtraction excuses is logged.
var stalls stallWatch

type stallWatch struct {
	life sync.Mutex // held while the watcher starts or stops: one runs at a time

	mu      sync.Mutex
	users   int
	stop    chan struct{}
	done    chan struct{}
	woke    time.Time   // the watcher's latest wake-up
	spans   []stallSpan // the stalls seen, oldest first (at most stallKeep)
	count   int         // stalls seen since the watcher started
	most    time.Duration
	excuses []string // the timed calls the spans left out time of
}

type stallSpan struct{ from, to time.Time }

const stallKeep = 1024

// watch starts the watcher for t, unless it runs already, and stops it once
// the last test that asked for it has ended; t's log then says what it saw
// and which timed calls it left time out of.
func (s *stallWatch) watch(t testing.TB) {
	s.life.Lock()
	s.mu.Lock()
	if s.users == 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		s.woke, s.spans, s.count, s.most, s.excuses = time.Now(), nil, 0, 0, nil
		go s.run(s.stop, s.done)
	}
	s.users++
	count0, excused0 := s.count, len(s.excuses)
	s.mu.Unlock()
	s.life.Unlock()
	t.Cleanup(func() {
		s.life.Lock()
		defer s.life.Unlock()
		s.mu.Lock()
		seen, most := s.count-count0, s.most
		excuses := slices.Clone(s.excuses[excused0:])
		s.users--
		stop, done := s.stop, s.done
		if s.users > 0 {
			stop = nil
		}
		s.mu.Unlock()
		if seen > 0 {
			t.Logf("the stall watcher saw %d spans of more than %v while this test ran (the longest of its run: %v)", seen, stallMin, most)
		}
		for i, e := range excuses {
			if i == 20 {
				t.Logf("and %d more timed calls with stalls left out", len(excuses)-i)
				break
			}
			t.Logf("timed call: %s", e)
		}
		if stop != nil {
			close(stop)
			<-done
			s.mu.Lock()
			s.spans, s.excuses = nil, nil
			s.mu.Unlock()
		}
	})
}

func (s *stallWatch) run(stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		s.mu.Lock()
		if gap := now.Sub(s.woke); gap > stallTick+stallMin {
			if len(s.spans) == stallKeep {
				s.spans = slices.Delete(s.spans, 0, stallKeep/2)
			}
			s.spans = append(s.spans, stallSpan{s.woke.Add(stallTick), now})
			s.count++
			s.most = max(s.most, gap-stallTick)
		}
		s.woke = now
		s.mu.Unlock()
	}
}

// during returns how much of the span from from to to the watcher saw as
// stalls. It first waits (a few ticks at most) for the watcher to wake
// after to, so that a stall that ended just before to has been recorded.
func (s *stallWatch) during(from, to time.Time) time.Duration {
	for range 40 {
		s.mu.Lock()
		running, woke := s.users > 0, s.woke
		s.mu.Unlock()
		if !running || !woke.Before(to) {
			break
		}
		time.Sleep(stallTick)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, sp := range s.spans {
		if lo, hi := later(sp.from, from), earlier(sp.to, to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// excused notes a timed call of took from which left was taken out.
func (s *stallWatch) excused(took, left time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.excuses) < stallKeep {
		s.excuses = append(s.excuses, fmt.Sprintf("took %v, counted as %v: %v of stalls left out", took, took-left, left))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

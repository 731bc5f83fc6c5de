package main

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/redigo"
)

func TestDescribeHolder(t *testing.T) {
	held := func(tok string, ms int64) keyStatus { return keyStatus{held: true, token: tok, pttl: ms} }
	silent := keyStatus{err: context.DeadlineExceeded}
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	for _, c := range []struct {
		nodes []keyStatus
		want  string
	}{
		// The lock stands on a majority until its third-longest ttl ends.
		{[]keyStatus{held(a, 5000), held(a, 3000), held(a, 1000), held(b, 9000), {}},
			"held by aaaaaaaa… on 3 of 5 nodes, ttl 1s"},
		{[]keyStatus{held(a, 5000), held(a, 4200), held(a, 1000), held(a, 2500), {}},
			"held by aaaaaaaa… on 4 of 5 nodes, ttl 2.5s"},
		{[]keyStatus{held(a, 800), {}, held(a, 1250)},
			"held by aaaaaaaa… on 2 of 3 nodes, ttl 800ms"},
		{[]keyStatus{held(a, 800), {held: true, token: a, ttlErr: context.DeadlineExceeded}, held(a, 1250)},
			"held by aaaaaaaa… on 3 of 3 nodes, ttl 800ms"},
		{[]keyStatus{held(a, 800), {held: true, token: a, ttlErr: context.DeadlineExceeded}, {}},
			"held by aaaaaaaa… on 2 of 3 nodes, ttl unknown"},
		{[]keyStatus{{}, {}, {}}, "free now, trying"},
		{[]keyStatus{held(a, 1), held(b, 1), {}}, "no token on a majority (2 of 3 nodes hold one): an acquisition in progress, or keys left behind"},
		{[]keyStatus{held(a, 1), silent, {}}, "holder unknown, 1 of 3 nodes did not answer"},
	} {
		if got := describeHolder(c.nodes); got != c.want {
			t.Errorf("%v:\n got %q\nwant %q", c.nodes, got, c.want)
		}
	}
}

// The line reads the holder from the nodes, shows how long run has waited,
// and never the whole token.
func TestWaitLineReadsTheNodes(t *testing.T) {
	const key, token = "deploy:web", "0123456789abcdef0123456789abcdef"
	var pools []redlock.Pool
	for i := range 3 {
		m := miniredis.RunT(t)
		if i < 2 {
			m.Set(key, token)
			m.SetTTL(key, time.Duration(4+i)*time.Second)
		}
		p := redigo.NewPool(m.Addr())
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	now := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	var out strings.Builder
	l := &waitLine{w: &out, key: key, wait: time.Minute, pools: pools, nodeTimeout: 2 * time.Second,
		now: func() time.Time { return now }, start: now.Add(-12 * time.Second)}
	l.refresh(context.Background())
	want := "\rredlock run: waiting 12s of 1m0s for \"deploy:web\": held by 01234567… on 2 of 3 nodes, ttl 4s\x1b[K"
	if out.String() != want {
		t.Errorf("line\n got %q\nwant %q", out.String(), want)
	}
	if strings.Contains(out.String(), token) {
		t.Error("the whole token is shown")
	}
}

// A node that accepts connections and never answers delays the line by the
// node timeout at most.
func TestWaitLineBoundedByNodeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	m := miniredis.RunT(t)
	var pools []redlock.Pool
	for _, addr := range []string{ln.Addr().String(), m.Addr(), m.Addr()} {
		p := redigo.NewPool(addr)
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	const timeout = 200 * time.Millisecond
	start := time.Now()
	got := describeHolder(readHolder(context.Background(), pools, "k", timeout))
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("read took %v with a node timeout of %v", took, timeout)
	}
	if got != "free now, trying" {
		t.Errorf("got %q: two free nodes of three make the key free", got)
	}
}

// fakePool answers GET with a token and PTTL with a ttl, without a network.
type fakePool struct{ token string }

func (f fakePool) Exec(_ context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for i, c := range cmds {
		switch c.Name {
		case "GET":
			replies[i] = driver.Reply{Value: []byte(f.token)}
		case "PTTL":
			replies[i] = driver.Reply{Value: int64(3000)}
		}
	}
	return nil
}

// show draws nothing for a lock taken at once, then one line per second,
// rewritten in place, and erases it when stopped; nothing after that. In a
// synctest bubble, so the seconds are fake.
func TestWaitLineShowAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pools := []redlock.Pool{fakePool{"tttttttttttttttttttttttttttttttt"}, fakePool{"tttttttttttttttttttttttttttttttt"}, fakePool{""}}
		var out syncBuffer
		l := &waitLine{w: &out, key: "k", wait: time.Hour, pools: pools, nodeTimeout: time.Second, now: time.Now, start: time.Now()}

		stop := l.show(context.Background())
		time.Sleep(waitShowAfter / 2)
		stop()
		if out.String() != "" {
			t.Fatalf("wrote %q for a wait shorter than %v", out.String(), waitShowAfter)
		}

		stop = l.show(context.Background())
		time.Sleep(waitShowAfter + 2*waitRefresh + waitRefresh/2) // draws at 0.3s, 1.3s, 2.3s
		stop()
		stop()
		s := out.String()
		if n := strings.Count(s, "\r"); n != 4 {
			t.Errorf("%d carriage returns, want 3 draws and 1 erase:\n%q", n, s)
		}
		if !strings.HasSuffix(s, "\r\x1b[K") || strings.Contains(s, "\n") {
			t.Errorf("want one line, erased at the end: %q", s)
		}
		if !strings.Contains(s, "held by tttttttt… on 2 of 3 nodes, ttl 3s") {
			t.Errorf("no holder in %q", s)
		}
		time.Sleep(5 * waitRefresh)
		if out.String() != s {
			t.Error("wrote after stop")
		}
	})
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

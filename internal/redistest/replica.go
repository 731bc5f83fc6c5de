package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A Relay forwards TCP connections from a loopback port to a server, and
// can hold back what the server sends: a replication link whose primary
// has written a key that the replica has not received yet, as after a
// slow or congested link. Close (at the end of the test, or when the
// primary is killed) drops whatever is held back, so the replica never
// gets it.
type Relay struct {
	Addr string // 127.0.0.1:port, what the replica dials

	l      net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	held  bool
	cut   bool
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartRelay starts a Relay to target, closed when t ends.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &Relay{Addr: l.Addr().String(), l: l, target: target}
	r.cond = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.Close)
	return r
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		down, err := r.l.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		if err != nil {
			down.Close()
			continue
		}
		r.mu.Lock()
		if r.cut {
			r.mu.Unlock()
			down.Close()
			up.Close()
			return
		}
		r.conns = append(r.conns, down, up)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(up, down, false) // the replica's commands (REPLCONF ACK...)
		go r.pipe(down, up, true)  // the primary's stream: may be held back
	}
}

// pipe copies from src to dst; with holdable, it waits, before each write,
// while the relay holds the stream back.
func (r *Relay) pipe(dst, src net.Conn, holdable bool) {
	defer r.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && holdable {
			r.mu.Lock()
			for r.held && !r.cut {
				r.cond.Wait()
			}
			cut := r.cut
			r.mu.Unlock()
			if cut {
				return // dropped: the replica never sees it
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a cut: either way the link is gone
			return
		}
	}
}

// Hold holds back, from now on, what the server sends.
func (r *Relay) Hold() {
	r.mu.Lock()
	r.held = true
	r.mu.Unlock()
}

// Release lets what was held back, and what follows, through.
func (r *Relay) Release() {
	r.mu.Lock()
	r.held = false
	r.cond.Broadcast()
	r.mu.Unlock()
}

// Close cuts every connection, dropping what is held back, and stops
// accepting. It is safe to call twice.
func (r *Relay) Close() {
	r.mu.Lock()
	if r.cut {
		r.mu.Unlock()
		return
	}
	r.cut = true
	r.cond.Broadcast()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.l.Close()
	r.wg.Wait()
}

// A Replicated is a primary with one replica that replicates through a
// Relay, so that a test can delay replication and then fail over.
type Replicated struct {
	Primary, Replica *Server
	Link             *Relay
}

// StartReplicated starts a primary, and a replica of it (--replicaof)
// through a Relay, and waits until the replica is in sync: WAIT 1 on the
// primary reports it. Everything stops when t ends.
func StartReplicated(t testing.TB, extra ...string) *Replicated {
	t.Helper()
	p := Start(t, extra...)
	link := StartRelay(t, p.Addr)
	host, port, _ := net.SplitHostPort(link.Addr)
	r := Start(t, append([]string{"--replicaof", host, port}, extra...)...)
	if err := WaitReplicas(p.Addr, 1, 10*time.Second); err != nil {
		t.Fatalf("replica %s of %s: %v\n%s", r.Addr, p.Addr, err, r.Log())
	}
	return &Replicated{Primary: p, Replica: r, Link: link}
}

// WaitReplicas waits until n replicas of the primary at addr are online
// and acknowledging (WAIT n), or timeout passes.
func WaitReplicas(addr string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		c, err := redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(time.Second))
		if err == nil {
			// A connection that wrote nothing waits for no offset: WAIT
			// counts the replicas that are online and acknowledging.
			var got int
			got, err = redis.Int(c.Do("WAIT", n, 200))
			c.Close()
			if err == nil && got >= n {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("WAIT %d reports %d replicas", n, got)
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not replicated after %v: %v", timeout, last)
}

// SyncReplicas waits until n replicas of the primary at addr have every
// write it took so far: it writes, then WAITs for that write, or fails
// after timeout. On a Cluster primary it writes a key of one of the
// primary's own slots.
func SyncReplicas(addr string, n int, timeout time.Duration) error {
	c, err := redis.Dial("tcp", addr, redis.DialReadTimeout(timeout+time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	key := "redistest:sync"
	for i := 0; ; i++ {
		_, err = c.Do("SET", key, "1")
		if err == nil || !strings.HasPrefix(err.Error(), "MOVED") || i > 1000 {
			break
		}
		key = fmt.Sprintf("redistest:sync:%d", i)
	}
	if err != nil {
		return err
	}
	got, err := redis.Int(c.Do("WAIT", n, timeout.Milliseconds()))
	if err == nil && got < n {
		err = fmt.Errorf("after %v WAIT %d reports %d replicas", timeout, n, got)
	}
	return err
}

// Sync waits until the replica has every write the primary took so far.
func (m *Replicated) Sync(t testing.TB) {
	t.Helper()
	if err := SyncReplicas(m.Primary.Addr, 1, 10*time.Second); err != nil {
		t.Fatalf("replica %s of %s: %v", m.Replica.Addr, m.Primary.Addr, err)
	}
}

// Promote makes the server a primary at once (REPLICAOF NO ONE), as a
// failover does.
func (s *Server) Promote() error {
	c, err := redis.Dial("tcp", s.Addr, redis.DialReadTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Do("REPLICAOF", "NO", "ONE")
	return err
}

// Info returns one field of the server's INFO, "" if absent.
func (s *Server) Info(field string) (string, error) {
	c, err := redis.Dial("tcp", s.Addr, redis.DialReadTimeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	text, err := redis.String(c.Do("INFO"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return v, nil
		}
	}
	return "", nil
}

// Version returns the server's name and version from INFO: "redis 7.0.15",
// "valkey 8.1.1".
func (s *Server) Version() (name, version string, err error) {
	if v, err := s.Info("valkey_version"); err != nil {
		return "", "", err
	} else if v != "" {
		return "valkey", v, nil
	}
	v, err := s.Info("redis_version")
	return "redis", v, err
}

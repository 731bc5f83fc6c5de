package redistest

import (
	"net"
	"sync"
	"testing"
)

// A Frozen node accepts connections on loopback and never answers: a paused
// or deadlocked Redis process, as a client sees it.
type Frozen struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

// StartFrozen starts a Frozen node, stopped when t ends.
func StartFrozen(t testing.TB) *Frozen {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Frozen{l: l, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
		}
	}()
	t.Cleanup(f.Stop)
	return f
}

// Addr returns the node's address, host:port.
func (f *Frozen) Addr() string { return f.l.Addr().String() }

// Accepted returns how many connections the node has accepted.
func (f *Frozen) Accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// Stop closes the listener and every accepted connection, which unblocks
// any client still waiting for a reply. It is safe to call twice.
func (f *Frozen) Stop() {
	f.l.Close()
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

package redistest

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// probe sends SET key val to addr with a short timeout and reports the error
// and how long it took.
func probe(addr, key, val string) (time.Duration, error) {
	start := time.Now()
	const d = 300 * time.Millisecond
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(d), redis.DialReadTimeout(d), redis.DialWriteTimeout(d))
	if err != nil {
		return time.Since(start), err
	}
	defer c.Close()
	_, err = c.Do("SET", key, val)
	return time.Since(start), err
}

func get(t *testing.T, addr, key string) (string, error) {
	t.Helper()
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return redis.String(c.Do("GET", key))
}

// takePort fails the test if another process can listen on n's port while
// n is down: the node would lose its address.
func takePort(t *testing.T, n *Node) {
	t.Helper()
	if l, err := net.Listen("tcp", n.Addr); err == nil {
		l.Close()
		t.Fatalf("node %d is down, and another process could listen on its address %s", n.Index, n.Addr)
	}
}

// TestClusterFaults checks each fault helper against what a client sees: a
// killed node fails every connection and loses its keys, a durable one
// keeps them, a paused or disconnected node is unreachable and comes back
// with its keys, and every node keeps its address, which no other process
// can take while it is down.
func TestClusterFaults(t *testing.T) {
	c := StartCluster(t, ClusterOptions{Nodes: 2, Durable: func(i int) bool { return i == 1 }})
	t.Logf("image: %s", c.Image())
	plain, durable := c.Nodes[0], c.Nodes[1]
	for _, n := range c.Nodes {
		if _, err := probe(n.Addr, "k", "v"); err != nil {
			t.Fatalf("node %d: %v", n.Index, err)
		}
	}

	// Kill and restart: the plain node forgets, the durable one remembers.
	for _, n := range c.Nodes {
		// A client's connection, open across the kill: Docker's proxy ends
		// its side first, which leaves it in TIME_WAIT on the node's port.
		open, err := redis.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer open.Close()
		if _, err := open.Do("PING"); err != nil {
			t.Fatal(err)
		}
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if d, err := probe(n.Addr, "x", "y"); err == nil {
			t.Fatalf("node %d answered after Kill", n.Index)
		} else {
			t.Logf("killed node %d: %v after %v", n.Index, err, d)
		}
		takePort(t, n)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := get(t, plain.Addr, "k"); !errors.Is(err, redis.ErrNil) {
		t.Errorf("plain node kept k=%q across a crash (err %v)", v, err)
	}
	if v, err := get(t, durable.Addr, "k"); err != nil || v != "v" {
		t.Errorf("durable node lost k across a crash: %q, %v", v, err)
	}

	// Pause and disconnect: unreachable, then back with the key.
	faults := []struct {
		name    string
		on, off func(*Node) error
	}{
		{"pause", (*Node).Pause, (*Node).Unpause},
		{"disconnect", (*Node).Disconnect, (*Node).Reconnect},
	}
	for _, f := range faults {
		if _, err := probe(plain.Addr, "k", f.name); err != nil {
			t.Fatal(err)
		}
		if err := f.on(plain); err != nil {
			t.Fatal(err)
		}
		if d, err := probe(plain.Addr, "x", "y"); err == nil {
			t.Fatalf("%s: node answered", f.name)
		} else {
			t.Logf("%s: %v after %v", f.name, err, d)
		}
		takePort(t, plain)
		if err := f.off(plain); err != nil {
			t.Fatal(err)
		}
		if v, err := get(t, plain.Addr, "k"); err != nil || v != f.name {
			t.Errorf("after %s: k = %q, %v", f.name, v, err)
		}
	}
}

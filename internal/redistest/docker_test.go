package redistest

import (
	"errors"
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

// TestClusterFaults checks each fault helper against what a client sees: a
// killed node refuses and loses its keys, a durable one keeps them, a paused
// or disconnected node is unreachable and comes back with its keys, and every
// node keeps its address.
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
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
		if d, err := probe(n.Addr, "x", "y"); err == nil {
			t.Fatalf("node %d answered after Kill", n.Index)
		} else {
			t.Logf("killed node %d: %v after %v", n.Index, err, d)
		}
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
		if err := f.off(plain); err != nil {
			t.Fatal(err)
		}
		if v, err := get(t, plain.Addr, "k"); err != nil || v != f.name {
			t.Errorf("after %s: k = %q, %v", f.name, v, err)
		}
	}
}

package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// RequireDockerEnv names the environment variable that turns a missing Docker
// engine from a skip into a failure. make test sets it to 1.
const RequireDockerEnv = "REDLOCK_REQUIRE_DOCKER"

// Label marks every container and network the harness creates, so that
// leftovers of a killed test binary can be told apart from anything else.
const Label = "io.quorumlock.redlock.redistest"

// readyTimeout bounds the wait for a started or reconnected node to answer.
const readyTimeout = 20 * time.Second

// Docker returns a client for the local Docker engine, checked with a ping.
// Without an engine the test is skipped, naming the reason, or fails if
// $REDLOCK_REQUIRE_DOCKER is 1.
func Docker(t testing.TB) *dockertest.Pool {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = pool.Client.PingWithContext(ctx)
		cancel()
	}
	if err != nil {
		why := fmt.Sprintf("no Docker engine: %v", err)
		if os.Getenv(RequireDockerEnv) == "1" {
			t.Fatalf("%s (%s=1 requires one)", why, RequireDockerEnv)
		}
		t.Skipf("%s (set %s=1 to fail instead)", why, RequireDockerEnv)
	}
	pool.MaxWait = readyTimeout
	t.Cleanup(pool.Client.HTTPClient.CloseIdleConnections)
	return pool
}

// ClusterOptions configures StartCluster. The zero value is five nodes
// without persistence.
type ClusterOptions struct {
	// Nodes is the number of Redis masters; 0 means 5.
	Nodes int

	// Durable reports whether node i keeps its keys across a crash:
	// appendonly yes with appendfsync always. nil means none does.
	Durable func(i int) bool
}

// A Cluster is a set of independent Redis masters, one per container, on a
// network of their own. Each node has a fixed 127.0.0.1 port, which it keeps
// across restarts and disconnections: Docker lets a published port go the
// moment its container stops or leaves the network, so while a node is
// killed or disconnected the harness holds the port itself and resets every
// connection made to it at once (where a dead server's port would refuse
// them). Otherwise another process could take it meanwhile, a test's
// redis-server on a port the kernel chose, say: the probe of a killed node
// would reach that server, and the node could not start again on its
// address. Everything is removed when the test ends, pass or fail.
type Cluster struct {
	Nodes []*Node

	pool *dockertest.Pool
	net  *dockertest.Network
	img  *image
}

// A Node is one Redis master in a container. Its fault methods may be called
// from any goroutine; each returns once the fault is in place (Kill, Pause,
// Disconnect) or the node answers PING again (Start, Unpause, Reconnect).
type Node struct {
	Index   int
	Addr    string // 127.0.0.1:port, stable across restarts
	Durable bool

	cluster *Cluster
	id      string // container id

	mu                           sync.Mutex
	killed, paused, disconnected bool
	port                         int       // the host port of Addr
	held                         *portHold // while the node is down
}

// StartCluster starts the nodes and waits until each answers PING.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	pool := Docker(t)
	if opts.Nodes == 0 {
		opts.Nodes = 5
	}
	img, err := acquireImage(pool, t.Logf)
	switch {
	case errors.Is(err, errNoServerBinary) && os.Getenv(RequireDockerEnv) != "1" && os.Getenv(RequireServerEnv) != "1":
		// No image, and no redis-server to build one from (go test -short
		// on a machine without one, say): as without an engine.
		t.Skipf("%v (set %s=1 to fail instead)", err, RequireDockerEnv)
	case err != nil:
		t.Fatal(err)
	}
	c := &Cluster{pool: pool, img: img}
	t.Cleanup(func() {
		if err := releaseImage(pool, img); err != nil {
			t.Errorf("removing image %s: %v", img.ref, err)
		}
	})

	name := "redlock-redistest-" + randomHex(4)
	c.net, err = pool.CreateNetwork(name, func(o *dc.CreateNetworkOptions) {
		o.Driver = "bridge"
		o.Labels = map[string]string{Label: "1"}
	})
	if err != nil {
		t.Fatalf("creating network %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := pool.Client.RemoveNetwork(c.net.Network.ID); err != nil {
			t.Errorf("removing network %s: %v", name, err)
		}
	})

	for i := range opts.Nodes {
		durable := opts.Durable != nil && opts.Durable(i)
		n, err := c.run(name, i, durable)
		if err != nil {
			t.Fatalf("starting node %d: %v", i, err)
		}
		t.Cleanup(func() {
			if err := n.remove(); err != nil {
				t.Errorf("removing node %d: %v", n.Index, err)
			}
		})
		c.Nodes = append(c.Nodes, n)
	}
	for _, n := range c.Nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			t.Fatalf("node %d: %v\n%s", n.Index, err, n.Logs())
		}
	}
	return c
}

// Addrs returns the nodes' addresses in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Image returns the image the nodes run and how it was found.
func (c *Cluster) Image() string { return c.img.ref + " (" + c.img.source + ")" }

// run creates and starts node i. The host port is chosen free and bound
// explicitly, so that it survives the container's restarts; if another
// process takes it first, another port is tried.
func (c *Cluster) run(netName string, i int, durable bool) (*Node, error) {
	args := []string{"--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--dir", "/data"}
	if durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		res, err := c.pool.RunWithOptions(&dockertest.RunOptions{
			Name:         fmt.Sprintf("%s-%d", netName, i),
			Repository:   c.img.repo(),
			Tag:          c.img.tag(),
			Entrypoint:   c.img.entrypoint,
			Cmd:          append(append([]string{}, c.img.serverCmd...), args...),
			Env:          c.img.env,
			ExposedPorts: []string{"6379/tcp"},
			Labels:       map[string]string{Label: "1"},
			PortBindings: map[dc.Port][]dc.PortBinding{
				"6379/tcp": {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}},
			},
		}, func(hc *dc.HostConfig) {
			hc.NetworkMode = netName
			hc.PublishAllPorts = false
			hc.AutoRemove = false
			hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
		})
		if err != nil {
			lastErr = err
			// A failed start may leave the created container behind.
			_ = c.pool.RemoveContainerByName(fmt.Sprintf("%s-%d", netName, i))
			if strings.Contains(err.Error(), "port is already allocated") || strings.Contains(err.Error(), "address already in use") {
				continue
			}
			return nil, err
		}
		return &Node{
			Index:   i,
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Durable: durable,
			cluster: c,
			id:      res.Container.ID,
			port:    port,
		}, nil
	}
	return nil, lastErr
}

func (img *image) repo() string { r, _ := splitRef(img.ref); return r }
func (img *image) tag() string  { _, t := splitRef(img.ref); return t }

// Kill sends SIGKILL to the node's server and waits until the container has
// stopped. Without persistence, its keys are gone. Until Start, connections
// to its address are reset at once (see Cluster).
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cl := n.cluster.pool.Client
	if err := cl.KillContainer(dc.KillContainerOptions{ID: n.id, Signal: dc.SIGKILL}); err != nil {
		return fmt.Errorf("killing node %d: %w", n.Index, err)
	}
	n.killed = true
	if err := n.waitState(func(s dc.State) bool { return !s.Running }, "stopped"); err != nil {
		return err
	}
	return n.holdPort()
}

// Start starts a killed node's container again, same address, and waits until
// it answers. A durable node reloads its append-only file first.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.disconnected { // else the port waits for Reconnect
		n.letPortGo()
	}
	if err := n.cluster.pool.Client.StartContainer(n.id, nil); err != nil {
		return fmt.Errorf("starting node %d: %w", n.Index, err)
	}
	n.killed = false
	return n.WaitReady(readyTimeout)
}

// Pause freezes the node's processes (docker pause, the cgroup freezer). The
// kernel still accepts connections for it, but nothing answers: a silent
// node, not a refusing one.
func (n *Node) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cluster.pool.Client.PauseContainer(n.id); err != nil {
		return fmt.Errorf("pausing node %d: %w", n.Index, err)
	}
	n.paused = true
	return nil
}

// Unpause thaws a paused node and waits until it answers.
func (n *Node) Unpause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.cluster.pool.Client.UnpauseContainer(n.id); err != nil {
		return fmt.Errorf("unpausing node %d: %w", n.Index, err)
	}
	n.paused = false
	return n.WaitReady(readyTimeout)
}

// Disconnect cuts the node off the cluster's network, which carries its
// published port: clients can no longer reach it, and packets in flight on
// open connections are lost. The server keeps running with its keys.
func (n *Node) Disconnect() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.cluster.pool.Client.DisconnectNetwork(n.cluster.net.Network.ID, dc.NetworkConnectionOptions{Container: n.id, Force: true})
	if err != nil {
		return fmt.Errorf("disconnecting node %d: %w", n.Index, err)
	}
	n.disconnected = true
	return n.holdPort()
}

// Reconnect joins the node to the network again and waits until it answers
// on its old address.
func (n *Node) Reconnect() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.killed { // else the port waits for Start
		n.letPortGo()
	}
	err := n.cluster.pool.Client.ConnectNetwork(n.cluster.net.Network.ID, dc.NetworkConnectionOptions{Container: n.id})
	if err != nil {
		return fmt.Errorf("reconnecting node %d: %w", n.Index, err)
	}
	n.disconnected = false
	return n.WaitReady(readyTimeout)
}

// Logs returns what the node's server printed, for failure messages.
func (n *Node) Logs() string {
	var out strings.Builder
	_ = n.cluster.pool.Client.Logs(dc.LogsOptions{
		Container: n.id, Stdout: true, Stderr: true,
		OutputStream: &out, ErrorStream: &out, Tail: "50",
	})
	return out.String()
}

// WaitReady polls the node with PING until it answers or timeout passes.
func (n *Node) WaitReady(timeout time.Duration) error {
	return waitPing(n.Addr, timeout)
}

// waitState polls the container until ok holds for its state, at most
// readyTimeout.
func (n *Node) waitState(ok func(dc.State) bool, want string) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		c, err := n.cluster.pool.Client.InspectContainer(n.id)
		if err != nil {
			return fmt.Errorf("node %d: %w", n.Index, err)
		}
		if ok(c.State) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d: not %s after %v: %s", n.Index, want, readyTimeout, c.State.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// remove undoes any fault and removes the container with its volumes. A
// paused container is thawed first: force-removing a frozen one can fail.
func (n *Node) remove() error {
	n.mu.Lock()
	paused := n.paused
	n.letPortGo()
	n.mu.Unlock()
	cl := n.cluster.pool.Client
	if paused {
		_ = cl.UnpauseContainer(n.id)
	}
	err := cl.RemoveContainer(dc.RemoveContainerOptions{ID: n.id, Force: true, RemoveVolumes: true})
	var missing *dc.NoSuchContainer
	if errors.As(err, &missing) {
		return nil
	}
	return err
}

// holdPort takes the node's host port, once Docker has let it go (see
// Cluster), and resets every connection made to it; n.mu is held. It fails
// if another process took the port first, or Docker still holds it after a
// while.
//
// The port is listened on, not only bound: a bound socket keeps out only a
// process that binds without SO_REUSEADDR (servers and Go set it), and the
// proxy's connections, left in TIME_WAIT on the port, keep such a socket
// from being bound at all.
func (n *Node) holdPort() error {
	if n.held != nil {
		return nil
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		l, err := net.Listen("tcp", n.Addr)
		if err == nil {
			n.held = &portHold{l: l.(*net.TCPListener), done: make(chan struct{})}
			go n.held.reset()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d: holding port %d while the node is down: %w (another process took it, or Docker has not let it go)", n.Index, n.port, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// letPortGo lets go of the port that holdPort took, for the node to take
// again; n.mu is held.
func (n *Node) letPortGo() {
	if n.held != nil {
		n.held.l.Close()
		<-n.held.done
		n.held = nil
	}
}

// A portHold is a down node's port, held by the harness.
type portHold struct {
	l    *net.TCPListener
	done chan struct{} // closed once reset has returned
}

// reset accepts connections until the listener is closed and resets each at
// once (linger 0): a client fails as fast as on a dead server's port, which
// refuses them, and no connection is left in TIME_WAIT on the port.
func (h *portHold) reset() {
	defer close(h.done)
	for {
		c, err := h.l.AcceptTCP()
		if err != nil {
			return
		}
		_ = c.SetLinger(0)
		_ = c.Close()
	}
}

// waitPing polls addr with PING until it answers or timeout passes.
func waitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(200*time.Millisecond),
			redis.DialReadTimeout(200*time.Millisecond), redis.DialWriteTimeout(200*time.Millisecond))
		if err == nil {
			_, err = c.Do("PING")
			c.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not answering PING after %v: %v", addr, timeout, last)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

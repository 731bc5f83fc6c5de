package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Pause stops the server process (SIGSTOP): it keeps accepting connections,
// in the kernel's backlog, and answers nothing, like a frozen node. Resume
// undoes it; Stop works on a paused server too.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// A RedisCluster is a Redis Cluster of local redis-server processes, every
// one a primary with a share of the 16,384 slots and no replicas.
type RedisCluster struct {
	Primaries []*Server
	Replicas  []*Server // StartRedisClusterReplicas: one per primary
}

// ClusterAvailable reports whether redis-cli, which joins the cluster, is
// installed, and if not, why.
func ClusterAvailable() (ok bool, why string) {
	if ok, why := Available(); !ok {
		return false, why
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return false, "redis-cli is not installed (make test installs Debian's redis-tools)"
	}
	return true, ""
}

// StartRedisCluster starts primaries (at least 3) cluster-enabled servers,
// joins them with redis-cli --cluster create, and waits until every node
// reports cluster_state:ok. The servers stop when t ends. It skips t, with
// the reason, if redis-server or redis-cli is missing.
func StartRedisCluster(t testing.TB, primaries int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, primaries, 0)
}

// StartRedisClusterReplicas is StartRedisCluster with one replica for each
// primary (redis-cli --cluster-replicas 1), and a cluster node timeout of
// 1s, so that a killed primary's replica takes over within seconds.
// Replicas has them; the primaries stay in Primaries as started, even after
// a failover.
func StartRedisClusterReplicas(t testing.TB, primaries int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, primaries, 1)
}

func startRedisCluster(t testing.TB, primaries, replicas int) *RedisCluster {
	t.Helper()
	if ok, why := ClusterAvailable(); !ok {
		t.Skip(why)
	}
	if primaries < 3 {
		t.Fatalf("a Redis Cluster needs at least 3 primaries, not %d", primaries)
	}
	dir := t.TempDir()
	rc := &RedisCluster{}
	args := []string{"--cluster", "create"}
	nodeTimeout := "2000"
	if replicas > 0 {
		nodeTimeout = "1000"
	}
	// redis-cli makes the first primaries-many nodes primaries, and the
	// rest their replicas.
	for i := range primaries * (1 + replicas) {
		s := Start(t,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(FreePort(t)),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
			"--cluster-node-timeout", nodeTimeout,
		)
		if i < primaries {
			rc.Primaries = append(rc.Primaries, s)
		} else {
			rc.Replicas = append(rc.Replicas, s)
		}
		args = append(args, s.Addr)
	}
	if replicas > 0 {
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas))
	}
	args = append(args, "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := rc.WaitOK(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range rc.Primaries[:len(rc.Replicas)] {
		if err := WaitReplicas(p.Addr, 1, 20*time.Second); err != nil {
			t.Fatalf("cluster primary %s: %v", p.Addr, err)
		}
	}
	return rc
}

// Addrs returns the primaries' addresses.
func (rc *RedisCluster) Addrs() []string {
	addrs := make([]string, len(rc.Primaries))
	for i, s := range rc.Primaries {
		addrs[i] = s.Addr
	}
	return addrs
}

// WaitOK waits until every primary reports cluster_state:ok.
func (rc *RedisCluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, s := range rc.Primaries {
		for {
			info, err := clusterInfo(s.Addr)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster node %s not ok after %v: %v %s", s.Addr, timeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func clusterInfo(addr string) (string, error) {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return redis.String(c.Do("CLUSTER", "INFO"))
}

// Owner returns the primary that serves key's slot.
func (rc *RedisCluster) Owner(t testing.TB, key string) *Server {
	t.Helper()
	for _, s := range rc.Primaries {
		c, err := redis.Dial("tcp", s.Addr, redis.DialReadTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Do("EXISTS", key)
		c.Close()
		if err == nil {
			return s
		}
		if !strings.HasPrefix(err.Error(), "MOVED") {
			t.Fatalf("EXISTS %s on %s: %v", key, s.Addr, err)
		}
	}
	t.Fatalf("no primary serves %q", key)
	return nil
}

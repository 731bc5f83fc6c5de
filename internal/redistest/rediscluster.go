package redistest

import (
	"context"
	"fmt"
	"os"
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

	dial []redis.DialOption // how the harness reaches a node (TLS, a login)
}

// Secure makes a Redis Cluster that asks what a production one may: TLS
// and an ACL user (StartRedisClusterSecure).
type Secure struct {
	// TLS, if set: every node speaks only TLS, with client certificates
	// required, and the nodes' cluster bus runs over TLS too.
	TLS *TLSFiles

	// Args are more arguments for every node: ACL users ("--user", ...),
	// with "--user", "default", "off" to turn off the password-less user.
	Args []string

	// Admin and AdminPassword log the harness and redis-cli in, as a user
	// whom Args allow every command; empty for the default user.
	Admin, AdminPassword string
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

// RequireCluster skips t, saying why, if redis-server or redis-cli is
// missing; with REDLOCK_REQUIRE_DOCKER or REDLOCK_REQUIRE_REDIS set to 1 it
// fails t instead.
func RequireCluster(t testing.TB) {
	t.Helper()
	Require(t)
	if ok, why := ClusterAvailable(); !ok {
		if os.Getenv(RequireDockerEnv) == "1" || os.Getenv(RequireServerEnv) == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
}

// StartRedisCluster starts primaries (at least 3) cluster-enabled servers,
// joins them with redis-cli --cluster create, and waits until every node
// reports cluster_state:ok. The servers stop when t ends. It skips t, with
// the reason, if redis-server or redis-cli is missing.
func StartRedisCluster(t testing.TB, primaries int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, primaries, 0, Secure{})
}

// StartRedisClusterReplicas is StartRedisCluster with one replica for each
// primary (redis-cli --cluster-replicas 1), and a cluster node timeout of
// 1s, so that a killed primary's replica takes over within seconds.
// Replicas has them; the primaries stay in Primaries as started, even after
// a failover.
func StartRedisClusterReplicas(t testing.TB, primaries int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, primaries, 1, Secure{})
}

// StartRedisClusterSecure is StartRedisCluster with TLS and ACL users, as
// sec says.
func StartRedisClusterSecure(t testing.TB, primaries int, sec Secure) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, primaries, 0, sec)
}

func startRedisCluster(t testing.TB, primaries, replicas int, sec Secure) *RedisCluster {
	t.Helper()
	if ok, why := ClusterAvailable(); !ok {
		t.Skip(why)
	}
	if primaries < 3 {
		t.Fatalf("a Redis Cluster needs at least 3 primaries, not %d", primaries)
	}
	dir := t.TempDir()
	rc := &RedisCluster{}
	var cli []string // redis-cli's connection arguments
	if sec.TLS != nil {
		rc.dial = append(rc.dial, sec.TLS.DialTLS()...)
		cli = append(cli, "--tls", "--cacert", sec.TLS.CACert, "--cert", sec.TLS.ClientCert, "--key", sec.TLS.ClientKey)
	}
	if sec.Admin != "" {
		rc.dial = append(rc.dial, redis.DialUsername(sec.Admin), redis.DialPassword(sec.AdminPassword))
		cli = append(cli, "--user", sec.Admin, "--pass", sec.AdminPassword, "--no-auth-warning")
	}
	args := append(cli, "--cluster", "create")
	nodeTimeout := "2000"
	if replicas > 0 {
		nodeTimeout = "1000"
	}
	// redis-cli makes the first primaries-many nodes primaries, and the
	// rest their replicas.
	for i := range primaries * (1 + replicas) {
		Require(t)
		try := 0 // each try's node gets a config file of its own
		s := startFree(t, "cluster node", rc.dial, func(port int) *Server {
			try++
			// FreePort may give the same port twice: the two must differ.
			busPort := FreePort(t)
			for busPort == port {
				busPort = FreePort(t)
			}
			nodeArgs := []string{
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(busPort),
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d-%d.conf", i, try)),
				"--cluster-node-timeout", nodeTimeout,
			}
			var serverArgs []string
			if sec.TLS != nil {
				// The nodes' connections to one another present the
				// client certificate, which the CA signed for that use.
				serverArgs = append(sec.TLS.serverArgs(port), "--tls-cluster", "yes",
					"--tls-client-cert-file", sec.TLS.ClientCert, "--tls-client-key-file", sec.TLS.ClientKey)
			}
			return StartOnPort(t, port, append(append(serverArgs, nodeArgs...), sec.Args...)...)
		})
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
			info, err := clusterInfo(s.Addr, rc.dial)
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

func clusterInfo(addr string, dial []redis.DialOption) (string, error) {
	c, err := redis.Dial("tcp", addr, append([]redis.DialOption{redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second)}, dial...)...)
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
		c, err := redis.Dial("tcp", s.Addr, append([]redis.DialOption{redis.DialReadTimeout(time.Second)}, rc.dial...)...)
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

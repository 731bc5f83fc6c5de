package redistest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

func TestStartServesAndStops(t *testing.T) {
	s := Start(t)
	c, err := redis.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := redis.String(c.Do("PING")); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	s.Stop()
	if err := s.WaitReady(300 * 1e6); err == nil {
		t.Fatal("WaitReady after Stop = nil")
	}
	if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the port still accepts connections after Stop")
	}
}

// A server whose port another server took first is not ready, though the
// other answers on the port: its wait says the port was taken.
func TestWaitReadyPortTaken(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skipf("no /proc/net/tcp, which tells a server's listener from another's: %v", err)
	}
	first := Start(t)
	second := StartOnPort(t, first.Port)
	err := second.WaitReadyWith(5 * time.Second)
	if !errors.Is(err, ErrPortTaken) {
		t.Fatalf("WaitReady of a server whose port was taken = %v, want ErrPortTaken", err)
	}
	if err := first.WaitReady(time.Second); err != nil {
		t.Fatalf("the server that holds the port: %v", err)
	}
}

// A cluster node's bus port taken too.
func TestWaitReadyBusPortTaken(t *testing.T) {
	if ok, why := ClusterAvailable(); !ok {
		t.Skip(why)
	}
	taken := Start(t)
	s := StartOnPort(t, FreePort(t), "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(taken.Port),
		"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	if err := s.WaitReady(5 * time.Second); !errors.Is(err, ErrPortTaken) {
		t.Fatalf("WaitReady of a cluster node whose bus port was taken = %v, want ErrPortTaken\n%s", err, s.Log())
	}
}

// A process that has exited and been waited for holds no listener: the
// port's listener is another's, which WaitReady must not take for its
// server's (the server exits when it cannot bind).
func TestListensOnExitedProcess(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if own, known := listensOn(os.Getpid(), port); !own || !known {
		t.Fatalf("listensOn(this process, its listener's port) = %v, %v; want true, true", own, known)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if own, known := listensOn(cmd.Process.Pid, port); own || !known {
		t.Fatalf("listensOn(an exited process, a port another holds) = %v, %v; want false, true", own, known)
	}
}

// A Sentinel starts with the configuration lines given and answers on its
// port.
func TestStartSentinel(t *testing.T) {
	master := Start(t)
	s := StartSentinel(t, "sentinel monitor mymaster 127.0.0.1 "+strconv.Itoa(master.Port)+" 1")
	c, err := redis.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := redis.Strings(c.Do("SENTINEL", "get-master-addr-by-name", "mymaster"))
	if err != nil || len(got) != 2 || got[1] != strconv.Itoa(master.Port) {
		t.Fatalf("SENTINEL get-master-addr-by-name mymaster = %q, %v; want port %d", got, err, master.Port)
	}
}

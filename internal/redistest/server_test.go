package redistest

import (
	"errors"
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
		t.Fatal("server still answers after Stop")
	}
}

// A server whose port another server took first is not ready, though the
// other answers on the port: its wait says the port was taken.
func TestWaitReadyPortTaken(t *testing.T) {
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

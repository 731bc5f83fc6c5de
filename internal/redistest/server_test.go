package redistest

import (
	"testing"

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

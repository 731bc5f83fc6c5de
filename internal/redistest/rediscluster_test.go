package redistest

import (
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A secure Redis Cluster speaks only TLS, to clients and on its bus, and
// lets in only its ACL users: the harness's admin, and a user whom the
// rules allow a key pattern only.
func TestRedisClusterSecure(t *testing.T) {
	RequireCluster(t)
	files := GenerateTLS(t)
	rc := StartRedisClusterSecure(t, 3, Secure{
		TLS: files,
		Args: []string{"--user", "default", "off", "--user", "admin", "on", ">adminpw", "~*", "&*", "+@all",
			"--user", "app", "on", ">apppw", "~app:*", "+@connection", "+get", "+set"},
		Admin: "admin", AdminPassword: "adminpw",
	})
	owner := rc.Owner(t, "app:k")
	app := func(opts ...redis.DialOption) (redis.Conn, error) {
		return redis.Dial("tcp", owner.Addr, append([]redis.DialOption{redis.DialConnectTimeout(time.Second),
			redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second)}, opts...)...)
	}
	c, err := app(append(files.DialTLS(), redis.DialUsername("app"), redis.DialPassword("apppw"))...)
	if err != nil {
		t.Fatalf("the ACL user over TLS: %v", err)
	}
	defer c.Close()
	if _, err := c.Do("SET", "app:k", "v"); err != nil {
		t.Fatalf("SET as the ACL user: %v", err)
	}
	if _, err := c.Do("SET", "other", "v"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET outside the user's keys: %v, want NOPERM", err)
	}
	if c, err := app(files.DialTLS()...); err == nil {
		_, err = c.Do("GET", "app:k")
		c.Close()
		if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("GET as the default user: %v, want NOAUTH", err)
		}
	}
	if c, err := app(); err == nil {
		_, err = c.Do("PING")
		c.Close()
		if err == nil {
			t.Error("a plain-text client got an answer")
		}
	}
}

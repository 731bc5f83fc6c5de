package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/redistest"
)

func TestRunTLS(t *testing.T) {
	redistest.Require(t)
	// The certificate names redis.test only, not the address the nodes
	// listen on.
	f := redistest.GenerateTLSFor(t, "redis.test")
	ca, cert, key := f.CACert, f.ServerCert, f.ServerKey
	var addrs []string
	for range 3 {
		s := redistest.StartFree(t, []redis.DialOption{redis.DialUseTLS(true), redis.DialTLSSkipVerify(true)}, func(port int) *redistest.Server {
			return redistest.StartOnPort(t, port, "--port", "0", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
		})
		addrs = append(addrs, s.Addr)
	}
	nodes := strings.Join(addrs, ",")
	base := []string{"run", "--nodes", nodes, "--key", "tls", "--ttl", "2s"}

	r := runRedlock(t, 30*time.Second, nil, append(base, "--tls-ca", ca, "--tls-server-name", "redis.test"), "exit", "4")
	if r.err != nil || r.code != 4 {
		t.Errorf("with --tls-ca and --tls-server-name: exit %d, %v; want the child's 4\n%s", r.code, r.err, r.stderr)
	}
	// The certificate names redis.test, not 127.0.0.1.
	r = runRedlock(t, 30*time.Second, nil, append(base, "--tls-ca", ca), "exit", "0")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("--tls-ca without --tls-server-name: exit %d, want %d with a certificate error\n%s", r.code, exitUnavailable, r.stderr)
	}
	// Without the CA the servers' certificates are not trusted.
	r = runRedlock(t, 30*time.Second, nil, append(base, "--tls"), "exit", "0")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "certificate") {
		t.Errorf("--tls without the CA: exit %d, want %d with a certificate error\n%s", r.code, exitUnavailable, r.stderr)
	}
	// Plain TCP to a TLS port fails too.
	r = runRedlock(t, 30*time.Second, nil, base, "exit", "0")
	if r.code != exitUnavailable {
		t.Errorf("no TLS against TLS ports: exit %d, want %d\n%s", r.code, exitUnavailable, r.stderr)
	}
}

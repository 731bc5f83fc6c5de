package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
)

// tlsFiles writes a CA and a server certificate for the name "redis.test"
// only, not for the address it listens on, into dir, and returns the paths.
func tlsFiles(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, srvKey := newKey(), newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames:    []string{"redis.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

func TestRunTLS(t *testing.T) {
	if ok, why := redistest.Available(); !ok {
		t.Skip(why)
	}
	dir := t.TempDir()
	ca, cert, key := tlsFiles(t, dir)
	var addrs []string
	for range 3 {
		port := redistest.FreePort(t)
		s := redistest.StartOnPort(t, 0, "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if !pollFor(5*time.Second, func() bool {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 200 * time.Millisecond}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
			if err == nil {
				c.Close()
			}
			return err == nil
		}) {
			t.Skipf("redis-server did not serve TLS on %s (built without TLS?)\n%s", addr, s.Log())
		}
		addrs = append(addrs, addr)
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

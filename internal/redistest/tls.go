package redistest

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
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TLSFiles is a certificate authority with a server and a client certificate,
// made for one test: nothing secret is kept in the repository.
type TLSFiles struct {
	CACert, ServerCert, ServerKey string // PEM files, for redis-server
	ClientCert, ClientKey         string // PEM files, for redis-cli and a cluster's own connections

	// Client trusts the CA, presents the client certificate and expects the
	// server to be 127.0.0.1.
	Client *tls.Config
}

// GenerateTLS writes a fresh CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate into a temporary directory. ECDSA P-256
// keys, valid for an hour.
func GenerateTLS(t testing.TB) *TLSFiles {
	t.Helper()
	return GenerateTLSFor(t, "127.0.0.1", "localhost")
}

// GenerateTLSFor is GenerateTLS with a server certificate for hosts: IP
// addresses or DNS names. The client configuration expects the first.
func GenerateTLSFor(t testing.TB, hosts ...string) *TLSFiles {
	t.Helper()
	var (
		ips   []net.IP
		names []string
	)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, h)
		}
	}
	dir := t.TempDir()
	now := time.Now()
	serial := int64(1)
	newCert := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Minute), now.Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key // self-signed
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, der
	}
	write := func(name, typ string, der []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}

	ca, caKey, caDER := newCert(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "redlock test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, nil, nil)
	_, srvKey, srvDER := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "redlock test server"},
		IPAddresses: ips,
		DNSNames:    names,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	_, cliKey, cliDER := newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "redlock test client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	clientCert := tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return &TLSFiles{
		CACert:     write("ca.crt", "CERTIFICATE", caDER),
		ServerCert: write("server.crt", "CERTIFICATE", srvDER),
		ServerKey:  write("server.key", "PRIVATE KEY", keyDER(srvKey)),
		ClientCert: write("client.crt", "CERTIFICATE", cliDER),
		ClientKey:  write("client.key", "PRIVATE KEY", keyDER(cliKey)),
		Client: &tls.Config{
			RootCAs:      roots,
			Certificates: []tls.Certificate{clientCert},
			ServerName:   hosts[0],
			MinVersion:   tls.VersionTLS12,
		},
	}
}

// serverArgs are the arguments of a server that speaks only TLS on port,
// with client certificates required.
func (f *TLSFiles) serverArgs(port int) []string {
	return []string{
		"--port", "0",
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CACert,
		"--tls-auth-clients", "yes",
	}
}

// DialTLS returns the dial options of a client of a server started by
// StartTLS.
func (f *TLSFiles) DialTLS() []redis.DialOption {
	return []redis.DialOption{redis.DialUseTLS(true), redis.DialTLSConfig(f.Client)}
}

// StartTLS launches a redis-server that speaks only TLS (--port 0), with
// client certificates required, and waits until it answers PING over TLS.
func StartTLS(t testing.TB, f *TLSFiles, extra ...string) *Server {
	t.Helper()
	Require(t)
	return startFree(t, "redis-server with TLS", f.DialTLS(), func(port int) *Server {
		return StartOnPort(t, port, append(f.serverArgs(port), extra...)...)
	})
}

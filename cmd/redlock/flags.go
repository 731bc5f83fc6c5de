package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/redigo"
)

// Environment variables read by run, doctor and status.
const (
	envNodes    = "REDLOCK_NODES"    // default for --nodes
	envPassword = "REDLOCK_PASSWORD" // the only way to give a password
)

// connFlags are the flags that say which nodes to reach and how: the node
// list, TLS and the ACL user. run, doctor and status share them, so that a
// command line that works for one works for the others.
type connFlags struct {
	nodes                                 string
	useTLS                                bool
	tlsCA, tlsCert, tlsKey, tlsServerName string
	user                                  string
}

// addConnFlags defines the connection flags on fs.
func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{}
	fs.StringVar(&f.nodes, "nodes", "", "comma-separated `host:port` list of independent Redis masters (default $REDLOCK_NODES)")
	fs.BoolVar(&f.useTLS, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM `file` of CAs to verify the servers (default: system roots)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM `file` of the client certificate, with --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM `file` of the client key, with --tls-cert")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "server `name` to verify (default: each node's host)")
	fs.StringVar(&f.user, "user", "", "ACL `user`; the password comes from $REDLOCK_PASSWORD")
	return f
}

// nodeList returns the nodes of --nodes, or of $REDLOCK_NODES without it.
func (f *connFlags) nodeList(getenv func(string) string) ([]string, error) {
	list := f.nodes
	if list == "" {
		list = getenv(envNodes)
	}
	return parseNodes(list)
}

// A conn is how to reach the nodes, once the flags are checked.
type conn struct {
	dialOpts []redis.DialOption // TLS, user and password, for redigo.NewPool
	tls      bool               // the connections use TLS
	tlsOpts  []redis.DialOption // the TLS options alone, for a dial without credentials
	password bool               // $REDLOCK_PASSWORD was set
}

// dial checks the TLS files and collects the dial options. It reads the
// files, so callers check cheaper arguments first.
func (f *connFlags) dial(getenv func(string) string) (*conn, error) {
	c := &conn{tls: f.useTLS || f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsServerName != ""}
	if c.tls {
		tc, err := tlsConfig(f.tlsCA, f.tlsCert, f.tlsKey, f.tlsServerName)
		if err != nil {
			return nil, err
		}
		c.tlsOpts = []redis.DialOption{redis.DialUseTLS(true), redis.DialTLSConfig(tc)}
		c.dialOpts = append(c.dialOpts, c.tlsOpts...)
	}
	if f.user != "" {
		c.dialOpts = append(c.dialOpts, redis.DialUsername(f.user))
	}
	if pw := getenv(envPassword); pw != "" {
		c.password = true
		c.dialOpts = append(c.dialOpts, redis.DialPassword(pw))
	}
	return c, nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseNodes splits a comma-separated node list and checks each address.
// A node listed twice would count twice toward the majority, so it is an
// error.
func parseNodes(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no nodes: give --nodes host:port,... or set %s", envNodes)
	}
	var nodes []string
	seen := map[string]bool{}
	for _, addr := range strings.Split(list, ",") {
		addr = strings.TrimSpace(addr)
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("node %q: want host:port", addr)
		}
		if n, err := strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
			// A typo, not a node that is down: bad usage, not exit 69.
			return nil, fmt.Errorf("node %q: port %d is not 1 to 65535", addr, n)
		}
		if seen[addr] {
			return nil, fmt.Errorf("node %s is listed twice; each must be an independent master", addr)
		}
		seen[addr] = true
		nodes = append(nodes, addr)
	}
	return nodes, nil
}

func tlsConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificates found", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// parseFlags parses args into fs. It returns flag.ErrHelp for -h, and for
// any other mistake an error that points to the command's help; the flag
// package has already printed the details.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("bad flags (see redlock %s -h)", fs.Name())
	}
	return nil
}

// pools opens one redigo pool per node, with connects and TLS handshakes
// bounded by timeout as well as by each call's deadline. Close them when
// done.
func (c *conn) pools(nodes []string, timeout time.Duration) []*redigo.Pool {
	opts := append([]redis.DialOption{redis.DialConnectTimeout(timeout), redis.DialTLSHandshakeTimeout(timeout)}, c.dialOpts...)
	pools := make([]*redigo.Pool, len(nodes))
	for i, addr := range nodes {
		pools[i] = redigo.NewPool(addr, opts...)
	}
	return pools
}

// call sends one command to p and waits at most timeout for its reply. An
// error reply comes back as the error, a driver.ReplyError.
func call(p redlock.Pool, timeout time.Duration, name string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	replies := make([]driver.Reply, 1)
	if err := p.Exec(ctx, []driver.Command{{Name: name, Args: args}}, replies); err != nil {
		return nil, err
	}
	return replyValue(replies[0])
}

// replyValue returns a reply's value, or its error reply as a
// driver.ReplyError, however the driver stored it.
func replyValue(r driver.Reply) (any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	if err, ok := r.Value.(error); ok {
		return nil, driver.ReplyError(err.Error())
	}
	return r.Value, nil
}

// nodeCause returns the cause inside a redlock.NodeError, which the command
// prints next to the node's address anyway, and says what a node timeout
// means.
func nodeCause(err error, timeout time.Duration) string {
	var nerr net.Error
	if errors.Is(err, redlock.ErrNodeTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout() {
		return fmt.Sprintf("no answer within %v (--node-timeout)", timeout)
	}
	var ne *redlock.NodeError
	if errors.As(err, &ne) {
		err = ne.Err
	}
	return plain(err)
}

// printFlags prints fs's flags as docs/cli.md spells them, with two dashes
// (the flag package accepts both; its PrintDefaults shows one).
func printFlags(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "0s" {
			if name == "string" || name == "value" || name == "" && def != "true" {
				def = strconv.Quote(def)
			}
			line += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintln(w, line)
	})
}

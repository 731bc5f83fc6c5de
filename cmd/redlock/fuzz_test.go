package main

// Fuzz targets for redlock's argument parsing. Each runs its seeds as an
// ordinary test; to fuzz one:
//
//	go test -run '^$' -fuzz '^FuzzParseRun$' -fuzztime 60s ./cmd/redlock

import (
	"errors"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// checkNodes fails t unless nodes are what parseNodes promises: distinct
// host:port addresses without surrounding space and, if list is not "",
// one per comma-separated entry of list, in order.
func checkNodes(t *testing.T, list string, nodes []string) {
	t.Helper()
	if len(nodes) == 0 {
		t.Fatalf("no nodes from %q", list)
	}
	if list != "" {
		entries := strings.Split(list, ",")
		if len(nodes) != len(entries) {
			t.Fatalf("%q gave %q: %d nodes from %d entries", list, nodes, len(nodes), len(entries))
		}
		for i, addr := range nodes {
			if addr != strings.TrimSpace(entries[i]) {
				t.Fatalf("%q gave %q for the entry %q", list, addr, entries[i])
			}
		}
	}
	seen := map[string]bool{}
	for _, addr := range nodes {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" || addr != strings.TrimSpace(addr) {
			t.Fatalf("%q gave %q, not host:port (%v)", list, addr, err)
		}
		if seen[addr] {
			t.Fatalf("%q gave %q twice", list, addr)
		}
		seen[addr] = true
	}
}

// parseNodes never panics, and returns either an error or a list of
// distinct host:port addresses, one per entry.
func FuzzParseNodes(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:6379", "a:1,b:2,c:3", " a:1 , b:2 ", "a:1,a:1", "a:1, a:1", "a:1,,b:2", "", " ", ",",
		"[::1]:6379,[::1]:6380", "::1:6379", "[::1]", "a:", ":1", "a", "a:1:2", "[a:1]:2", "a b:1",
		"redis-a:6379,redis-b:6379,redis-c:6379", "host:port", "a:1,", "\t\n", "[fe80::1%eth0]:6379",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		nodes, err := parseNodes(list)
		if err != nil {
			if nodes != nil {
				t.Fatalf("parseNodes(%q) = %q and %v", list, nodes, err)
			}
			return
		}
		if strings.TrimSpace(list) == "" {
			t.Fatalf("parseNodes(%q) = %q, want an error for no nodes", list, nodes)
		}
		checkNodes(t, list, nodes)
	})
}

// parseRun never panics, and a configuration it accepts keeps every rule
// its errors state: nodes that are distinct host:port addresses, a key, a
// command, a positive ttl, no negative wait or grace, and a node timeout
// under a third of the ttl. Arguments are separated by NUL, which no real
// argument holds.
func FuzzParseRun(f *testing.F) {
	for _, seed := range []struct{ args, envNodes string }{
		{"--nodes\x00a:1,b:2,c:3\x00--key\x00job\x00--\x00true", ""},
		{"--key\x00job\x00--\x00sh\x00-c\x00exit 3", "a:1,b:2,c:3"},
		{"--nodes=a:1\x00--key=k\x00--ttl=1s\x00--node-timeout=100ms\x00--wait=5s\x00--grace=0s\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=150ms\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=600ms\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=-1s\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--node-timeout=0\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--wait=-1ns\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--grace=-1h\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--grace=-1ns\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--grace=0\x00--wait=0\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=300ms\x00--node-timeout=100ms\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=301ms\x00--node-timeout=100ms\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=3ns\x00--node-timeout=1ns\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=4ns\x00--node-timeout=1ns\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=9223372036854775807ns\x00cmd", ""},
		{"--nodes=a:1\x00--key=k\x00--ttl=2ns\x00--node-timeout=1ns\x00cmd", ""},
		{"--nodes=a:1,a:1\x00--key=k\x00cmd", ""},
		{"--nodes=a:1\x00--key=\x00cmd", ""},
		{"--nodes=a:1\x00--key=k", ""},
		{"--nodes=a:1\x00--key=k\x00--user=u\x00--tls\x00--tls-server-name=x\x00cmd", ""},
		{"--bogus\x00cmd", ""},
		{"-h", ""},
		{"--key=k\x00cmd", " "},
		{"", ""},
	} {
		f.Add(seed.args, seed.envNodes, "secret")
	}
	f.Fuzz(func(t *testing.T, joined, nodesEnv, password string) {
		args := strings.Split(joined, "\x00")
		if joined == "" {
			args = nil
		}
		for _, a := range args {
			// These read files; a fuzzer that names /dev/zero would hang.
			if strings.Contains(a, "tls-ca") || strings.Contains(a, "tls-cert") || strings.Contains(a, "tls-key") {
				t.Skip("reads a file")
			}
		}
		getenv := func(name string) string {
			switch name {
			case envNodes:
				return nodesEnv
			case envPassword:
				return password
			}
			return ""
		}
		cfg, err := parseRun(args, getenv, io.Discard)
		if err != nil {
			if cfg != nil {
				t.Fatalf("parseRun(%q) = %+v and %v", args, cfg, err)
			}
			if errors.Is(err, flag.ErrHelp) && !askedForHelp(args) {
				t.Fatalf("parseRun(%q) = %v, but no -h or -help was given", args, err)
			}
			return
		}
		list, ok := nodesFlagValue(args)
		if ok && list == "" {
			list = nodesEnv
		}
		checkNodes(t, list, cfg.nodes)
		switch {
		case cfg.key == "":
			t.Fatalf("parseRun(%q): no key", args)
		case len(cfg.argv) == 0:
			t.Fatalf("parseRun(%q): no command", args)
		case cfg.ttl <= 0, cfg.wait < 0, cfg.grace < 0:
			t.Fatalf("parseRun(%q): ttl %v, wait %v, grace %v", args, cfg.ttl, cfg.wait, cfg.grace)
		case cfg.nodeTimeout <= 0 || cfg.nodeTimeout >= cfg.ttl/3:
			t.Fatalf("parseRun(%q): node timeout %v with ttl %v", args, cfg.nodeTimeout, cfg.ttl)
		}
	})
}

// nodesFlagValue returns the value --nodes gets from args, as the flag
// package reads them (the last one given), and whether args parse with the
// flags parseRun knew when this was written.
func nodesFlagValue(args []string) (string, bool) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nodes := fs.String("nodes", "", "")
	for _, name := range []string{"key", "tls-ca", "tls-cert", "tls-key", "tls-server-name", "user"} {
		fs.String(name, "", "")
	}
	for _, name := range []string{"ttl", "wait", "grace", "node-timeout"} {
		fs.Duration(name, time.Second, "")
	}
	fs.Bool("tls", false, "")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	return *nodes, true
}

// askedForHelp reports whether args hold a -h or -help flag before the
// first non-flag argument or "--", as the flag package finds them: every
// flag but --tls takes a value, from the next argument if not after "=".
func askedForHelp(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return false
		}
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "h" || name == "help" {
			return true
		}
		if name != "tls" && !hasValue {
			i++
		}
	}
	return false
}

package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/redistest"
)

// A cliResult is what one in-process run of a subcommand printed.
type cliResult struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// cli runs the redlock command in process with args and env as its whole
// environment.
func cli(env map[string]string, args ...string) cliResult {
	var stdout, stderr strings.Builder
	start := time.Now()
	code := dispatch(args, func(k string) string { return env[k] }, &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
}

// line returns the report line of the finding on node (or "all") for
// check, failing t unless there is exactly one and it has severity sev.
func (r cliResult) line(t *testing.T, sev severity, node, check string) string {
	t.Helper()
	var found []string
	for l := range strings.SplitSeq(r.stdout, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[1] == node && f[2] == check+":" {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s finding for %s, got %d:\n%s", check, node, len(found), r.stdout)
	}
	if !strings.HasPrefix(found[0], sev.String()+" ") {
		t.Fatalf("want %s for %s %s, got:\n%s\nfull report:\n%s", sev, node, check, found[0], r.stdout)
	}
	return found[0]
}

// has fails t unless s contains every one of subs.
func has(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q\nlacks %q", s, sub)
		}
	}
}

// doctorArgs is doctor on servers, with a short clock sample for tests that
// are not about the clock.
func doctorArgs(servers []*redistest.Server) []string {
	return []string{"doctor", "--nodes", nodesFlag(servers), "--clock-sample", "300ms"}
}

// aof is the arguments of a node with AOF fsynced on every write, in a
// directory of the test's own.
func aof(t *testing.T, fsync string) []string {
	return []string{"--appendonly", "yes", "--appendfsync", fsync, "--dir", t.TempDir()}
}

// startAuth starts a node that refuses unauthenticated clients and waits
// until user (or the default user, for "") can log in with password.
func startAuth(t *testing.T, user, password string, extra ...string) *redistest.Server {
	t.Helper()
	opts := []redis.DialOption{redis.DialPassword(password)}
	if user != "" {
		opts = append(opts, redis.DialUsername(user))
	}
	return redistest.StartWith(t, opts, extra...)
}

func TestDoctorSound(t *testing.T) {
	t.Parallel()
	var open, locked []*redistest.Server
	for range 3 {
		open = append(open, redistest.Start(t, aof(t, "always")...))
		locked = append(locked, startAuth(t, "", "pw", append(aof(t, "always"), "--requirepass", "pw")...))
	}

	// Open nodes: sound for the guarantees, with security advice that does
	// not change the exit status.
	r := cli(nil, "doctor", "--nodes", nodesFlag(open))
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, s := range open {
		has(t, r.line(t, sevOK, s.Addr, "version"), "Redis 7.")
		has(t, r.line(t, sevOK, s.Addr, "persistence"), "appendonly yes, appendfsync always")
		has(t, r.line(t, sevOK, s.Addr, "eviction"), "maxmemory 0 (no limit) and noeviction")
		has(t, r.line(t, sevOK, s.Addr, "role"), "master without replicas")
		has(t, r.line(t, sevOK, s.Addr, "clock"), "within 1%")
		has(t, r.line(t, sevWarn, s.Addr, "auth"), "without a password", "Fix: set requirepass")
		has(t, r.line(t, sevOK, s.Addr, "tls"), "loopback")
	}
	has(t, r.line(t, sevOK, "all", "count"), "3 nodes, quorum 2: tolerates 1 failure")
	has(t, r.stdout, "0 FAIL, 3 WARN")

	// With passwords there is nothing to say.
	r = cli(map[string]string{envPassword: "pw"}, "doctor", "--nodes", nodesFlag(locked))
	if r.code != 0 || strings.Contains(r.stdout, "WARN ") {
		t.Fatalf("exit %d, want 0 and no WARN\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, s := range locked {
		has(t, r.line(t, sevOK, s.Addr, "auth"), "requires a password")
	}

	// --quiet leaves the summary only.
	r = cli(map[string]string{envPassword: "pw"}, "doctor", "--quiet", "--nodes", nodesFlag(locked))
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("--quiet: exit %d, want 0 and one line\n%s", r.code, r.stdout)
	}
}

func TestDoctorPersistence(t *testing.T) {
	t.Parallel()
	none := redistest.Start(t) // --appendonly no, --save ""
	everysec := redistest.Start(t, aof(t, "everysec")...)
	no := redistest.Start(t, aof(t, "no")...)
	always := redistest.Start(t, aof(t, "always")...)
	servers := []*redistest.Server{none, everysec, no, always, redistest.Start(t, aof(t, "always")...)}

	r := cli(nil, doctorArgs(servers)...)
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevFail, none.Addr, "persistence"), "appendonly no: a restart loses every lock key", "lets a rival take a lock",
		"keep a crashed node down more than 30s (--max-ttl", "RestartSec=31", "--delayed-restart")
	has(t, r.line(t, sevFail, everysec.Addr, "persistence"), "appendfsync everysec", "Fix: appendonly yes and appendfsync always")
	has(t, r.line(t, sevFail, no.Addr, "persistence"), "appendfsync no")
	r.line(t, sevOK, always.Addr, "persistence")

	// The delay follows --max-ttl.
	r = cli(nil, append(doctorArgs(servers), "--max-ttl", "2m")...)
	has(t, r.line(t, sevFail, none.Addr, "persistence"), "more than 2m0s", "RestartSec=121")

	// With --delayed-restart the hazard is a warning, which names what is
	// still lost: the fencing counters.
	r = cli(nil, append(doctorArgs(servers), "--delayed-restart", "--max-ttl", "10s")...)
	if r.code != 0 {
		t.Errorf("--delayed-restart: exit %d, want 0\n%s", r.code, r.stdout)
	}
	has(t, r.line(t, sevWarn, none.Addr, "persistence"), "stays down more than 10s", "fencing counters are lost")
	r.line(t, sevWarn, everysec.Addr, "persistence")
}

func TestDoctorEviction(t *testing.T) {
	t.Parallel()
	allkeys := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")
	volatile := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-ttl")
	unlimited := redistest.Start(t, "--maxmemory-policy", "allkeys-lru") // maxmemory 0
	noeviction := redistest.Start(t, "--maxmemory", "10mb", "--maxmemory-policy", "noeviction")
	servers := []*redistest.Server{allkeys, volatile, unlimited, noeviction, redistest.Start(t)}

	r := cli(nil, doctorArgs(servers)...)
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevFail, allkeys.Addr, "eviction"), "maxmemory 10.00M with allkeys-lru", "evicts any key", "Fix: CONFIG SET maxmemory-policy noeviction")
	has(t, r.line(t, sevFail, volatile.Addr, "eviction"), "volatile-ttl", "lock keys always have a ttl", "shortest ttls first", "noeviction")
	has(t, r.line(t, sevOK, unlimited.Addr, "eviction"), "maxmemory 0 (no limit): nothing is evicted, so allkeys-lru never applies")
	has(t, r.line(t, sevOK, noeviction.Addr, "eviction"), "maxmemory 10.00M with noeviction")
}

func TestDoctorReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	other := redistest.Start(t)
	if !pollFor(10*time.Second, func() bool {
		c, err := redis.Dial("tcp", master.Addr, redis.DialReadTimeout(time.Second))
		if err != nil {
			return false
		}
		defer c.Close()
		info, _ := redis.String(c.Do("INFO", "replication"))
		return strings.Contains(info, "connected_slaves:1")
	}) {
		t.Fatalf("the replica never connected\n%s", replica.Log())
	}

	r := cli(nil, doctorArgs([]*redistest.Server{master, replica, other})...)
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevFail, replica.Addr, "role"), "is a replica of "+master.Addr+", which is also in the list", "not an independent master", "REPLICAOF NO ONE")
	has(t, r.line(t, sevWarn, master.Addr, "role"), "master with 1 replica(s)", "failover")
	r.line(t, sevOK, other.Addr, "role")
}

func TestDoctorSameServerTwice(t *testing.T) {
	t.Parallel()
	s, other := redistest.Start(t), redistest.Start(t)
	alias := net.JoinHostPort("localhost", strconv.Itoa(s.Port))
	nodes := strings.Join([]string{s.Addr, other.Addr, alias}, ",")

	r := cli(nil, "doctor", "--nodes", nodes, "--clock-sample", "300ms")
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevFail, alias, "identity"), "is the same server as "+s.Addr, "run_id", "counts twice toward the majority")
	if strings.Count(r.stdout, "identity:") != 1 {
		t.Errorf("want one identity finding\n%s", r.stdout)
	}
}

func TestDoctorPassword(t *testing.T) {
	t.Parallel()
	servers := []*redistest.Server{
		startAuth(t, "", "pw", "--requirepass", "pw"),
		startAuth(t, "", "pw", "--requirepass", "pw"),
		startAuth(t, "", "pw", "--requirepass", "pw"),
	}
	r := cli(nil, doctorArgs(servers)...)
	if r.code != exitUnsound {
		t.Fatalf("without %s: exit %d, want %d\n%s", envPassword, r.code, exitUnsound, r.stdout)
	}
	for _, s := range servers {
		has(t, r.line(t, sevFail, s.Addr, "reach"), "NOAUTH", "Fix: set REDLOCK_PASSWORD")
	}
	has(t, r.line(t, sevFail, "all", "quorum"), "only 0 of 3 nodes answered")

	r = cli(map[string]string{envPassword: "wrong"}, doctorArgs(servers)...)
	has(t, r.line(t, sevFail, servers[0].Addr, "reach"), "WRONGPASS", "Fix: check REDLOCK_PASSWORD")

	// A password for a node without one is refused too.
	open := redistest.Start(t)
	r = cli(map[string]string{envPassword: "pw"}, "doctor", "--nodes", open.Addr, "--clock-sample", "300ms")
	has(t, r.line(t, sevFail, open.Addr, "reach"), "without any password configured", "Fix: the node's default user has no password")

	r = cli(map[string]string{envPassword: "pw"}, doctorArgs(servers)...)
	has(t, r.line(t, sevOK, servers[0].Addr, "auth"), "requires a password")
}

func TestDoctorACLWithoutPermissions(t *testing.T) {
	t.Parallel()
	// AOF is on, so doctor must read appendfsync, which takes CONFIG GET.
	users := append(aof(t, "always"), "--user", "default", "off",
		"--user", "noconfig", "on", ">pw", "+@all", "-config",
		"--user", "noinfo", "on", ">pw", "+@all", "-info", "-time",
		"--user", "doctor", "on", ">pw", "+ping", "+info", "+time", "+config|get")
	var servers []*redistest.Server
	for range 3 {
		servers = append(servers, startAuth(t, "doctor", "pw", users...))
	}
	env := map[string]string{envPassword: "pw"}
	n := servers[0].Addr

	// A refused command makes its check UNKNOWN, with the permission it
	// needs, and the rest is judged: here all OK, so exit 0.
	r := cli(env, append(doctorArgs(servers), "--user", "noconfig")...)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\n%s", r.code, r.stdout)
	}
	has(t, r.line(t, sevUnknown, n, "persistence"), "appendfsync unknown", "refused CONFIG GET", "NOPERM", "+config|get")
	r.line(t, sevOK, n, "version")
	r.line(t, sevOK, n, "clock")
	has(t, r.line(t, sevOK, n, "auth"), "requires a password")

	r = cli(env, append(doctorArgs(servers), "--user", "noinfo")...)
	has(t, r.line(t, sevUnknown, n, "info"), "version, persistence, eviction, role and identity unknown", "refused INFO", "NOPERM", "+info")
	has(t, r.line(t, sevUnknown, n, "clock"), "refused TIME", "NOPERM", "+time")

	// The permissions doctor asks for are enough.
	r = cli(env, append(doctorArgs(servers), "--user", "doctor")...)
	if r.code != 0 {
		t.Errorf("with +ping +info +time +config|get: exit %d, want 0\n%s", r.code, r.stdout)
	}
}

func TestDoctorClockRate(t *testing.T) {
	t.Parallel()
	fast := redistest.StartClockRate(t, 1.5)
	slow := redistest.StartClockRate(t, 0.5)
	normal := redistest.Start(t)

	r := cli(nil, "doctor", "--nodes", nodesFlag([]*redistest.Server{fast, slow, normal}), "--clock-sample", "1s")
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	for s, want := range map[*redistest.Server]float64{fast: 1.5, slow: 0.5, normal: 1} {
		i := strings.Index(r.stdout, s.Addr+"  clock: runs at ")
		if i < 0 {
			t.Errorf("no clock rate for %s\n%s", s.Addr, r.stdout)
			continue
		}
		var rate float64
		if _, err := fmt.Sscanf(r.stdout[i:], s.Addr+"  clock: runs at %f", &rate); err != nil || rate < want*0.98 || rate > want*1.02 {
			t.Errorf("node at %v×: reported %v (%v)\n%s", want, rate, err, r.stdout)
		}
	}
	has(t, r.line(t, sevFail, fast.Addr, "clock"), "50% faster", "expires lock keys before", "slew")
	has(t, r.line(t, sevWarn, slow.Addr, "clock"), "50% slower", "safe")
	r.line(t, sevOK, normal.Addr, "clock")

	// A drift factor above the node's rate accepts it.
	r = cli(nil, "doctor", "--nodes", fast.Addr, "--clock-sample", "500ms", "--drift-factor", "0.6")
	r.line(t, sevOK, fast.Addr, "clock")
}

func TestDoctorCount(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 4)
	for _, c := range []struct {
		n     int
		sev   severity
		wants string
	}{
		{1, sevFail, "1 node(s), quorum 1: no node may fail"},
		{2, sevFail, "2 node(s), quorum 2: no node may fail"},
		{3, sevOK, "3 nodes, quorum 2: tolerates 1 failure"},
		{4, sevWarn, "4 nodes, quorum 3: tolerates 1 failure(s), no more than 3 nodes would"},
	} {
		r := cli(nil, doctorArgs(servers[:c.n])...)
		has(t, r.line(t, c.sev, "all", "count"), c.wants)
	}
}

func TestDoctorUnreachable(t *testing.T) {
	t.Parallel()
	up := redistest.Start(t)
	frozen := redistest.StartFrozen(t)
	refused := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	nodes := strings.Join([]string{up.Addr, frozen.Addr(), refused}, ",")

	r := cli(nil, "doctor", "--nodes", nodes, "--clock-sample", "300ms", "--node-timeout", "300ms")
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevFail, frozen.Addr(), "reach"), "no answer within 300ms")
	has(t, r.line(t, sevFail, refused, "reach"), "connection refused", "Fix: start the node")
	has(t, r.line(t, sevFail, "all", "quorum"), "only 1 of 3 nodes answered, 2 needed")
	r.line(t, sevOK, up.Addr, "version")
	// PING, then the slowest node's clock sample; a frozen node costs one
	// node timeout, in parallel with the rest.
	if r.elapsed > 3*time.Second {
		t.Errorf("doctor took %v with a frozen node", r.elapsed)
	}
}

func TestDoctorTLS(t *testing.T) {
	t.Parallel()
	f := redistest.GenerateTLS(t)
	var servers []*redistest.Server
	for range 3 {
		servers = append(servers, redistest.StartTLS(t, f))
	}
	// Handshakes are slow under the race detector on a busy machine.
	args := append(doctorArgs(servers), "--node-timeout", "10s")
	r := cli(nil, append(args, "--tls-ca", f.CACert, "--tls-cert", clientPEM(t, f, "cert"), "--tls-key", clientPEM(t, f, "key"))...)
	has(t, r.line(t, sevOK, servers[0].Addr, "tls"), "connected with TLS")
	r.line(t, sevOK, servers[0].Addr, "version")

	// Without the CA, the certificate is not trusted.
	r = cli(nil, append(args, "--tls")...)
	has(t, r.line(t, sevFail, servers[0].Addr, "reach"), "certificate", "--tls-ca")
}

// TestDoctorPlainTCPToRemote needs an address of this host that is not a
// loopback one: the TLS advice is for traffic that leaves the host.
func TestDoctorPlainTCPToRemote(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	s := redistest.Start(t, "--bind", "127.0.0.1", ip)
	remote := net.JoinHostPort(ip, strconv.Itoa(s.Port))
	r := cli(nil, "doctor", "--nodes", remote, "--clock-sample", "300ms")
	has(t, r.line(t, sevWarn, remote, "tls"), "plain TCP to a non-loopback address", "Fix: serve TLS")
	r = cli(nil, "doctor", "--nodes", s.Addr, "--clock-sample", "300ms")
	has(t, r.line(t, sevOK, s.Addr, "tls"), "loopback address")
}

// nonLoopbackIP returns an IPv4 address of this host that is not loopback,
// or skips t.
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("listing interfaces: %v", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	t.Skip("this host has no non-loopback IPv4 address")
	return ""
}

// A version older than 7.0 cannot be tested for real here (Debian ships
// 7.0); this checks the finding on parsed versions.
func TestDoctorVersionFinding(t *testing.T) {
	for v, want := range map[string]severity{
		"7.0.15": sevOK, "7.0.0": sevOK, "7.2.4": sevOK, "8.0.2": sevOK, "255.255.255": sevOK,
		"6.2.14": sevFail, "6.0.0": sevFail, "5.0.7": sevFail, "2.8.24": sevFail,
		"": sevUnknown, "seven": sevFail, "7": sevFail, "7.x.1": sevFail, "-7.0.0": sevFail,
	} {
		f := checkVersion("n:1", map[string]string{"redis_version": v})
		if f.sev != want {
			t.Errorf("redis_version %q: %s (%s), want %s", v, f.sev, f.what, want)
		}
		if want != sevOK && f.fix == "" {
			t.Errorf("redis_version %q: FAIL without a fix", v)
		}
	}
	f := checkVersion("n:1", map[string]string{"redis_version": "6.2.14"})
	has(t, f.what, "Redis 6.2.14", "PEXPIRE ... GT", "every extension fails")
	has(t, f.fix, "Redis 7.0 or later")
}

func TestDoctorClockFinding(t *testing.T) {
	cfg := &doctorConfig{driftFactor: 0.01, nodeTimeout: time.Second}
	for _, c := range []struct {
		rate, unc float64
		want      severity
		says      string
	}{
		{1, 0.0001, sevOK, "within 1%"},
		{1.009, 0.0001, sevOK, "within 1%"},
		{1.011, 0.0001, sevFail, "faster"},
		{0.989, 0.0001, sevWarn, "slower"},
		{1, 0.006, sevFail, "could not check the clock rate"},
	} {
		f := checkClock(cfg, nodeFacts{addr: "n:1", clock: clockRate{rate: c.rate, uncertainty: c.unc, over: time.Second}})
		if f.sev != c.want || !strings.Contains(f.what, c.says) {
			t.Errorf("rate %v ± %v: %s %q, want %s saying %q", c.rate, c.unc, f.sev, f.what, c.want, c.says)
		}
	}
}

func TestDoctorBadUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "no nodes"},
		{[]string{"--nodes", "a"}, nil, "want host:port"},
		{nil, map[string]string{envNodes: "a:1,a:1"}, "listed twice"},
		{[]string{"--nodes", "a:1", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"--nodes", "a:1", "--max-ttl", "0s"}, nil, "--max-ttl"},
		{[]string{"--nodes", "a:1", "--drift-factor", "0"}, nil, "--drift-factor 0 must lie in (0, 1)"},
		{[]string{"--nodes", "a:1", "--drift-factor", "NaN"}, nil, "--drift-factor"},
		{[]string{"--nodes", "a:1", "--clock-sample", "10ms"}, nil, "--clock-sample"},
		{[]string{"--nodes", "a:1", "--clock-sample", "2m"}, nil, "--clock-sample"},
		{[]string{"--nodes", "a:1", "--node-timeout", "-1s"}, nil, "--node-timeout"},
		{[]string{"--nodes", "a:1", "--tls-key", "k.pem"}, nil, "go together"},
		{[]string{"--nodes", "a:1", "--tls-ca", "/nonexistent.pem"}, nil, "--tls-ca"},
		{[]string{"--bogus"}, nil, "bad flags (see redlock doctor -h)"},
	} {
		r := cli(c.env, append([]string{"doctor"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("doctor %q: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
	if r := cli(nil, "doctor", "-h"); r.code != 0 || !strings.Contains(r.stderr, "+config|get") {
		t.Errorf("doctor -h: exit %d, stderr %q", r.code, r.stderr)
	}
}

// clientPEM writes the certificate ("cert") or the key ("key") that
// f.Client presents to a PEM file, for --tls-cert and --tls-key.
func clientPEM(t *testing.T, f *redistest.TLSFiles, which string) string {
	t.Helper()
	cert := f.Client.Certificates[0]
	block := &pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}
	if which == "key" {
		der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	path := filepath.Join(t.TempDir(), which+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
)

// exitUnsound is redlock doctor's status when it found a problem, or could
// not check something it needs to vouch for (EX_CONFIG).
const exitUnsound = 78

const doctorUsage = `usage: redlock doctor [flags]

Checks every node in --nodes against the assumptions that Redlock's
guarantees rest on (docs/safety.md) and prints one line per finding: OK,
WARN, FAIL or UNKNOWN, what was found and why it matters, and the fix.
UNKNOWN is a check the server would not let doctor make: a refused command
(CONFIG on managed services, INFO) or a field missing from INFO. Doctor says
why, what to verify by hand, and judges the rest.

Exit codes: 0 no FAIL (WARNs, such as the security advice, and UNKNOWNs do
not count); 64 bad usage; 78 at least one FAIL, including an unreachable
node and a check that failed for another reason than a refusal.

The user needs +ping +info +time, and +config|get on nodes with appendonly
yes (to read appendfsync); no key access.

Environment: REDLOCK_NODES (default for --nodes), REDLOCK_PASSWORD (the
password for --user, or for the default user).

Flags:
`

type doctorConfig struct {
	nodes          []string
	conn           *conn
	maxTTL         time.Duration
	delayedRestart bool
	driftFactor    float64
	clockSample    time.Duration
	nodeTimeout    time.Duration
	quiet          bool
	json           bool
}

// doctorMain parses doctor's flags, examines the nodes and prints the
// findings.
func doctorMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseDoctor(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock doctor: %v\n", err)
		return exitUsage
	}
	findings := diagnose(cfg, examine(cfg))
	return report(stdout, cfg, findings)
}

func parseDoctor(args []string, getenv func(string) string, stderr io.Writer) (*doctorConfig, error) {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, doctorUsage)
		printFlags(fs, stderr)
	}
	cf := addConnFlags(fs)
	cfg := &doctorConfig{}
	fs.DurationVar(&cfg.maxTTL, "max-ttl", 30*time.Second, "the largest lock ttl any client uses; a node without safe persistence must stay down longer than this after a crash")
	fs.BoolVar(&cfg.delayedRestart, "delayed-restart", false, "crashed nodes are kept down longer than --max-ttl before they restart, so missing persistence is a warning, not a failure")
	fs.Float64Var(&cfg.driftFactor, "drift-factor", 0.01, "the clients' drift factor (WithDriftFactor): the largest clock-rate difference they allow, in (0, 1)")
	fs.DurationVar(&cfg.clockSample, "clock-sample", 1500*time.Millisecond, "how long to watch each node's clock (TIME) against this host's, 100ms to 1m; up to 4 times longer over slow round trips")
	fs.DurationVar(&cfg.nodeTimeout, "node-timeout", time.Second, "bound on each command to a node, up to 1m")
	fs.BoolVar(&cfg.quiet, "quiet", false, "print only WARN, FAIL and UNKNOWN findings, and the summary")
	fs.BoolVar(&cfg.json, "json", false, "print the findings and the summary as one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if cfg.nodes, err = cf.nodeList(getenv); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q (doctor takes flags only)", fs.Arg(0))
	case len(cfg.nodes) > 64:
		return nil, fmt.Errorf("%d nodes: at most 64 are supported", len(cfg.nodes))
	case cfg.maxTTL <= 0:
		return nil, fmt.Errorf("--max-ttl %v must be positive", cfg.maxTTL)
	case !(cfg.driftFactor > 0 && cfg.driftFactor < 1): // also rejects NaN
		return nil, fmt.Errorf("--drift-factor %v must lie in (0, 1)", cfg.driftFactor)
	case cfg.clockSample < 100*time.Millisecond || cfg.clockSample > time.Minute:
		return nil, fmt.Errorf("--clock-sample %v must lie between 100ms and 1m", cfg.clockSample)
	case cfg.nodeTimeout <= 0 || cfg.nodeTimeout > time.Minute:
		return nil, fmt.Errorf("--node-timeout %v must be positive and at most 1m", cfg.nodeTimeout)
	}
	if cfg.conn, err = cf.dial(getenv); err != nil {
		return nil, err
	}
	return cfg, nil
}

// nodeFacts is what doctor learned from one node. Each check has its own
// error, so that one refused command costs only the checks that need it.
type nodeFacts struct {
	addr    string
	err     error             // PING failed: nothing else was asked
	info    map[string]string // INFO's default sections
	infoErr error

	appendfsync string // asked only when AOF is on
	fsyncErr    error

	clock    clockRate
	clockErr error

	open     bool  // answered PING on a connection without credentials
	openErr  error // the check could not be made
	loopback bool  // every address of the node's host is a loopback one
}

// examine asks every node, all at once, what diagnose needs to know. It
// takes about --clock-sample (at most clockStretch of them), plus a few
// --node-timeouts at most.
func examine(cfg *doctorConfig) []nodeFacts {
	pools := cfg.conn.pools(cfg.nodes, cfg.nodeTimeout)
	ports := make([]redlock.Pool, len(pools))
	for i, p := range pools {
		defer p.Close()
		ports[i] = p
	}
	facts := make([]nodeFacts, len(cfg.nodes))
	for i, addr := range cfg.nodes {
		facts[i].addr = addr
	}

	client, err := redlock.New(ports, redlock.WithNodeTimeout(cfg.nodeTimeout))
	if err != nil { // parseDoctor rules out what New refuses
		for i := range facts {
			facts[i].err = err
		}
		return facts
	}
	health, _ := client.Ping(context.Background())
	_ = client.Close() // waits for the calls to nodes that timed out

	var wg sync.WaitGroup
	for i, p := range pools {
		f := &facts[i]
		if f.err = health.Nodes[i].Err; f.err != nil {
			continue
		}
		wg.Go(func() { examineNode(cfg, p, f) })
	}
	wg.Wait()
	return facts
}

// examineNode fills in f for a node that answered PING.
func examineNode(cfg *doctorConfig, p redlock.Pool, f *nodeFacts) {
	var wg sync.WaitGroup
	wg.Go(func() { f.clock, f.clockErr = sampleClock(p, cfg.nodeTimeout, cfg.clockSample, cfg.driftFactor) })
	wg.Go(func() { f.open, f.openErr = answersWithoutPassword(f.addr, cfg.conn, cfg.nodeTimeout) })
	wg.Go(func() { f.loopback = isLoopback(f.addr, cfg.nodeTimeout) })

	var reply any
	if reply, f.infoErr = call(p, cfg.nodeTimeout, "INFO"); f.infoErr == nil {
		f.info, f.infoErr = parseInfo(reply)
	} else if refused(f.infoErr) {
		f.info, f.infoErr = infoBySection(p, cfg.nodeTimeout, f.infoErr)
	}
	if f.info["aof_enabled"] == "1" {
		if reply, f.fsyncErr = call(p, cfg.nodeTimeout, "CONFIG", "GET", "appendfsync"); f.fsyncErr == nil {
			f.appendfsync, f.fsyncErr = configValue(reply, "appendfsync")
		}
	}
	wg.Wait()
}

// infoSections are the INFO sections the checks read.
var infoSections = []string{"server", "persistence", "memory", "replication"}

// infoBySection asks for each section on its own, for a server that refuses
// the whole of INFO but may allow parts of it. It returns what it got, or
// whole, the first refusal, if it got nothing.
func infoBySection(p redlock.Pool, timeout time.Duration, whole error) (map[string]string, error) {
	info := map[string]string{}
	got := false
	for _, sec := range infoSections {
		reply, err := call(p, timeout, "INFO", sec)
		if err != nil {
			continue
		}
		part, err := parseInfo(reply)
		if err != nil {
			continue
		}
		got = true
		maps.Copy(info, part)
	}
	if !got {
		return nil, whole
	}
	return info, nil
}

// refused reports whether err is the server declining a command: renamed
// or disabled (unknown command), or not allowed to the user (NOPERM). It
// is not a failure of the node, and the check that needed the command is
// unknown, not failed.
func refused(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "NOPERM") ||
		strings.Contains(msg, "unknown subcommand") || strings.Contains(msg, "command not allowed")
}

// parseInfo reads INFO's "field:value" lines.
func parseInfo(reply any) (map[string]string, error) {
	text, err := redis.String(reply, nil)
	if err != nil {
		return nil, fmt.Errorf("unexpected reply to INFO: %v", err)
	}
	info := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

// configValue reads name's value from a CONFIG GET reply: [name, value].
func configValue(reply any, name string) (string, error) {
	kv, err := redis.StringMap(reply, nil)
	if err != nil {
		return "", fmt.Errorf("unexpected reply to CONFIG GET %s: %v", name, err)
	}
	v, ok := kv[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s: no such parameter", name)
	}
	return v, nil
}

// A clockRate is how fast a node's clock ran, in node seconds per second of
// this host's monotonic clock, give or take uncertainty, measured over a span
// of this host's time.
type clockRate struct {
	rate, uncertainty float64
	over              time.Duration
}

// clockReads is how many TIME readings sampleClock takes at each end of its
// span, keeping the one with the shortest round trip.
const clockReads = 3

// clockStretch bounds how far sampleClock stretches its span when the round
// trips are too slow for the precision it wants.
const clockStretch = 4

// sampleClock reads the node's TIME at the start and the end of a span of
// at least sample on this host's monotonic clock, and compares the two
// spans.
//
// Redis expires keys by its wall clock, which TIME reports, and the holder
// counts validity on its monotonic clock; the drift factor df bounds how much
// faster the first may run (docs/safety.md, assumption 1). Each reading is
// dated at the middle of its round trip, so it is off by at most half the
// round trip: the uncertainty of the rate is the two half round trips over
// the span. While that is over a quarter of df, sampleClock reads again a
// sample later, up to clockStretch samples in all.
func sampleClock(p redlock.Pool, timeout, sample time.Duration, df float64) (clockRate, error) {
	first, err := readClock(p, timeout)
	if err != nil {
		return clockRate{}, err
	}
	var c clockRate
	for k := 1; k <= clockStretch; k++ {
		time.Sleep(time.Until(first.local.Add(time.Duration(k) * sample)))
		last, err := readClock(p, timeout)
		if err != nil {
			return clockRate{}, err
		}
		span := last.local.Sub(first.local) // monotonic
		c = clockRate{
			rate:        float64(last.node.Sub(first.node)) / float64(span),
			uncertainty: float64((first.rtt+last.rtt)/2+time.Microsecond) / float64(span), // TIME has microseconds
			over:        span,
		}
		if c.uncertainty <= df/4 {
			break
		}
	}
	return c, nil
}

type clockReading struct {
	local time.Time // this host's clock, monotonic reading included
	node  time.Time // the node's TIME
	rtt   time.Duration
}

// readClock returns the reading with the shortest round trip of clockReads.
func readClock(p redlock.Pool, timeout time.Duration) (clockReading, error) {
	var best clockReading
	for i := range clockReads {
		before := time.Now()
		reply, err := call(p, timeout, "TIME")
		rtt := time.Since(before)
		if err != nil {
			return clockReading{}, err
		}
		parts, err := redis.Int64s(reply, nil)
		if err != nil || len(parts) != 2 {
			return clockReading{}, fmt.Errorf("unexpected reply to TIME: %v", reply)
		}
		if i == 0 || rtt < best.rtt {
			best = clockReading{local: before.Add(rtt / 2), node: time.Unix(parts[0], parts[1]*1000), rtt: rtt}
		}
	}
	return best, nil
}

// answersWithoutPassword reports whether the node answers PING on a
// connection that has not authenticated: TLS as configured, no user, no
// password.
func answersWithoutPassword(addr string, c *conn, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	opts := append([]redis.DialOption{redis.DialConnectTimeout(timeout), redis.DialTLSHandshakeTimeout(timeout),
		redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout)}, c.tlsOpts...)
	rc, err := redis.DialContext(ctx, "tcp", addr, opts...)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	_, err = redis.DoContext(rc, ctx, "PING")
	var rerr redis.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &rerr) && strings.HasPrefix(string(rerr), "NOAUTH"):
		return false, nil
	}
	return false, err
}

// isLoopback reports whether addr's host is, or resolves only to, loopback
// addresses. A name that does not resolve in time counts as remote.
func isLoopback(addr string, timeout time.Duration) bool {
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// A severity ranks a finding. Only FAIL changes doctor's exit status.
type severity int

const (
	sevOK      severity = iota
	sevWarn             // advice; the guarantees hold
	sevFail             // an assumption of docs/safety.md does not hold, or could not be checked
	sevUnknown          // the server refused what the check needs: verify it by hand
)

func (s severity) String() string { return [...]string{"OK", "WARN", "FAIL", "UNKNOWN"}[s] }

// A finding is one line of doctor's report.
type finding struct {
	sev   severity
	node  string // the node's address; "" for the deployment as a whole
	check string // what was checked: "version", "persistence", ...
	what  string // what doctor found, and why it matters
	fix   string // what to do about it; "" for OK
}

// diagnose turns what examine found into findings: each node's in the order
// of --nodes, then the deployment's.
func diagnose(cfg *doctorConfig, facts []nodeFacts) []finding {
	var out []finding
	add := func(sev severity, node, check, what, fix string) {
		out = append(out, finding{sev: sev, node: node, check: check, what: what, fix: fix})
	}
	quorum := len(facts)/2 + 1
	up := 0
	firstByRunID := map[string]string{}
	listed := map[string]bool{}
	for _, f := range facts {
		listed[f.addr] = true
	}

	for _, f := range facts {
		n := f.addr
		if f.err != nil {
			add(sevFail, n, "reach", "did not answer PING: "+firstSentence(nodeCause(f.err, cfg.nodeTimeout))+"; no other check was made on it",
				reachFix(f.err))
			continue
		}
		up++
		if f.infoErr != nil && refused(f.infoErr) {
			add(sevUnknown, n, "info", "version, persistence, eviction, role and identity unknown: the server refused INFO ("+nodeCause(f.infoErr, cfg.nodeTimeout)+")",
				unknownFix(f.infoErr, "+info", "check in the provider's settings or console: Redis 7.0 or later, appendonly yes with appendfsync always, maxmemory-policy noeviction, no replica among the nodes, each node listed once"))
		} else if f.infoErr != nil {
			add(sevFail, n, "info", "could not check version, persistence, eviction, role or identity: INFO failed: "+nodeCause(f.infoErr, cfg.nodeTimeout),
				permFix(f.infoErr, "+info"))
		} else {
			out = append(out, checkVersion(n, f.info))
			out = append(out, checkPersistence(cfg, f))
			out = append(out, checkEviction(n, f.info))
			out = append(out, checkRole(n, f.info, listed))
			if id := f.info["run_id"]; id == "" {
				add(sevUnknown, n, "identity", "INFO gave no run_id, so doctor cannot tell whether another entry is the same server",
					"make sure no server is listed twice under two names")
			} else {
				if first, ok := firstByRunID[id]; ok {
					add(sevFail, n, "identity", fmt.Sprintf("is the same server as %s (run_id %s…): one server listed twice counts twice toward the majority", first, id[:min(8, len(id))]),
						"list each server once, under one name")
				} else {
					firstByRunID[id] = n
				}
			}
		}
		out = append(out, checkClock(cfg, f))
		out = append(out, checkSecurity(cfg, f)...)
	}

	switch n := len(facts); {
	case n < 3:
		add(sevFail, "", "count", fmt.Sprintf("%d node(s), quorum %d: no node may fail, so this is no more available than one Redis", n, quorum),
			"use 3 or 5 independent masters")
	case n%2 == 0:
		add(sevWarn, "", "count", fmt.Sprintf("%d nodes, quorum %d: tolerates %d failure(s), no more than %d nodes would; the extra node is one more that can fail", n, quorum, n-quorum, n-1),
			fmt.Sprintf("use an odd count: %d or %d", n-1, n+1))
	default:
		add(sevOK, "", "count", fmt.Sprintf("%d nodes, quorum %d: tolerates %d failure(s)", n, quorum, n-quorum), "")
	}
	if up < quorum {
		add(sevFail, "", "quorum", fmt.Sprintf("only %d of %d nodes answered, %d needed: no lock can be granted now", up, len(facts), quorum),
			"bring the failed nodes back (see their reach findings)")
	}
	return out
}

func reachFix(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "DENIED"):
		return "the node is in protected mode, which takes only loopback clients while the default user has no password: set one (requirepass, or ACL users) and pass it in REDLOCK_PASSWORD"
	case strings.Contains(msg, "NOAUTH"):
		return "set REDLOCK_PASSWORD to the node's password, and --user for an ACL user"
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"):
		return "check REDLOCK_PASSWORD, and --user, against the node's users"
	case strings.Contains(msg, "without any password configured"):
		return "the node's default user has no password: give it one (requirepass), or unset REDLOCK_PASSWORD"
	case strings.Contains(msg, "certificate"), strings.Contains(msg, "tls:"):
		return "check --tls-ca, --tls-server-name and --tls-cert/--tls-key against the node's certificate"
	}
	return "start the node, or correct its address; check firewalls, and --tls if it serves TLS only"
}

// firstSentence shortens a long error, such as protected mode's
// paragraph, to its first sentence.
func firstSentence(msg string) string {
	if i := strings.Index(msg, ". "); i > 0 && len(msg) > 200 {
		return msg[:i] + " […]"
	}
	return msg
}

// unknownFix is the fix for a check the server refused: the permission,
// if the user lacks it, else what to verify by hand.
func unknownFix(err error, perm, byHand string) string {
	if strings.Contains(err.Error(), "NOPERM") {
		return permFix(err, perm) + "; or " + byHand
	}
	return byHand
}

// permFix is the fix for a refused command: the ACL permissions it needs,
// if the refusal was NOPERM.
func permFix(err error, perm string) string {
	if strings.Contains(err.Error(), "NOPERM") {
		return fmt.Sprintf("grant the user %s (doctor needs +ping +info +time, and +config|get where appendonly is yes: ACL SETUSER <user> +ping +info +time +config|get)", perm)
	}
	return "rerun doctor; if it persists, check the node's log"
}

// minVersion is the oldest Redis that Extend works on: its script uses
// PEXPIRE ... GT, new in 7.0.
var minVersion = [2]int{7, 0}

func checkVersion(node string, info map[string]string) finding {
	v := info["redis_version"]
	major, minor, ok := parseVersion(v)
	switch {
	case v == "":
		return finding{sevUnknown, node, "version", "INFO gave no redis_version", "check in the provider's settings that the nodes run Redis 7.0 or later"}
	case !ok:
		return finding{sevFail, node, "version", fmt.Sprintf("could not check version: INFO gave redis_version %q", v), "run Redis 7.0 or later"}
	case major < minVersion[0] || major == minVersion[0] && minor < minVersion[1]:
		return finding{sevFail, node, "version", fmt.Sprintf("Redis %s: Extend needs PEXPIRE ... GT (Redis 7.0), so every extension fails here and locks held through Do or redlock run are lost", v),
			"upgrade to Redis 7.0 or later"}
	}
	return finding{sevOK, node, "version", "Redis " + v, ""}
}

// parseVersion reads "major.minor" from a version such as "7.0.15".
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil && major >= 0 && minor >= 0
}

// checkPersistence: a node that restarts without the keys it had lets a
// rival take it while the holder still counts it (docs/safety.md,
// assumption 4). Only an AOF fsynced on every write keeps them all.
func checkPersistence(cfg *doctorConfig, f nodeFacts) finding {
	n := f.addr
	var hazard string
	switch {
	case f.info["aof_enabled"] == "":
		return finding{sevUnknown, n, "persistence", "INFO gave no aof_enabled",
			fmt.Sprintf("check in the provider's settings that every write is fsynced (appendonly yes, appendfsync always), or that a crashed node stays down more than %v (--max-ttl)", cfg.maxTTL)}
	case f.info["aof_enabled"] != "1":
		hazard = "appendonly no: a restart loses every lock key (an RDB snapshot keeps only what it last saved)"
	case refused(f.fsyncErr):
		return finding{sevUnknown, n, "persistence", "appendonly yes, but appendfsync unknown: the server refused CONFIG GET (" + nodeCause(f.fsyncErr, cfg.nodeTimeout) + "), as managed services do",
			unknownFix(f.fsyncErr, "+config|get", fmt.Sprintf("check in the provider's settings that appendfsync is always, or that a crashed node stays down more than %v (--max-ttl)", cfg.maxTTL))}
	case f.fsyncErr != nil:
		return finding{sevFail, n, "persistence", "appendonly yes, but could not check appendfsync: CONFIG GET failed: " + nodeCause(f.fsyncErr, cfg.nodeTimeout),
			permFix(f.fsyncErr, "+config|get")}
	case f.appendfsync != "always":
		hazard = fmt.Sprintf("appendfsync %s: a crash loses the lock keys written since the last fsync (up to a second with everysec)", f.appendfsync)
	default:
		return finding{sevOK, n, "persistence", "appendonly yes, appendfsync always: a restart keeps every lock key and fencing counter", ""}
	}
	delay := cfg.maxTTL
	if cfg.delayedRestart {
		return finding{sevWarn, n, "persistence", fmt.Sprintf("%s; exclusion holds as long as a crashed node stays down more than %v (--delayed-restart, --max-ttl), but its fencing counters are lost, so WithFencing's tokens can repeat", hazard, delay),
			"appendonly yes and appendfsync always, if clients use WithFencing"}
	}
	return finding{sevFail, n, "persistence", fmt.Sprintf("%s, and a node that comes back without them lets a rival take a lock whose holder still counts the node", hazard),
		fmt.Sprintf("appendonly yes and appendfsync always; or keep a crashed node down more than %v (--max-ttl, the largest ttl in use) before it restarts, e.g. RestartSec=%d in its systemd unit, and rerun doctor with --delayed-restart",
			delay, restartSec(delay))}
}

// restartSec is a restart delay strictly over d, in whole seconds.
func restartSec(d time.Duration) int64 {
	return int64(d/time.Second) + 1
}

// evictionPolicies are the maxmemory-policy values Redis 7 knows.
var evictionPolicies = map[string]bool{
	"noeviction": true, "allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true,
	"volatile-lru": true, "volatile-lfu": true, "volatile-random": true, "volatile-ttl": true,
}

// checkEviction: a node that evicts a held lock key lets a rival take it,
// and nothing tells the holder. Lock keys always have a ttl, so the
// volatile-* policies, which evict only keys with one, can take them too.
func checkEviction(node string, info map[string]string) finding {
	policy, limit := info["maxmemory_policy"], info["maxmemory"]
	human := info["maxmemory_human"]
	if human == "" {
		human = limit
	}
	const fix = "CONFIG SET maxmemory-policy noeviction, and the same in redis.conf: a full node then refuses new locks (OOM) instead of dropping held ones"
	switch {
	case policy == "" || limit == "":
		return finding{sevUnknown, node, "eviction", "INFO gave no maxmemory or maxmemory_policy", "check in the provider's settings: maxmemory-policy noeviction, so that a full node refuses new locks (OOM) instead of dropping held ones"}
	case limit == "0" && policy == "noeviction":
		return finding{sevOK, node, "eviction", "maxmemory 0 (no limit) and noeviction: nothing is evicted", ""}
	case limit == "0":
		return finding{sevOK, node, "eviction", fmt.Sprintf("maxmemory 0 (no limit): nothing is evicted, so %s never applies; switch to noeviction before you set a limit", policy), ""}
	case policy == "noeviction":
		return finding{sevOK, node, "eviction", fmt.Sprintf("maxmemory %s with noeviction: a full node refuses writes, which costs availability, not safety", human), ""}
	case strings.HasPrefix(policy, "allkeys-"):
		return finding{sevFail, node, "eviction", fmt.Sprintf("maxmemory %s with %s: when memory runs out Redis evicts any key, held lock keys and fencing counters included, and a rival then takes the lock while the holder still counts this node", human, policy), fix}
	case strings.HasPrefix(policy, "volatile-"):
		what := fmt.Sprintf("maxmemory %s with %s: lock keys always have a ttl, so when memory runs out Redis can evict held lock keys, and a rival then takes the lock while the holder still counts this node", human, policy)
		if policy == "volatile-ttl" {
			what += "; volatile-ttl evicts the shortest ttls first, which are likely lock keys"
		}
		return finding{sevFail, node, "eviction", what, fix}
	case !evictionPolicies[policy]:
		return finding{sevFail, node, "eviction", fmt.Sprintf("maxmemory %s with unknown policy %q: cannot tell whether lock keys can be evicted", human, policy), fix}
	}
	return finding{sevOK, node, "eviction", policy, ""}
}

// checkRole: Redis replication is asynchronous, so a replica, once
// promoted, lacks the keys its master had not sent it yet: the empty
// restart without the delay (docs/safety.md, assumption 5).
func checkRole(node string, info map[string]string, listed map[string]bool) finding {
	switch role := info["role"]; role {
	case "slave":
		master := net.JoinHostPort(info["master_host"], info["master_port"])
		also := ""
		if listed[master] {
			also = ", which is also in the list"
		}
		return finding{sevFail, node, "role", fmt.Sprintf("is a replica of %s%s: replication is asynchronous, so a replica is not an independent master; it refuses lock writes, and once promoted it lacks the keys its master had not yet sent", master, also),
			"list only independent masters: replace this node, or make it one with REPLICAOF NO ONE and keep it out of any failover setup"}
	case "master":
		if n, _ := strconv.Atoi(info["connected_slaves"]); n > 0 {
			return finding{sevWarn, node, "role", fmt.Sprintf("master with %d replica(s): harmless in itself, but if Sentinel or another failover system can promote one, a held lock can be lost", n),
				"make sure no failover system manages this master, or drop its replicas"}
		}
		return finding{sevOK, node, "role", "master without replicas", ""}
	case "":
		return finding{sevUnknown, node, "role", "INFO gave no role", "make sure every node is an independent master, not a replica, and no failover system can promote one"}
	default:
		return finding{sevFail, node, "role", fmt.Sprintf("could not check role: INFO gave role %q", role), "list only independent masters"}
	}
}

// checkClock: a node whose clock runs faster than the holder's by more than
// the drift factor expires keys before the holder's validity ends
// (docs/safety.md, assumption 1). A slower one keeps them longer, which is
// safe.
func checkClock(cfg *doctorConfig, f nodeFacts) finding {
	n, df := f.addr, cfg.driftFactor
	if refused(f.clockErr) {
		return finding{sevUnknown, n, "clock", "the server refused TIME (" + nodeCause(f.clockErr, cfg.nodeTimeout) + ")",
			unknownFix(f.clockErr, "+time", "make sure the node's clock is kept by NTP that slews, never steps")}
	}
	if f.clockErr != nil {
		return finding{sevFail, n, "clock", "could not check the clock rate: TIME failed: " + nodeCause(f.clockErr, cfg.nodeTimeout), permFix(f.clockErr, "+time")}
	}
	c := f.clock
	measured := fmt.Sprintf("runs at %.5f× this host's clock (±%s, over %v)", c.rate, percent(c.uncertainty), c.over.Round(time.Millisecond))
	allowance := fmt.Sprintf("the drift allowance is %s (--drift-factor %v)", percent(df), df)
	switch {
	case c.uncertainty > df/2:
		return finding{sevFail, n, "clock", fmt.Sprintf("could not check the clock rate: it %s, an uncertainty over half the drift allowance, %s (--drift-factor %v)", measured, percent(df), df),
			"lengthen --clock-sample, or run doctor nearer the node"}
	case c.rate > 1+df:
		return finding{sevFail, n, "clock", fmt.Sprintf("%s, %s faster; %s, so this node expires lock keys before their holders' validity ends", measured, percent(c.rate-1), allowance),
			"fix the node's time keeping: NTP must slew its clock, never step it (chrony: makestep only at boot; ntpd -x); and run doctor from a lock client's host"}
	case c.rate < 1-df:
		return finding{sevWarn, n, "clock", fmt.Sprintf("%s, %s slower; keys there outlive their ttl, which is safe, but this host's clock or the node's is off", measured, percent(1-c.rate)),
			"check time keeping on this host and the node: NTP must slew clocks, never step them"}
	}
	return finding{sevOK, n, "clock", measured + ", within " + percent(df), ""}
}

// percent prints a fraction as a percentage, to 2 significant digits.
func percent(f float64) string {
	return strconv.FormatFloat(f*100, 'g', 2, 64) + "%"
}

// checkSecurity gives advice that does not change the exit status: anyone
// who can talk to a node can delete or overwrite lock keys, and without TLS
// the tokens and the password cross the network in the clear.
func checkSecurity(cfg *doctorConfig, f nodeFacts) []finding {
	n := f.addr
	var out []finding
	switch {
	case f.openErr != nil:
		out = append(out, finding{sevWarn, n, "auth", "could not check whether the node requires a password: " + nodeCause(f.openErr, cfg.nodeTimeout), "make sure it does (requirepass, or ACL users with the default user off)"})
	case f.open:
		out = append(out, finding{sevWarn, n, "auth", "answers commands without a password: any client that reaches it can delete or overwrite lock keys",
			"set requirepass, or turn the default user off (ACL SETUSER default off) and give clients their own users; pass the password in REDLOCK_PASSWORD"})
	default:
		out = append(out, finding{sevOK, n, "auth", "requires a password", ""})
	}
	switch {
	case cfg.conn.tls:
		out = append(out, finding{sevOK, n, "tls", "connected with TLS", ""})
	case f.loopback:
		out = append(out, finding{sevOK, n, "tls", "loopback address: TLS not needed", ""})
	default:
		out = append(out, finding{sevWarn, n, "tls", "plain TCP to a non-loopback address: lock tokens and the password cross the network in the clear",
			"serve TLS (tls-port) and connect with --tls, --tls-ca"})
	}
	return out
}

// report prints the findings and a summary, and returns the exit status.
func report(w io.Writer, cfg *doctorConfig, findings []finding) int {
	const all = "all"
	width := len(all)
	for _, a := range cfg.nodes {
		width = max(width, len(a))
	}
	var count [4]int
	for _, f := range findings {
		count[f.sev]++
	}
	fails, warns, unknowns := count[sevFail], count[sevWarn], count[sevUnknown]
	code := 0
	if fails > 0 {
		code = exitUnsound
	}
	var summary string
	switch {
	case fails > 0:
		summary = fmt.Sprintf("redlock doctor: %d FAIL, %d WARN, %d UNKNOWN: the deployment does not meet the assumptions of docs/safety.md", fails, warns, unknowns)
	case unknowns > 0:
		summary = fmt.Sprintf("redlock doctor: 0 FAIL, %d WARN, %d UNKNOWN: the deployment meets the assumptions doctor could check; the server refused the UNKNOWN checks, so verify those by hand", warns, unknowns)
	default:
		summary = fmt.Sprintf("redlock doctor: 0 FAIL, %d WARN: the deployment meets the assumptions doctor can check (docs/cli.md lists those it cannot)", warns)
	}
	if cfg.json {
		printDoctorJSON(w, cfg, findings, count, code, summary)
		return code
	}
	for _, f := range findings {
		if cfg.quiet && f.sev == sevOK {
			continue
		}
		node := f.node
		if node == "" {
			node = all
		}
		line := fmt.Sprintf("%-4s  %-*s  %s: %s", f.sev, width, node, f.check, f.what)
		if f.fix != "" {
			line += ". Fix: " + f.fix
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, summary)
	return code
}

// doctorJSON is what --json prints.
type doctorJSON struct {
	Findings []findingJSON `json:"findings"`
	Fail     int           `json:"fail"`
	Warn     int           `json:"warn"`
	Unknown  int           `json:"unknown"`
	Exit     int           `json:"exit"`
	Summary  string        `json:"summary"`
}

type findingJSON struct {
	Level string `json:"level"` // OK, WARN, FAIL, UNKNOWN
	Node  string `json:"node"`  // the address, or "all"
	Check string `json:"check"`
	What  string `json:"what"`
	Fix   string `json:"fix,omitempty"`
}

func printDoctorJSON(w io.Writer, cfg *doctorConfig, findings []finding, count [4]int, code int, summary string) {
	out := doctorJSON{Findings: []findingJSON{}, Fail: count[sevFail], Warn: count[sevWarn], Unknown: count[sevUnknown], Exit: code, Summary: summary}
	for _, f := range findings {
		if cfg.quiet && f.sev == sevOK {
			continue
		}
		node := f.node
		if node == "" {
			node = "all"
		}
		out.Findings = append(out.Findings, findingJSON{f.sev.String(), node, f.check, f.what, f.fix})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out) // a write error to stdout has nowhere to go
}

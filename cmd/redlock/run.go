package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/observe"
	"github.com/quorumlock/redlock/redigo"
)

// Exit codes of redlock run, besides CMD's own, which passes through.
// 64 to 78 follow BSD's sysexits.h; 80 is redlock's own. doctor and status
// use 64 and 69 in the same sense; doctor adds 78 (doctor.go).
const (
	exitUsage       = 64  // bad flags, arguments, environment or TLS files (EX_USAGE)
	exitUnavailable = 69  // fewer than a majority of nodes answered PING (EX_UNAVAILABLE)
	exitNotAcquired = 75  // the lock is held elsewhere, or --wait ran out (EX_TEMPFAIL)
	exitConfig      = 78  // a node is a replica (READONLY), not a master: as doctor's exitUnsound (EX_CONFIG)
	exitLockLost    = 80  // the lock was lost while CMD ran; CMD was stopped
	exitCannotExec  = 126 // CMD was found but could not be started, as in sh
	exitNotFound    = 127 // CMD was not found, as in sh
)

// preflightTimeout bounds the PING of every node before the first attempt.
const preflightTimeout = 3 * time.Second

const runUsage = `usage: redlock run [flags] -- CMD [ARGS...]

Runs CMD while holding the lock on --key across the Redis masters in --nodes,
extending it every ttl/3; with --permits N, while holding one of N permits of
the semaphore on --key, so that at most N CMDs run at once. If the lock is
lost, CMD's process group gets SIGTERM, then SIGKILL after --grace, and
redlock exits 80.

CMD's environment gets REDLOCK_KEY (--key, without --key-prefix),
REDLOCK_KEY_PREFIX (with --key-prefix), REDLOCK_TOKEN (the lock's or the
permit's random token), REDLOCK_FENCE (with --fencing: the fencing token,
to send with each write) and REDLOCK_PERMITS (with --permits).

Exit codes: CMD's own (128+N if a signal N ended it); 64 bad usage; 69 fewer
than a majority of nodes reachable; 75 lock held elsewhere or --wait ran out;
78 a node is a replica, not a master (READONLY); 80 lock lost while CMD ran;
126/127 CMD could not be started / not found.

Environment: REDLOCK_NODES (default for --nodes), REDLOCK_PASSWORD (the
password for --user, or for the default user; there is no password flag).

Flags:
`

type runConfig struct {
	nodes       []string
	key         string
	keyPrefix   string
	fencing     bool
	permits     int
	ttl         time.Duration
	wait        time.Duration
	grace       time.Duration
	nodeTimeout time.Duration
	dialOpts    []redis.DialOption
	argv        []string
}

// runMain parses run's flags, then holds the lock while CMD runs.
func runMain(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseRun(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		return exitUsage
	}
	// Before the nodes: a CMD that cannot run would otherwise wait out
	// --wait, or take the lock from others, only to exit 127.
	if _, err := exec.LookPath(cfg.argv[0]); err != nil {
		fmt.Fprintf(stderr, "redlock run: %v\n", err)
		return startExit(err)
	}
	return runLocked(cfg, stderr)
}

// startExit is the exit code for a CMD that could not be started, as in sh.
func startExit(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

func parseRun(args []string, getenv func(string) string, stderr io.Writer) (*runConfig, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		printFlags(fs, stderr)
	}
	cf := addConnFlags(fs)
	key := fs.String("key", "", "the lock's `key` (required)")
	keyPrefix := fs.String("key-prefix", "", "`prefix` of every key on the nodes, as the clients' WithKeyPrefix")
	fencing := fs.Bool("fencing", false, "take a fencing token too (WithFencing) and pass it to CMD in REDLOCK_FENCE")
	permits := fs.Int("permits", 0, "run CMD under one of `N` permits of a semaphore on --key: at most N at once (0: an exclusive lock)")
	ttl := fs.Duration("ttl", 30*time.Second, "lock ttl; extended every ttl/3 while CMD runs")
	wait := fs.Duration("wait", 0, "wait up to this long for the lock (0: fail at once if it is held)")
	grace := fs.Duration("grace", 10*time.Second, "after a lost lock, time between SIGTERM and SIGKILL")
	nodeTimeout := fs.Duration("node-timeout", 200*time.Millisecond, "per-node bound on each lock operation")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	cfg := &runConfig{key: *key, keyPrefix: *keyPrefix, fencing: *fencing, permits: *permits, ttl: *ttl, wait: *wait, grace: *grace, nodeTimeout: *nodeTimeout, argv: fs.Args()}
	var err error
	if cfg.nodes, err = cf.nodeList(getenv); err != nil {
		return nil, err
	}
	switch {
	case cfg.key == "":
		return nil, errors.New("--key is required")
	case cfg.permits < 0:
		return nil, fmt.Errorf("--permits %d must not be negative", cfg.permits)
	case cfg.permits > 0 && cfg.fencing:
		return nil, errors.New("--fencing and --permits exclude each other: a semaphore's permits are shared by up to N holders, so they carry no fencing token (docs/semaphore.md)")
	case cfg.ttl <= 0:
		return nil, fmt.Errorf("--ttl %v must be positive", cfg.ttl)
	case cfg.wait < 0:
		return nil, fmt.Errorf("--wait %v must not be negative", cfg.wait)
	case cfg.grace < 0:
		return nil, fmt.Errorf("--grace %v must not be negative", cfg.grace)
	case cfg.nodeTimeout <= 0:
		return nil, fmt.Errorf("--node-timeout %v must be positive", cfg.nodeTimeout)
	case cfg.nodeTimeout >= cfg.ttl/3 && !flagSet(fs, "node-timeout"):
		return nil, fmt.Errorf("--ttl %v is too short: it must exceed three node timeouts, and the node timeout is %v (the default); give a --ttl over %v, or a shorter --node-timeout",
			cfg.ttl, cfg.nodeTimeout, 3*cfg.nodeTimeout)
	case cfg.nodeTimeout >= cfg.ttl/3:
		return nil, fmt.Errorf("--node-timeout %v must be under a third of --ttl %v (%v): shorten it or lengthen --ttl",
			cfg.nodeTimeout, cfg.ttl, cfg.ttl/3)
	case len(cfg.argv) == 0:
		return nil, errors.New("no command given: redlock run [flags] -- CMD [ARGS...]")
	}

	c, err := cf.dial(getenv)
	if err != nil {
		return nil, err
	}
	cfg.dialOpts = c.dialOpts
	return cfg, nil
}

// runLocked checks the nodes, acquires the lock and runs CMD under it.
func runLocked(cfg *runConfig, stderr io.Writer) int {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "redlock run: "+format+"\n", args...) }

	pools := make([]redlock.Pool, len(cfg.nodes))
	for i, addr := range cfg.nodes {
		p := redigo.NewPool(addr, cfg.dialOpts...)
		defer p.Close()
		pools[i] = p
	}
	if up := preflight(pools, cfg.nodes, logf); up < len(pools)/2+1 {
		logf("only %d of %d nodes reachable, %d needed for a majority", up, len(pools), len(pools)/2+1)
		return exitUnavailable
	}

	tries := 1
	if cfg.wait > 0 {
		tries = math.MaxInt32 // until --wait ends the attempt through ctx
	}
	g := newGate()
	defer g.stop()
	replicas := &replicaWatch{gate: g, maxBad: len(pools) - (len(pools)/2 + 1)}
	opts := []redlock.Option{redlock.WithTries(tries), redlock.WithNodeTimeout(cfg.nodeTimeout), redlock.WithObserver(replicas)}
	if cfg.keyPrefix != "" {
		opts = append(opts, redlock.WithKeyPrefix(cfg.keyPrefix))
	}
	if cfg.fencing {
		opts = append(opts, redlock.WithFencing())
	}
	client, err := redlock.New(pools, opts...)
	if err != nil {
		logf("%s", plain(err))
		return exitUsage
	}
	// Before the pools close: the releases Unlock left to finish on the
	// slower nodes must land, or the key stays there for a whole ttl.
	defer client.Close()

	var sem *redlock.Semaphore
	if cfg.permits > 0 {
		if sem, err = client.Semaphore(cfg.key, cfg.permits); err != nil {
			logf("--permits %d on %d nodes: %s", cfg.permits, len(pools), plain(err))
			return exitUsage
		}
	}
	if cfg.wait > 0 {
		timer := time.AfterFunc(cfg.wait, func() { g.abort(errWaitedOut) })
		defer timer.Stop()
	}

	// On a terminal, --wait shows for how long it has waited and on whom.
	// A semaphore's key is a sorted set the line cannot read.
	stopWaiting := func() {}
	if cfg.wait > 0 && sem == nil {
		stopWaiting = newWaitLine(stderr, cfg, pools).show(g.ctx)
	}
	defer stopWaiting()

	var child *childResult
	fn := func(ctx context.Context) error {
		stopWaiting() // before CMD writes to the terminal
		if !g.begin() {
			return nil // aborted between acquiring and starting: nothing ran
		}
		child = runChild(ctx, cfg, g, heldEnv(ctx, cfg), logf)
		return nil
	}
	if sem != nil {
		err = sem.Do(g.ctx, cfg.ttl, fn)
	} else {
		err = client.Do(g.ctx, cfg.key, cfg.ttl, fn)
	}
	stopWaiting()
	what := fmt.Sprintf("lock %q", cfg.key)
	if sem != nil {
		what = fmt.Sprintf("every one of the %d permits of %q", cfg.permits, cfg.key)
	}
	switch {
	case child == nil && len(replicas.seen()) > 0 && g.signal() == nil:
		logf("%s not acquired: node(s) %s answered READONLY: replicas, not masters; list only independent masters (redlock doctor checks them)",
			what, strings.Join(replicas.seen(), ", "))
		return exitConfig
	case child == nil && g.aborted() == errWaitedOut:
		logf("%s still held elsewhere after waiting %v", what, cfg.wait)
		return exitNotAcquired
	case child == nil && g.signal() != nil:
		return 128 + int(g.signal().(syscall.Signal))
	case child == nil && errors.Is(err, redlock.ErrInvalid):
		// Arguments the library refuses (a ttl within the drift allowance)
		// are bad usage, not a lock held elsewhere.
		logf("%s", plain(err))
		return exitUsage
	case child == nil:
		if sem != nil {
			logf("no permit of %q acquired: %s", cfg.key, plain(err))
		} else {
			logf("lock %q not acquired: %s", cfg.key, plain(err))
		}
		return exitNotAcquired
	case child.startErr != nil:
		logf("%v", child.startErr)
		return startExit(child.startErr)
	case errors.Is(err, redlock.ErrLockLost):
		if child.stoppedBy != "" {
			logf("stopped %s with %s (%s); exiting %d", cfg.argv[0], child.stoppedBy, child.state, exitLockLost)
		} else {
			logf("key %q: %s; %s ended (%s), but the lock did not cover it to the end; exiting %d",
				cfg.key, plain(err), cfg.argv[0], child.state, exitLockLost)
		}
		return exitLockLost
	}
	if rel := replicas.releaseFailed(); rel != nil {
		// CMD ran under the lock; only others are kept waiting.
		held := fmt.Sprintf("lock %q", cfg.key)
		if sem != nil {
			held = fmt.Sprintf("permit of %q", cfg.key)
		}
		logf("%s: not released on a majority (%s); the key stays on the nodes that missed it until it expires, within --ttl %v",
			held, plain(rel), cfg.ttl)
	}
	return child.code
}

// childResult is how CMD ended.
type childResult struct {
	startErr  error
	code      int    // CMD's exit code, 128+N for signal N
	state     string // as the os package prints it, for messages
	stoppedBy string // "SIGTERM" or "SIGKILL" if redlock stopped CMD
}

// runChild starts CMD in its own process group, so that a stop reaches every
// process it started, forwards redlock's signals to it, and stops it if ctx
// ends: that is, if the lock is lost.
func runChild(ctx context.Context, cfg *runConfig, g *gate, held []string, logf func(string, ...any)) *childResult {
	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(childEnv(), held...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return &childResult{startErr: err}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	kill := func(sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }

	res := &childResult{}
	var graceC <-chan time.Time
	for {
		select {
		case sig := <-g.signals:
			kill(sig.(syscall.Signal))
		case <-ctx.Done():
			logf("key %q: %s; sending SIGTERM to %s", cfg.key, plain(context.Cause(ctx)), cfg.argv[0])
			kill(syscall.SIGTERM)
			res.stoppedBy = "SIGTERM"
			grace := time.NewTimer(cfg.grace)
			defer grace.Stop()
			graceC = grace.C
			ctx = context.Background() // seen once
		case <-graceC:
			logf("%s still running %v after SIGTERM; sending SIGKILL", cfg.argv[0], cfg.grace)
			kill(syscall.SIGKILL)
			res.stoppedBy = "SIGKILL"
			graceC = nil
		case <-waited:
			res.state = cmd.ProcessState.String()
			res.code = exitCode(cmd.ProcessState)
			if res.stoppedBy == "SIGTERM" || res.stoppedBy == "SIGKILL" {
				// The group may hold stragglers that ignored SIGTERM.
				kill(syscall.SIGKILL)
			}
			return res
		}
	}
}

// plain prints err without repeating the library's "redlock: " prefix.
func plain(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "redlock: "), ": redlock: ", ": ")
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// The variables that tell CMD what redlock holds for it, as etcdctl lock
// exports ETCD_LOCK_KEY and ETCD_LOCK_REV.
const (
	envKey       = "REDLOCK_KEY"        // --key, as given
	envKeyPrefix = "REDLOCK_KEY_PREFIX" // --key-prefix, when given
	envToken     = "REDLOCK_TOKEN"      // the lock's or permit's random token
	envFence     = "REDLOCK_FENCE"      // the fencing token, with --fencing
	envPermits   = "REDLOCK_PERMITS"    // --permits, when given
)

// heldEnv is what CMD learns of the lock or permit that Do holds with ctx.
// The token is what releases the lock: CMD can use it to check or fence,
// and redlock releases the lock when CMD ends in any case.
func heldEnv(ctx context.Context, cfg *runConfig) []string {
	env := []string{envKey + "=" + cfg.key}
	if cfg.keyPrefix != "" {
		env = append(env, envKeyPrefix+"="+cfg.keyPrefix)
	}
	l := redlock.HeldLock(ctx) // a permit, with --permits
	if cfg.permits > 0 {
		return append(env, envToken+"="+l.Value(), envPermits+"="+strconv.Itoa(cfg.permits))
	}
	env = append(env, envToken+"="+l.Value())
	if cfg.fencing {
		env = append(env, envFence+"="+strconv.FormatUint(l.Token(), 10))
	}
	return env
}

// childEnv is redlock's environment without the password, which CMD does not
// need to see, and without variables of an outer redlock run, which would
// describe another lock.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case envPassword, envKey, envKeyPrefix, envToken, envFence, envPermits:
			continue
		}
		env = append(env, kv)
	}
	return env
}

// A replicaWatch is run's observer. It keeps the cause of a release that
// failed, for run to report. A node that answers READONLY is a
// replica: a configuration error, not contention. Once so many nodes have
// that no majority is left, waiting cannot help, so it ends the wait at
// once; and an acquisition that fails after any READONLY exits 78, not 75.
type replicaWatch struct {
	gate    *gate
	maxBad  int // N - quorum: more replicas than this leave no majority
	mu      sync.Mutex
	addrs   []string
	tainted map[string]bool
	release error // why the release of the lock or permit was not confirmed
}

// releaseFailed is why the release that ended the hold was not confirmed
// by a majority, or nil.
func (w *replicaWatch) releaseFailed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.release
}

func (w *replicaWatch) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.KindReleaseFailed {
		w.mu.Lock()
		w.release = e.Err
		w.mu.Unlock()
		return
	}
	if e.Kind != observe.KindNode || e.Err == nil || !strings.Contains(e.Err.Error(), "READONLY") {
		return
	}
	w.mu.Lock()
	if w.tainted == nil {
		w.tainted = map[string]bool{}
	}
	if !w.tainted[e.Addr] {
		w.tainted[e.Addr] = true
		w.addrs = append(w.addrs, e.Addr)
	}
	hopeless := len(w.addrs) > w.maxBad
	w.mu.Unlock()
	if hopeless {
		w.gate.abort(errReplica)
	}
}

// seen lists the nodes that answered READONLY.
func (w *replicaWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.addrs...)
}

// preflight PINGs every node at once and reports each failure. It returns how
// many answered.
func preflight(pools []redlock.Pool, addrs []string, logf func(string, ...any)) int {
	ctx, cancel := context.WithTimeout(context.Background(), preflightTimeout)
	defer cancel()
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Go(func() {
			replies := make([]driver.Reply, 1)
			err := p.Exec(ctx, []driver.Command{{Name: "PING"}}, replies)
			if err == nil {
				err = replies[0].Err
			}
			errs[i] = err
		})
	}
	wg.Wait()
	up := 0
	for i, err := range errs {
		if err != nil {
			logf("node %s: %v", addrs[i], err)
			continue
		}
		up++
	}
	return up
}

var (
	errWaitedOut = errors.New("waited out")
	errSignalled = errors.New("signalled")
	errReplica   = errors.New("a node is a replica")
)

// A gate separates waiting for the lock from running CMD. While waiting, a
// signal or the end of --wait aborts the acquisition through ctx; once CMD
// runs, nothing cancels ctx, and signals go to CMD instead.
type gate struct {
	ctx     context.Context
	cancel  context.CancelFunc
	signals chan os.Signal

	mu      sync.Mutex
	running bool
	why     error
	sig     os.Signal
	done    chan struct{}
	wg      sync.WaitGroup
}

func newGate() *gate {
	g := &gate{signals: make(chan os.Signal, 4), done: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	incoming := make(chan os.Signal, 4)
	signal.Notify(incoming, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	g.wg.Go(func() {
		defer signal.Stop(incoming)
		for {
			select {
			case sig := <-incoming:
				g.mu.Lock()
				if g.running {
					g.mu.Unlock()
					select {
					case g.signals <- sig:
					default: // CMD has not taken the last few yet
					}
					continue
				}
				if g.why == nil {
					g.why, g.sig = errSignalled, sig
					g.cancel()
				}
				g.mu.Unlock()
			case <-g.done:
				return
			}
		}
	})
	return g
}

// begin moves the gate to running, unless it was aborted.
func (g *gate) begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.why != nil {
		return false
	}
	g.running = true
	return true
}

// abort ends the wait for the lock, unless CMD already runs.
func (g *gate) abort(why error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running && g.why == nil {
		g.why = why
		g.cancel()
	}
}

func (g *gate) aborted() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.why
}

// signal returns the signal that aborted the wait, if one did.
func (g *gate) signal() os.Signal {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sig
}

func (g *gate) stop() {
	close(g.done)
	g.wg.Wait()
	g.cancel()
}

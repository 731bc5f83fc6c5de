package redlock

// The world of the deterministic simulation, in the style of FoundationDB
// and TigerBeetle: in-memory Redis nodes over a simulated network, under
// virtual time (testing/synctest), with random message delays and drops,
// node crashes and restarts, node clocks that run fast, nodes at maxmemory,
// and paused client processes. sim_runner_test.go plays schedules of any of
// the four primitives in it (the mutex, the semaphore, the RW lock and
// election) and holds each to its claim with an independent checker;
// sim_<primitive>_test.go holds each primitive's scripts, as the nodes run
// them, and what the runner needs to know of it.
//
// Each schedule is drawn from a seed, printed on failure. The fault schedule
// (which node crashes when, for how long; which nodes fill up; which Client
// is closed) follows from the seed alone; the interleaving of goroutines
// that wake at the same virtual instant is up to the Go scheduler, and the
// retry delays are not seeded, so a replay reproduces the faults but not
// always every message order. REDLOCK_SIM_TRACE=1 logs the events of a
// schedule that fails.
//
//	go test -run 'TestSimulation' .                             # fast subset
//	REDLOCK_SIM_SCHEDULES=100000 go test -run 'TestSimulation$' -timeout 60m .
//	REDLOCK_SIM_SEED=1234 REDLOCK_SIM_SCHEDULES=1 REDLOCK_SIM_TRACE=1 go test -run 'TestSimulation$' -v .

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// simConfig is one schedule's shape, drawn from its seed: the world's
// faults, then what the primitive under test draws for itself, then the
// unsafe variants that tests switch on to show the checker failing.
type simConfig struct {
	seed      uint64
	nodes     int
	clients   int           // Clients
	workers   int           // workers per Client, sharing its pipes
	cycles    int           // acquisitions per worker
	ttl       time.Duration //
	maxDelay  time.Duration // one-way message delay is uniform in [0, maxDelay], in steps of simQuantum
	dropRate  float64       // chance that a request or a reply is lost
	crashes   int           // node crashes over the run
	amnesia   bool          // crashed nodes restart without their data: the assumption broken
	clockRate float64       // node clocks run this much faster than true time
	pauseRate float64       // chance that a holder stalls past its validity (its whole process, on a faulty network)

	// Release announcements (wake.go) travel like replies, with a delay of
	// up to maxDelay and the drop rate, and besides: lost with noticeLoss,
	// sent twice with noticeDup.
	noticeLoss, noticeDup float64

	prefix       string  // every Client's WithKeyPrefix
	full         int     // nodes that reach maxmemory (noeviction) for a while: growing writes fail with OOM
	closeOne     bool    // one Client is closed while its workers call it
	releaseEnded float64 // chance that a release is called with a context that has already ended
	fencing      bool    // WithFencing on every Client

	// What the primitive draws (simPrimitive.draw).
	permits      int        // semaphore: K
	repeatTokens bool       // semaphore: the token function repeats tokens, within and across Clients
	weights      simWeights // semaphore: how the permits' weights are drawn
	writeShare   float64    // RW lock: the share of acquisitions that are writes
	roles        bool       // RW lock: each worker only reads or only writes, writers coming back at once
	recordLoss   bool       // election: a restart loses the leader records (the last writes before it)
	lossless     bool       // election: no message lost, no node full, no Client closed, no process frozen: the records' liveness is checked

	// clean is a network on which the library promises that no key is left
	// behind: nothing is lost, no node crashes, each Client's link to a node
	// delivers requests in the order they were sent (one TCP connection),
	// and no node call can time out. For the last, contexts end by
	// cancellation only, which, unlike a deadline, does not shorten a node
	// call; and 16 × maxDelay stays below simNodeTimeout. A batch takes at
	// most two hops (2 × maxDelay); a command waits for at most one batch
	// ahead of it in its pipe, so it is answered within 4 × maxDelay; a
	// script may be sent twice (EVALSHA, then EVAL after NOSCRIPT), so a node
	// call takes at most 8 × maxDelay; and the undo that follows an op in
	// flight has what is left of a node timeout since the verdict, at least
	// simNodeTimeout − 8 × maxDelay, for 8 × maxDelay more.
	clean bool

	unsafe simUnsafe
}

// simUnsafe are the deliberately broken variants. Each lives in the test
// world (a node's script, the port, a quorum set on a Client): none is a
// switch in the library's code.
type simUnsafe struct {
	noticeVotes    bool      // the port turns a refusal into agreement on a node that announced a release to the Client since its last acquisition there
	skipRelease    bool      // the port drops a release whose caller's context had ended: the release that issue 23 says must always go out
	quorum         int       // if > 0, every Client's quorum (election: leaders, and readers, on fewer nodes)
	readQuorum     int       // election: if > 0, Leader and Observe run on Clients of this quorum
	semQuorum      int       // semaphore: if > 0, the semaphore's quorum
	rw             rwVariant // RW lock: nodes that admit a reader beside a writer, or the reverse
	sharedTokens   bool      // semaphore: the nodes re-score a repeated token instead of refusing it
	unweighted     bool      // semaphore: the nodes count every member, and the caller, as weight 1 when they admit
	recordlessNone bool      // election: a node with the key but no record naming it answers "no leader" (the read before issue 21)
}

const (
	simNodeTimeout = 50 * time.Millisecond
	simQuantum     = 100 * time.Microsecond // delays and deadlines are multiples of it, so events coincide
	simKey         = "resource"
)

// drawConfig draws the world's shape. The primitive draws its own part
// after (simPrimitive.draw), from a stream of its own, so that adding a
// fault here does not change what the others draw.
func drawConfig(seed uint64, amnesia bool) simConfig {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	nodes := []int{3, 5, 5, 7}[r.IntN(4)]
	cfg := simConfig{
		seed:      seed,
		nodes:     nodes,
		clients:   1 + r.IntN(4),
		workers:   1 + r.IntN(3),
		cycles:    3 + r.IntN(6),
		ttl:       time.Duration(200+r.IntN(800)) * time.Millisecond,
		maxDelay:  time.Duration(1+r.IntN(30)) * time.Millisecond,
		dropRate:  r.Float64() * 0.1,
		crashes:   r.IntN(nodes + 1),
		amnesia:   amnesia,
		clockRate: 1 + r.Float64()*0.009, // within the default drift factor of 0.01
		pauseRate: 0.25,
	}
	cfg.noticeLoss, cfg.noticeDup = r.Float64()*0.3, r.Float64()*0.3
	if cfg.clients*cfg.workers < 2 {
		cfg.workers = 2 // someone to contend with
	}
	clean := !amnesia && r.IntN(4) == 0
	if clean {
		cfg.clean = true
		cfg.maxDelay = time.Duration(1+r.IntN(3)) * time.Millisecond // 16 × 3 ms < simNodeTimeout
		cfg.dropRate, cfg.crashes, cfg.noticeLoss = 0, 0, 0
	}
	// The faults of issues 21 and 23, from a stream of their own.
	f := rand.New(rand.NewPCG(seed, 0xfa17))
	if f.IntN(2) == 0 {
		cfg.prefix = "app:"
	}
	if f.IntN(4) == 0 {
		cfg.full = 1 + f.IntN(nodes)
	}
	cfg.closeOne = f.IntN(5) == 0 && cfg.clients > 1
	cfg.releaseEnded = []float64{0, 0.25, 0.5}[f.IntN(3)]
	cfg.fencing = f.IntN(4) != 0
	return cfg
}

// A simNode is an in-memory Redis master with the commands and scripts the
// library sends. Its clock may run faster than true time.
type simNode struct {
	mu      sync.Mutex
	up      bool
	data    map[string]simValue
	scripts map[string]bool // cached script hashes; lost on restart
	rate    float64
	epoch   time.Time
	expired []string // values of watch that lived until their ttl
	watch   string   // the key whose expiries are recorded (the mutex's and election's key on the nodes)
	full    bool     // at maxmemory with noeviction: growing writes fail with OOM

	world *simWorld
	subs  []*simSub // subscriptions to the release channel; lost on a crash
}

type simValue struct {
	v       string
	expires time.Time // on the node's clock; zero for none
}

func newSimNode(rate float64) *simNode {
	return &simNode{up: true, data: map[string]simValue{}, scripts: map[string]bool{}, rate: rate, epoch: time.Now()}
}

func (n *simNode) now() time.Time {
	return n.epoch.Add(time.Duration(float64(time.Since(n.epoch)) * n.rate))
}

// get returns k's value, expiring it first if its ttl has passed, as Redis
// does on access.
func (n *simNode) get(k string) (string, bool) {
	v, ok := n.data[k]
	if ok && !v.expires.IsZero() && !n.now().Before(v.expires) {
		delete(n.data, k)
		if k == n.watch && k != "" {
			n.expired = append(n.expired, v.v)
		}
		return "", false
	}
	return v.v, ok
}

func (n *simNode) setPX(k, v string, ms int64) {
	n.data[k] = simValue{v: v, expires: n.now().Add(time.Duration(ms) * time.Millisecond)}
}

func (n *simNode) crash() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.up = false
	n.dropSubs()
}

// restart brings the node back, with its data (persistence) or without;
// lose, if not nil, names keys that the restart loses all the same (the
// writes of the last second before the crash, with appendfsync everysec).
func (n *simNode) restart(keepData bool, lose func(key string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.up = true
	n.scripts = map[string]bool{}
	if !keepData {
		n.data = map[string]simValue{}
	}
	for k := range n.data {
		if lose != nil && lose(k) {
			delete(n.data, k)
		}
	}
}

// setFull puts the node at maxmemory, or takes it back below.
func (n *simNode) setFull(full bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.full = full
}

// errSimOOM is the reply of a node at maxmemory to a command that may grow
// memory (SET, ZADD, HSET), or to a script whose first write is one.
var errSimOOM = driver.ReplyError("OOM command not allowed when used memory > 'maxmemory'.")

// grow is asked before a write that may grow memory: on a full node it
// fails, and a script that asks it before any other write fails whole, as
// Redis checks a script without a shebang at its first write.
func (n *simNode) grow() error {
	if n.full {
		return errSimOOM
	}
	return nil
}

var errSimDown = errors.New("sim: connection refused")

func (n *simNode) exec(cmd string, args []any) (any, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up {
		return nil, errSimDown
	}
	switch cmd {
	case "SET": // key value NX PX ms [GET]
		if err := n.grow(); err != nil {
			return nil, err // checked before the command runs, NX or not
		}
		get := len(args) > 5 && str(args[5]) == "GET"
		if v, held := n.get(str(args[0])); held {
			if get {
				return v, nil // the holder
			}
			return nil, nil
		}
		n.setPX(str(args[0]), str(args[1]), num(args[4]))
		if get {
			return nil, nil // the key was absent, and is now set
		}
		return "OK", nil
	case "EVALSHA":
		hash := str(args[0])
		if !n.scripts[hash] {
			return nil, driver.ReplyError("NOSCRIPT No matching script")
		}
		return n.script(hash, args[2:])
	case "EVAL":
		h := sha1.Sum([]byte(str(args[0])))
		hash := hex.EncodeToString(h[:])
		n.scripts[hash] = true
		return n.script(hash, args[2:])
	}
	return nil, driver.ReplyError("ERR unknown command " + cmd)
}

// script runs the Go equivalent of each embedded Lua script.
func (n *simNode) script(hash string, ka []any) (any, error) {
	key := str(ka[0])
	switch hash {
	case releaseScript.hash:
		if v, ok := n.get(key); ok && v == str(ka[1]) {
			delete(n.data, key)
			if str(ka[2]) != "" {
				n.announce(str(ka[2]), key)
			}
			return int64(1), nil
		}
		return int64(0), nil
	case extendScript.hash:
		v, ok := n.get(key)
		switch {
		case ok && v == str(ka[1]):
			if exp := n.now().Add(time.Duration(num(ka[2])) * time.Millisecond); exp.After(n.data[key].expires) {
				n.setPX(key, v, num(ka[2])) // PEXPIRE ... GT: never shorter
			}
			return int64(1), nil
		case !ok:
			return int64(2), nil
		}
		return int64(0), nil
	case acquireFencedScript.hash:
		if err := n.grow(); err != nil {
			return nil, err // its first write is SET
		}
		if _, held := n.get(key); held {
			return nil, nil
		}
		n.setPX(key, str(ka[2]), num(ka[3]))
		counter, _ := n.get(str(ka[1]))
		c, _ := strconv.ParseInt(counter, 10, 64)
		return c, nil
	case raiseFenceScript.hash:
		if v, ok := n.get(key); !ok || v != str(ka[2]) {
			return int64(0), nil
		}
		counter, _ := n.get(str(ka[1]))
		if c, _ := strconv.ParseInt(counter, 10, 64); c >= num(ka[3]) {
			return int64(2), nil
		}
		if err := n.grow(); err != nil {
			return nil, err
		}
		n.data[str(ka[1])] = simValue{v: strconv.FormatInt(num(ka[3]), 10)}
		return int64(1), nil
	}
	if f, ok := simScripts[hash]; ok {
		return f(n, ka)
	}
	return nil, driver.ReplyError("NOSCRIPT unknown script")
}

// simScripts holds the Go equivalents of scripts that other primitives'
// files register (in an init function), keyed by the script's SHA-1. They
// run with the node's lock held, like the cases above.
var simScripts = map[string]func(n *simNode, keysAndArgs []any) (any, error){}

func str(a any) string { return fmt.Sprint(a) }

func num(a any) int64 {
	n, err := strconv.ParseInt(fmt.Sprint(a), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("sim: not a number: %v", a))
	}
	return n
}

// simWorld is the network between clients and nodes, and the fault source.
type simWorld struct {
	cfg   simConfig
	nodes []*simNode
	mu    sync.Mutex
	rng   *rand.Rand
	wires sync.WaitGroup // messages in transit

	batches, multi, inMulti, maxBatch atomic.Int64 // Exec calls; those of 2+ commands, and their commands; the largest

	// With REDLOCK_SIM_TRACE set, the schedule's events, logged if it fails:
	// each batch sent and answered, each command a node ran, each call.
	tracing bool
	tmu     sync.Mutex
	events  []string
	start   time.Time
}

func (w *simWorld) tracef(format string, args ...any) {
	if !w.tracing {
		return
	}
	w.tmu.Lock()
	defer w.tmu.Unlock()
	w.events = append(w.events, fmt.Sprintf("%9.1fms ", float64(time.Since(w.start))/1e6)+fmt.Sprintf(format, args...))
}

func (w *simWorld) intn(n int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.IntN(n)
}

func (w *simWorld) float() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rng.Float64()
}

// hop carries one message one way: it waits the delay and reports whether
// the message arrived.
func (w *simWorld) hop() bool {
	time.Sleep(time.Duration(w.intn(int(w.cfg.maxDelay/simQuantum)+1)) * simQuantum)
	return w.float() >= w.cfg.dropRate
}

// A simLink is one Client's connection to one node. On a clean network it
// delivers requests in the order they were sent, as one TCP connection does.
type simLink struct {
	mu   sync.Mutex
	last chan struct{} // closed once the request sent last has been delivered
}

var errSimTimeout = errors.New("sim: i/o timeout")

// roundTrip sends a batch of commands to a node in one message, which runs
// them in order, and waits for the replies at most timeout, as a connection
// with a read deadline does. Other connections' commands may run between
// them, as on a real server.
func (w *simWorld) roundTrip(node int, link *simLink, timeout time.Duration, cmds []driver.Command) ([]driver.Reply, error) {
	type result struct {
		replies []driver.Reply
		err     error
	}
	var ahead, done chan struct{}
	if w.cfg.clean {
		done = make(chan struct{})
		link.mu.Lock()
		ahead, link.last = link.last, done
		link.mu.Unlock()
	}
	out := make(chan result, 1)
	w.wires.Go(func() {
		arrived := w.hop()
		if ahead != nil {
			<-ahead // never before the request sent ahead of it
		}
		var r result
		if arrived {
			r.replies = make([]driver.Reply, len(cmds))
			for i, c := range cmds {
				v, err := w.nodes[node].exec(c.Name, c.Args)
				if w.tracing {
					w.tracef("node %d runs %s %v: %v, %v", node, c.Name, c.Args[min(2, len(c.Args)):], v, err) // a script without its source
				}
				if errors.Is(err, errSimDown) {
					r = result{err: err} // the connection is refused
					break
				}
				r.replies[i] = driver.Reply{Value: v, Err: err}
			}
		}
		if done != nil {
			close(done)
		}
		if !arrived || !w.hop() {
			return
		}
		out <- r
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-out:
		return r.replies, r.err
	case <-t.C:
		return nil, errSimTimeout
	}
}

// simPool is the Pool port over the simulated network: each batch is one
// message on the Client's link to the node.
type simPool struct {
	w     *simWorld
	node  int
	link  *simLink
	proc  *simProcess // the Client's
	clock *simClock   // the Client's
}

// A simProcess is what the pools of one Client share: its process, which
// a pause freezes, and the unsafe port's memory.
type simProcess struct {
	mu    sync.Mutex
	until time.Time // frozen until then

	announced []atomic.Bool // noticeVotes: node announced a release to this Client since its last acquisition there
	presumed  sync.Map      // noticeVotes: "node token" → true: an acquisition the port turned into agreement
}

// freeze pauses the process for d: while it lasts, nothing the Client sends
// leaves it, and a command whose deadline passed meanwhile is never sent, as
// a paused process's would time out when it wakes.
func (p *simProcess) freeze(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if end := time.Now().Add(d); end.After(p.until) {
		p.until = end
	}
}

func (p simPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	w := p.w
	p.proc.mu.Lock()
	wait := time.Until(p.proc.until)
	p.proc.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return errSimTimeout
		}
	}
	if w.cfg.unsafe.skipRelease && simCallEnded(ctx) && simReleases(cmds) {
		// The unsafe variant: a release whose caller's context had ended
		// is never sent.
		w.tracef("link %p to node %d: release dropped, its caller's context had ended", p.link, p.node)
		return context.Canceled
	}
	w.batches.Add(1)
	if n := int64(len(cmds)); n > 1 {
		w.multi.Add(1)
		w.inMulti.Add(n)
		for m := w.maxBatch.Load(); n > m && !w.maxBatch.CompareAndSwap(m, n); m = w.maxBatch.Load() {
		}
	}
	deadline, _ := ctx.Deadline()
	// A real connection has written the commands by the time it returns;
	// the message in transit here outlives the call, and the caller reuses
	// their arguments.
	batch := make([]driver.Command, len(cmds))
	for i, c := range cmds {
		batch[i] = c
		batch[i].Args = slices.Clone(c.Args)
	}
	if w.tracing {
		w.tracef("link %p to node %d: %d commands sent, timeout %v", p.link, p.node, len(batch), time.Until(deadline))
	}
	got, err := w.roundTrip(p.node, p.link, time.Until(deadline), batch)
	if w.tracing {
		w.tracef("link %p to node %d: answers %v, %v", p.link, p.node, got, err)
	}
	if c, ok := ctx.Value(simCancelKey{}).(*simCanceller); ok {
		c.observe(p, cmds, got, err)
	}
	if err != nil {
		return err
	}
	copy(replies, got)
	if w.cfg.unsafe.noticeVotes {
		p.presume(cmds, replies)
	}
	return nil
}

// presume is the unsafe variant that counts release announcements as votes,
// done at the port so that the library carries no switch for it: on a node
// that announced a release to this Client since the Client's last
// acquisition there, a refused acquisition reads as agreement, and so does
// the refused fencing round that follows it.
func (p simPool) presume(cmds []driver.Command, replies []driver.Reply) {
	for i, c := range cmds {
		if c.Name != "SET" && c.Name != "EVALSHA" && c.Name != "EVAL" {
			continue
		}
		h := simScriptHash(c)
		switch {
		case c.Name == "SET" || h == acquireFencedScript.hash:
			get := c.Name == "SET" && len(c.Args) > 5 && str(c.Args[5]) == "GET" // refused: the holder's token
			if !p.proc.announced[p.node].Swap(false) || replies[i].Err != nil || (replies[i].Value != nil) != get {
				continue
			}
			token := str(c.Args[1])
			if h != "" {
				token = str(c.Args[4])
			}
			p.proc.presumed.Store(fmt.Sprint(p.node, token), true)
			switch {
			case get:
				replies[i].Value = nil
			case c.Name == "SET":
				replies[i].Value = "OK"
			default:
				replies[i].Value = int64(0)
			}
		case h == raiseFenceScript.hash:
			if _, ok := p.proc.presumed.Load(fmt.Sprint(p.node, str(c.Args[4]))); ok && replies[i].Err == nil && replies[i].Value == int64(0) {
				replies[i].Value = int64(1)
			}
		}
	}
}

// simScriptHash is the hash of the script that c runs, or "".
func simScriptHash(c driver.Command) string {
	switch c.Name {
	case "EVALSHA":
		return str(c.Args[0])
	case "EVAL":
		h := sha1.Sum([]byte(str(c.Args[0])))
		return hex.EncodeToString(h[:])
	}
	return ""
}

// simReleases reports whether cmds release a hold: the release scripts of
// the four primitives.
func simReleases(cmds []driver.Command) bool {
	for _, c := range cmds {
		switch simScriptHash(c) {
		case releaseScript.hash, semReleaseScript.hash, rwUnlockScript.hash, rwRUnlockScript.hash:
			return true
		}
	}
	return false
}

// How a call's context ends.
type ctxKind int

const (
	ctxNever    ctxKind = iota
	ctxTimer            // cancelled by a timer up to 100 ms after the call begins
	ctxOnAnswer         // cancelled as the kth node answer of the call arrives
	ctxBetween          // cancelled between the rounds of a fenced acquisition
	ctxShort            // a deadline 0.1 to 4 ms away
	ctxLong             // a deadline 5 ms to two ttls away
	ctxDone             // a release's context that ended before the call (simConfig.releaseEnded)
)

// ctxOdds are the odds of each kind in percent, on any network and on a
// clean one.
var ctxOdds = [...][2]int{
	ctxNever:    {50, 50},
	ctxTimer:    {10, 15},
	ctxOnAnswer: {10, 15},
	ctxBetween:  {10, 20},
	ctxShort:    {10, 0},
	ctxLong:     {10, 0},
	ctxDone:     {0, 0}, // drawn apart, for releases only
}

// A simCall marks a call's context, so that the port can tell whether the
// caller's context had ended (the core detaches node calls from the
// caller's cancellation but keeps its values).
type simCallKey struct{}

type simCall struct{ ctx context.Context }

// simCallEnded reports whether the context of the call that sends on ctx
// has ended.
func simCallEnded(ctx context.Context) bool {
	c, ok := ctx.Value(simCallKey{}).(*simCall)
	return ok && c.ctx.Err() != nil
}

type simCancelKey struct{}

// A simCanceller ends a call's context at a moment the network picks: as
// the call's kth node answer arrives (answers), or between the two rounds
// of a fenced acquisition (between). For the latter, the answer that gives
// round 1 of the call's acquisition its majority arms the Client's clock,
// and the clock's next reading, the check of the validity window that comes
// just before round 2, cancels the context. The core detaches node calls
// from the caller's cancellation but keeps its values, so Exec finds the
// canceller in its ctx.
type simCanceller struct {
	cancel  context.CancelFunc
	answers atomic.Int32
	between bool

	mu    sync.Mutex
	token string // the acquisition followed: the first one seen
	yes   int    // its round-1 agreements so far
}

// observe is told of each batch sent under the canceller's call.
func (c *simCanceller) observe(p simPool, cmds []driver.Command, replies []driver.Reply, err error) {
	if !c.between {
		if c.answers.Add(-1) == 0 {
			c.cancel()
		}
		return
	}
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cmd := range cmds {
		acquire := cmd.Name == "EVALSHA" && cmd.Args[0] == acquireFencedScript.hash ||
			cmd.Name == "EVAL" && cmd.Args[0] == acquireFencedScript.src
		if !acquire {
			continue
		}
		if c.token == "" {
			c.token = str(cmd.Args[4])
		}
		if counter, ok := replies[i].Value.(int64); ok && counter >= 0 && replies[i].Err == nil && str(cmd.Args[4]) == c.token {
			if c.yes++; c.yes == quorum(p.w.cfg.nodes) {
				p.clock.armed.Store(c)
			}
		}
	}
}

// A simClock is a Client's clock: time.Now, which cancels an armed call's
// context on its next reading.
type simClock struct{ armed atomic.Pointer[simCanceller] }

func (c *simClock) Now() time.Time {
	if k := c.armed.Swap(nil); k != nil {
		k.cancel()
	}
	return time.Now()
}

// callCtx returns the context for one call, drawn from rng, its kind, and a
// function that ends it once the call has returned.
func (cfg simConfig) callCtx(rng *rand.Rand, release bool) (context.Context, ctxKind, context.CancelFunc) {
	call := &simCall{}
	bg := context.WithValue(context.Background(), simCallKey{}, call)
	ctx, kind, cancel := cfg.drawCtx(rng, bg, release)
	call.ctx = ctx
	return ctx, kind, cancel
}

func (cfg simConfig) drawCtx(rng *rand.Rand, bg context.Context, release bool) (context.Context, ctxKind, context.CancelFunc) {
	if release && rng.Float64() < cfg.releaseEnded {
		ctx, cancel := context.WithCancel(bg)
		cancel() // the request that held the lock is over: defer l.Unlock(ctx)
		return ctx, ctxDone, cancel
	}
	quanta := func(lo, hi time.Duration) time.Duration { // uniform in [lo, hi], in steps of simQuantum
		return lo + time.Duration(rng.Int64N(int64((hi-lo)/simQuantum)+1))*simQuantum
	}
	kind, x := ctxNever, rng.IntN(100)
	for k, odds := range ctxOdds {
		o := odds[0]
		if cfg.clean {
			o = odds[1]
		}
		if x < o {
			kind = ctxKind(k)
			break
		}
		x -= o
	}
	switch kind {
	case ctxTimer:
		ctx, cancel := context.WithCancel(bg)
		t := time.AfterFunc(quanta(0, 100*time.Millisecond), cancel)
		return ctx, kind, func() { t.Stop(); cancel() }
	case ctxOnAnswer, ctxBetween:
		c := &simCanceller{between: kind == ctxBetween}
		c.answers.Store(int32(1 + rng.IntN(2*cfg.nodes))) // up to both rounds of a fenced Lock
		ctx, cancel := context.WithCancel(context.WithValue(bg, simCancelKey{}, c))
		c.cancel = cancel
		return ctx, kind, cancel
	case ctxShort:
		ctx, cancel := context.WithTimeout(bg, quanta(simQuantum, 4*time.Millisecond))
		return ctx, kind, cancel
	case ctxLong:
		ctx, cancel := context.WithTimeout(bg, quanta(5*time.Millisecond, 2*cfg.ttl))
		return ctx, kind, cancel
	}
	ctx, cancel := context.WithCancel(bg)
	return ctx, ctxNever, cancel
}

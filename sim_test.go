package redlock

// A deterministic simulation of the fenced lock, in the style of FoundationDB
// and TigerBeetle: many clients run the real Client code against in-memory
// Redis nodes over a simulated network, under virtual time (testing/synctest),
// with random message delays and drops, node crashes and restarts, node
// clocks that run fast, and client pauses. An independent checker then
// verifies, from what each client observed:
//
//   - mutual exclusion: the validity intervals of granted locks do not
//     overlap (each cut short at its Unlock);
//   - fencing: tokens grow strictly in the order locks were granted;
//   - the guarded resource never accepted a write from a holder older than
//     one whose write it had already accepted.
//
// Each schedule is drawn from a seed, printed on failure. The fault schedule
// (which node crashes when, for how long) follows from the seed alone; the
// interleaving of goroutines that wake at the same virtual instant is up to
// the Go scheduler, so a replay reproduces the faults but not always every
// message order.
//
//	go test -run TestSimulation .                               # fast subset
//	REDLOCK_SIM_SCHEDULES=100000 go test -run TestSimulation -timeout 60m .
//	REDLOCK_SIM_SEED=1234 REDLOCK_SIM_SCHEDULES=1 go test -run TestSimulation -v .

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// simConfig is one schedule's shape, drawn from its seed.
type simConfig struct {
	seed      uint64
	nodes     int
	clients   int
	cycles    int           // lock attempts per client
	ttl       time.Duration //
	maxDelay  time.Duration // one-way message delay is uniform in [0, maxDelay]
	dropRate  float64       // chance that a request or a reply is lost
	crashes   int           // node crashes over the run
	amnesia   bool          // crashed nodes restart without their data: the assumption broken
	clockRate float64       // node clocks run this much faster than true time
	pauseRate float64       // chance that a holder stalls past its validity before writing
}

func drawConfig(seed uint64, amnesia bool) simConfig {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	nodes := []int{3, 5, 5, 7}[r.IntN(4)]
	return simConfig{
		seed:      seed,
		nodes:     nodes,
		clients:   2 + r.IntN(5),
		cycles:    3 + r.IntN(6),
		ttl:       time.Duration(200+r.IntN(800)) * time.Millisecond,
		maxDelay:  time.Duration(1+r.IntN(30)) * time.Millisecond,
		dropRate:  r.Float64() * 0.1,
		crashes:   r.IntN(nodes + 1),
		amnesia:   amnesia,
		clockRate: 1 + r.Float64()*0.009, // within the default drift factor of 0.01
		pauseRate: 0.25,
	}
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

func (n *simNode) get(k string) (string, bool) {
	v, ok := n.data[k]
	if ok && !v.expires.IsZero() && !n.now().Before(v.expires) {
		delete(n.data, k)
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
}

// restart brings the node back, with its data (persistence) or without.
func (n *simNode) restart(keepData bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.up = true
	n.scripts = map[string]bool{}
	if !keepData {
		n.data = map[string]simValue{}
	}
}

var errSimDown = errors.New("sim: connection refused")

func (n *simNode) exec(cmd string, args []any) (any, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.up {
		return nil, errSimDown
	}
	switch cmd {
	case "SET": // key value NX PX ms
		if _, held := n.get(str(args[0])); held {
			return nil, nil
		}
		n.setPX(str(args[0]), str(args[1]), num(args[4]))
		return "OK", nil
	case "EVALSHA":
		hash := str(args[0])
		if !n.scripts[hash] {
			return nil, ReplyError("NOSCRIPT No matching script")
		}
		return n.script(hash, args[2:])
	case "EVAL":
		h := sha1.Sum([]byte(str(args[0])))
		hash := hex.EncodeToString(h[:])
		n.scripts[hash] = true
		return n.script(hash, args[2:])
	}
	return nil, ReplyError("ERR unknown command " + cmd)
}

// script runs the Go equivalent of each embedded Lua script.
func (n *simNode) script(hash string, ka []any) (any, error) {
	key := str(ka[0])
	switch hash {
	case releaseScript.hash:
		if v, ok := n.get(key); ok && v == str(ka[1]) {
			delete(n.data, key)
			return int64(1), nil
		}
		return int64(0), nil
	case extendScript.hash:
		if v, ok := n.get(key); ok && v == str(ka[1]) {
			if exp := n.now().Add(time.Duration(num(ka[2])) * time.Millisecond); exp.After(n.data[key].expires) {
				n.setPX(key, v, num(ka[2])) // PEXPIRE ... GT: never shorter
			}
			return int64(1), nil
		}
		return int64(0), nil
	case acquireFencedScript.hash:
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
		n.data[str(ka[1])] = simValue{v: strconv.FormatInt(num(ka[3]), 10)}
		return int64(1), nil
	}
	return nil, ReplyError("NOSCRIPT unknown script")
}

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
	time.Sleep(time.Duration(w.intn(int(w.cfg.maxDelay) + 1)))
	return w.float() >= w.cfg.dropRate
}

var errSimTimeout = errors.New("sim: i/o timeout")

// roundTrip sends a batch of commands to a node in one message, which runs
// them in order, and waits for the replies at most timeout, as a connection
// with a read deadline does. Other connections' commands may run between
// them, as on a real server.
func (w *simWorld) roundTrip(node int, timeout time.Duration, cmds []Command) ([]Reply, error) {
	type result struct {
		replies []Reply
		err     error
	}
	out := make(chan result, 1)
	w.wires.Go(func() {
		if !w.hop() {
			return
		}
		r := result{replies: make([]Reply, len(cmds))}
		for i, c := range cmds {
			v, err := w.nodes[node].exec(c.Name, c.Args)
			if errors.Is(err, errSimDown) {
				r = result{err: err} // the connection is refused
				break
			}
			r.replies[i] = Reply{Value: v, Err: err}
		}
		if !w.hop() {
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
// message.
type simPool struct {
	w    *simWorld
	node int
}

func (p simPool) Exec(ctx context.Context, cmds []Command, replies []Reply) error {
	deadline, _ := ctx.Deadline()
	// A real connection has written the commands by the time it returns;
	// the message in transit here outlives the call, and the caller reuses
	// their arguments.
	batch := make([]Command, len(cmds))
	for i, c := range cmds {
		batch[i] = c
		batch[i].Args = slices.Clone(c.Args)
	}
	got, err := p.w.roundTrip(p.node, time.Until(deadline), batch)
	if err != nil {
		return err
	}
	copy(replies, got)
	return nil
}

// A grant is one lock as its holder saw it.
type grant struct {
	client  int
	token   uint64
	granted time.Time // when Lock returned
	end     time.Time // the earlier of Until and the start of Unlock
}

// simResource is the guarded resource: it accepts a write unless its token
// is lower than the highest it has accepted. It records the grant index of
// each write it accepted, for the checker.
type simResource struct {
	mu       sync.Mutex
	highest  uint64
	accepted []int
}

func (r *simResource) write(token uint64, grantIndex int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return
	}
	r.highest = token
	r.accepted = append(r.accepted, grantIndex)
}

// simRun is the outcome of one schedule.
type simRun struct {
	grants     []grant
	accepted   []int
	violations []string
}

// runSchedule plays one schedule inside a synctest bubble.
func runSchedule(t *testing.T, cfg simConfig) simRun {
	var run simRun
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 1))}
		faults := rand.New(rand.NewPCG(cfg.seed, 2)) // the fault schedule, from the seed alone
		for range cfg.nodes {
			w.nodes = append(w.nodes, newSimNode(cfg.clockRate))
		}
		pools := make([]Pool, cfg.nodes)
		for i := range pools {
			pools[i] = simPool{w: w, node: i}
		}

		var (
			mu       sync.Mutex
			resource simResource
			running  atomic.Int32
			wg       sync.WaitGroup
		)
		record := func(g grant) int {
			mu.Lock()
			defer mu.Unlock()
			run.grants = append(run.grants, g)
			return len(run.grants) - 1
		}
		setEnd := func(i int, end time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if end.Before(run.grants[i].end) {
				run.grants[i].end = end
			}
		}

		var clients []*Client
		for id := range cfg.clients {
			client, err := New(pools, WithFencing(), WithNodeTimeout(50*time.Millisecond),
				WithTries(8), WithRetryDelay(10*time.Millisecond, 100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, client)
			pause := rand.New(rand.NewPCG(cfg.seed, uint64(100+id)))
			running.Add(1)
			wg.Go(func() {
				defer running.Add(-1)
				ctx := context.Background()
				for range cfg.cycles {
					l, err := client.Lock(ctx, "resource", cfg.ttl)
					if err != nil {
						continue
					}
					idx := record(grant{client: id, token: l.Token(), granted: time.Now(), end: l.Until()})
					if pause.Float64() < cfg.pauseRate {
						time.Sleep(cfg.ttl * 2) // a GC pause: the write below comes late
					} else {
						time.Sleep(time.Duration(pause.Int64N(int64(cfg.ttl / 4))))
					}
					resource.write(l.Token(), idx)
					setEnd(idx, time.Now())
					_ = l.Unlock(ctx)
				}
			})
		}

		// The fault schedule: crash a node, keep it down a while, restart it.
		wg.Go(func() {
			for c := 0; c < cfg.crashes && running.Load() > 0; c++ {
				time.Sleep(time.Duration(faults.Int64N(int64(cfg.ttl))))
				n := w.nodes[faults.IntN(cfg.nodes)]
				n.crash()
				time.Sleep(time.Duration(faults.Int64N(int64(cfg.ttl / 2))))
				n.restart(!cfg.amnesia)
			}
		})
		wg.Wait()
		// Virtual time stops when this function returns: first let the node
		// calls left in the background, and their messages, run out.
		for _, c := range clients {
			c.calls.Wait()
		}
		w.wires.Wait()
		run.accepted = resource.accepted
	})
	run.violations = check(run)
	return run
}

// check is the independent checker. It knows nothing of the protocol: only
// what the clients saw and what the resource accepted.
func check(run simRun) []string {
	var v []string
	byTime := slices.Clone(run.grants)
	slices.SortStableFunc(byTime, func(a, b grant) int { return a.granted.Compare(b.granted) })
	for i := 1; i < len(byTime); i++ {
		prev, cur := byTime[i-1], byTime[i]
		if cur.granted.Before(prev.end) {
			v = append(v, fmt.Sprintf("overlap: client %d granted at %v while client %d held until %v",
				cur.client, cur.granted.Format(time.StampMilli), prev.client, prev.end.Format(time.StampMilli)))
		}
		if cur.token <= prev.token {
			v = append(v, fmt.Sprintf("token order: client %d got %d after client %d got %d",
				cur.client, cur.token, prev.client, prev.token))
		}
	}
	// Grants were recorded in the order Lock returned; accepted writes must
	// never go back to an older grant.
	for i := 1; i < len(run.accepted); i++ {
		if run.accepted[i] < run.accepted[i-1] {
			v = append(v, fmt.Sprintf("stale write accepted: grant %d after grant %d",
				run.accepted[i], run.accepted[i-1]))
		}
	}
	return v
}

// simSchedules returns the first seed and the number of schedules to run:
// fast by default, REDLOCK_SIM_SCHEDULES for the full run.
func simSchedules(t *testing.T, fast int) (base uint64, n int) {
	n = fast
	if s := os.Getenv("REDLOCK_SIM_SCHEDULES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("REDLOCK_SIM_SCHEDULES=%q: want a positive count", s)
		}
	}
	base = uint64(time.Now().UnixNano())
	if s := os.Getenv("REDLOCK_SIM_SEED"); s != "" {
		var err error
		if base, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("REDLOCK_SIM_SEED: %v", err)
		}
	}
	return base, n
}

// forSchedules runs n schedules, seeds base to base+n-1, spread over one
// worker per CPU, and calls check with each result. check must be safe for
// concurrent use.
func forSchedules(t *testing.T, base uint64, n int, amnesia bool, check func(*testing.T, simConfig, simRun)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	t.Run("schedules", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for i := w; i < n; i += workers {
					cfg := drawConfig(base+uint64(i), amnesia)
					if amnesia {
						cfg.crashes = cfg.nodes * 3 // many restarts, so that a majority forgets
					}
					check(t, cfg, runSchedule(t, cfg))
				}
			})
		}
	})
}

// Under the stated assumptions (nodes keep their data across restarts, node
// clocks within the drift factor), no schedule violates any property.
func TestSimulation(t *testing.T) {
	base, n := simSchedules(t, 60)
	t.Logf("seeds %d..%d (replay one with REDLOCK_SIM_SEED=<seed> REDLOCK_SIM_SCHEDULES=1)", base, base+uint64(n)-1)
	var grants, writes, paused atomic.Int64
	forSchedules(t, base, n, false, func(t *testing.T, cfg simConfig, run simRun) {
		grants.Add(int64(len(run.grants)))
		writes.Add(int64(len(run.accepted)))
		paused.Add(int64(len(run.grants) - len(run.accepted)))
		if len(run.violations) > 0 {
			t.Fatalf("seed %d (%+v): %d violations, first: %s", cfg.seed, cfg, len(run.violations), run.violations[0])
		}
	})
	t.Logf("%d schedules, %d locks granted, %d writes accepted, %d stale writes rejected, 0 violations",
		n, grants.Load(), writes.Load(), paused.Load())
	if grants.Load() == 0 {
		t.Fatal("no lock was ever granted: the simulation exercised nothing")
	}
}

// With the persistence assumption broken on purpose (nodes restart empty and
// at once), the checker must find violations: proof that it can fail.
func TestSimulationCatchesAmnesia(t *testing.T) {
	base, n := simSchedules(t, 60)
	var (
		mu      sync.Mutex
		found   int
		example string
	)
	forSchedules(t, base, n, true, func(t *testing.T, cfg simConfig, run simRun) {
		if len(run.violations) == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		found++
		if example == "" {
			example = fmt.Sprintf("seed %d: %s", cfg.seed, run.violations[0])
		}
	})
	t.Logf("%d of %d schedules with amnesiac restarts violated a property; e.g. %s", found, n, example)
	if found == 0 {
		t.Fatalf("no violation found in %d schedules with amnesiac restarts: the checker cannot fail", n)
	}
}

package redlock_test

// Network faults: toxiproxy between the client and each of five local
// redis-server processes, injecting silence, one-way loss, latency, slow and
// sliced transfers, resets and truncated replies while clients contend for
// a lock. docs/chaos.md, "Network faults", has the figures and commands.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// chaosNetSeedEnv replays TestChaosNetworkFaults with a given seed.
const chaosNetSeedEnv = "REDLOCK_CHAOS_NET_SEED"

// TestChaosNetworkFaults puts a toxiproxy proxy in front of each of five
// local redis-server processes. Eight workers (chaosLoad, with WithFencing)
// contend for one key while a seeded schedule applies network faults to one
// or two proxies at a time, and sometimes to three, which leaves no
// majority. Every fault kind comes up once in each round of
// len(chaosNetKinds) episodes. The checker must find 0 violations, every
// call must return within its bound with a documented error, and locks must
// keep being granted.
//
// Set REDLOCK_CHAOS_NET_SEED to replay a schedule. toxiproxy draws the
// jitter of latency and the sizes of slices from its own random source, so
// a replay repeats the faults but not every delay.
func TestChaosNetworkFaults(t *testing.T) {
	t.Parallel() // chaosStart says why
	// chaosStart's first step; this test starts its servers itself.
	stalls.watch(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosNetSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", chaosNetSeedEnv, s, err)
		}
	}
	t.Logf("seed %d; replay with %s=%d go test -run 'TestChaosNetworkFaults$' .", seed, chaosNetSeedEnv, seed)
	fmt.Printf("TestChaosNetworkFaults: seed %d\n", seed)

	const (
		workers     = 8
		minCycles   = 1000
		limit       = 75 * time.Second
		nodeTimeout = 150 * time.Millisecond
		tries       = 3
		retryMax    = 20 * time.Millisecond
		ttl         = time.Second
	)
	minEpisodes := 4 * len(chaosNetKinds) // each kind at least four times
	servers := redistest.StartN(t, 5)
	proxies := chaosStartToxiproxy(t, servers)
	addrs := proxies.listen
	ld := &chaosLoad{
		client: realClient(t, addrs, redlock.WithNodeTimeout(nodeTimeout), redlock.WithFencing(),
			redlock.WithTries(tries), redlock.WithRetryDelay(2*time.Millisecond, retryMax)),
		key:        "chaos:network",
		ttl:        ttl,
		lockBudget: chaosLockBudget(tries, true, nodeTimeout, retryMax),
		callBudget: nodeTimeout + chaosSlack,
		check:      newChaosChecker(),
	}

	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	start := time.Now()
	waitLoad := ld.start(ctx, workers, seed)
	defer waitLoad()
	defer cancel()

	sched := &chaosNetSchedule{proxies: proxies, rng: rand.New(rand.NewPCG(seed, 0))}
	var schedErr error
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		schedErr = sched.run(ctx)
	}()

	enough := realEventually(limit, func() bool {
		select {
		case <-schedDone: // ended early: a harness error
			return true
		default:
		}
		return ctx.Err() != nil || ld.cycles.Load() >= minCycles && sched.episodes.Load() >= int64(minEpisodes)
	})
	cancel()
	<-schedDone
	waitLoad()
	elapsed := time.Since(start)

	t.Logf("seed %d: %v, %d fault episodes, faults injected: %s", seed, elapsed.Round(time.Second),
		sched.episodes.Load(), sched.counts())
	ld.verdict(t)
	if schedErr != nil {
		t.Errorf("fault schedule: %v", schedErr)
	}
	if !enough || ld.cycles.Load() < minCycles || sched.episodes.Load() < int64(minEpisodes) {
		t.Errorf("liveness: %d cycles and %d episodes in %v, want %d and %d",
			ld.cycles.Load(), sched.episodes.Load(), elapsed, minCycles, minEpisodes)
	}
	if t.Failed() {
		t.Logf("replay with %s=%d", chaosNetSeedEnv, seed)
	}
}

// toxiproxy runs in a process of its own: the test binary, started again
// with only TestChaosToxiproxyHelper selected. In-process, its links leak
// goroutines whenever a connection closes with data in flight (a toxic stays
// blocked sending to a link whose writer has gone), which happens at every
// timeout of this test, and the leak check in TestMain would fail on them.
//
// A fault is never added to or removed from a proxy that has connections:
// toxiproxy can deadlock there. RemoveToxic and AddToxic hold the proxy's
// toxic lock while they wait for each link's toxics to stop, and a toxic
// blocked sending to a link whose writer has gone never stops, while that
// writer waits for the same lock to unregister its link. (A first version
// hit it within a minute.) So the helper swaps proxies instead: it builds a
// new proxy with the fault's toxics in place, stops the old one, which
// closes its connections, and starts the new one on the same address.
// Healing swaps in a proxy without toxics. Each fault therefore begins and
// ends with the node's open connections dropped, and applies to every
// connection made while it lasts, from its first byte.

// chaosToxiproxyEnv carries the upstream addresses to the helper process,
// comma-separated; it also marks the process as the helper.
const chaosToxiproxyEnv = "REDLOCK_TOXIPROXY_UPSTREAMS"

// chaosToxiproxyTimeout bounds the wait for the helper's answer to a
// command.
const chaosToxiproxyTimeout = 10 * time.Second

// TestChaosToxiproxyHelper is not a test: it is the toxiproxy process that
// TestChaosNetworkFaults starts, and skips otherwise. It puts one proxy on
// loopback in front of each upstream, prints "listen <addr>" for each and
// then "ready", and then serves, one line per command, until stdin closes:
//
//	swap <proxy> [<toxic JSON>]...
//
// replaces the proxy with one that has these toxics (none: a healthy one),
// on the same address, separated by tabs, and answers "ok" or
// "err <reason>".
func TestChaosToxiproxyHelper(t *testing.T) {
	upstreams := os.Getenv(chaosToxiproxyEnv)
	if upstreams == "" {
		t.Skip("the toxiproxy process of TestChaosNetworkFaults; it runs only when that test starts it")
	}
	// Some toxics log through zerolog's global logger.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	ups := strings.Split(upstreams, ",")
	proxies := make([]*toxiproxy.Proxy, len(ups))
	start := func(i int, listen string, toxics []string) (*toxiproxy.Proxy, error) {
		p := toxiproxy.NewProxy(api, "node"+strconv.Itoa(i), listen, ups[i])
		for _, def := range toxics {
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(def)); err != nil {
				return nil, fmt.Errorf("%s: %v", def, err)
			}
		}
		return p, p.Start()
	}
	for i := range ups {
		p, err := start(i, "127.0.0.1:0", nil)
		if err != nil {
			fmt.Printf("err proxy %d: %v\n", i, err)
			return
		}
		proxies[i] = p
		fmt.Printf("listen %s\n", p.Listen)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		fields := strings.Split(in.Text(), "\t")
		op, index, _ := strings.Cut(fields[0], " ")
		i, err := strconv.Atoi(index)
		switch {
		case op != "swap":
			err = fmt.Errorf("unknown command %q", op)
		case err == nil && (i < 0 || i >= len(proxies)):
			err = fmt.Errorf("no proxy %d", i)
		}
		if err == nil {
			listen := proxies[i].Listen
			proxies[i].Stop()
			var p *toxiproxy.Proxy
			if p, err = start(i, listen, fields[1:]); p == nil {
				// A toxic was refused: serve the address healthy, and
				// let the parent fail on the error.
				p, _ = start(i, listen, nil)
			}
			proxies[i] = p
		}
		if err != nil {
			fmt.Printf("err %v\n", err)
			continue
		}
		fmt.Println("ok")
	}
	// The parent kills this process; whatever toxiproxy leaked dies with it.
}

// chaosToxiproxy is the parent's end of the helper process.
type chaosToxiproxy struct {
	listen []string // each proxy's address, in the order of the servers

	mu     sync.Mutex
	stdin  io.WriteCloser
	lines  chan string // the helper's stdout, line by line
	stderr *chaosSyncBuffer
}

// chaosStartToxiproxy starts the helper process with a proxy in front of
// each server and waits until they listen. The process is killed when the
// test ends, pass or fail; it also exits if this process dies, when its
// stdin closes.
func chaosStartToxiproxy(t *testing.T, servers []*redistest.Server) *chaosToxiproxy {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]string, len(servers))
	for i, s := range servers {
		ups[i] = s.Addr
	}
	cmd := exec.Command(exe, "-test.run=^TestChaosToxiproxyHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), chaosToxiproxyEnv+"="+strings.Join(ups, ","))
	tp := &chaosToxiproxy{lines: make(chan string, 16), stderr: &chaosSyncBuffer{}}
	cmd.Stderr = tp.stderr
	if tp.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the toxiproxy process: %v", err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer close(tp.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			tp.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		tp.stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range tp.lines { // let the copier finish
		}
		<-copied
	})
	for {
		line, err := tp.line()
		if err != nil {
			t.Fatalf("toxiproxy process: %v\n%s", err, tp.stderr)
		}
		if line == "ready" {
			break
		}
		addr, ok := strings.CutPrefix(line, "listen ")
		if !ok {
			t.Fatalf("toxiproxy process: %q\n%s", line, tp.stderr)
		}
		tp.listen = append(tp.listen, addr)
	}
	if len(tp.listen) != len(servers) {
		t.Fatalf("toxiproxy process started %d proxies, want %d", len(tp.listen), len(servers))
	}
	return tp
}

// line returns the helper's next line of output.
func (tp *chaosToxiproxy) line() (string, error) {
	timer := time.NewTimer(chaosToxiproxyTimeout)
	defer timer.Stop()
	select {
	case line, ok := <-tp.lines:
		if !ok {
			return "", errors.New("exited")
		}
		return line, nil
	case <-timer.C:
		return "", fmt.Errorf("no answer in %v", chaosToxiproxyTimeout)
	}
}

// do sends one command and waits for its answer.
func (tp *chaosToxiproxy) do(command string) error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if _, err := io.WriteString(tp.stdin, command+"\n"); err != nil {
		return fmt.Errorf("toxiproxy %q: %v", command, err)
	}
	line, err := tp.line()
	switch {
	case err != nil:
		return fmt.Errorf("toxiproxy %q: %v\n%s", command, err, tp.stderr)
	case line != "ok":
		return fmt.Errorf("toxiproxy %q: %s", command, line)
	}
	return nil
}

// swap replaces proxy i with one that has toxics, each as toxiproxy's
// JSON; none heals it.
func (tp *chaosToxiproxy) swap(i int, toxics ...string) error {
	return tp.do(strings.Join(append([]string{"swap " + strconv.Itoa(i)}, toxics...), "\t"))
}

// chaosSyncBuffer collects a process's output while a test may read it.
type chaosSyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *chaosSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *chaosSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A chaosNetKind is one network fault: the toxics it adds to a proxy, made
// from the schedule's random source.
type chaosNetKind struct {
	name   string
	toxics func(rng *rand.Rand) []string // JSON toxic definitions
}

// chaosNetKinds are the faults the schedule injects. Stream "upstream" is
// client to server, "downstream" server to client.
var chaosNetKinds = []chaosNetKind{
	// Silence: the proxy accepts and holds the data, nothing gets through
	// either way (timeout 0 never closes). A silent or black-holed node.
	{"silent", func(*rand.Rand) []string {
		return []string{chaosToxic("timeout", "upstream", `"timeout":0`), chaosToxic("timeout", "downstream", `"timeout":0`)}
	}},
	// One-way loss, client to server: commands never arrive.
	{"loss-up", func(*rand.Rand) []string {
		return []string{chaosToxic("timeout", "upstream", `"timeout":0`)}
	}},
	// One-way loss, server to client: commands run, replies are lost. A
	// SET lands, but the client cannot count it.
	{"loss-down", func(*rand.Rand) []string {
		return []string{chaosToxic("timeout", "downstream", `"timeout":0`)}
	}},
	// Latency with jitter, each way, from 10 to 300 ms: sometimes within
	// the node timeout, sometimes past it.
	{"latency", func(rng *rand.Rand) []string {
		var out []string
		for _, stream := range []string{"upstream", "downstream"} {
			l := 10 + rng.IntN(291)
			out = append(out, chaosToxic("latency", stream, fmt.Sprintf(`"latency":%d,"jitter":%d`, l, l/2)))
		}
		return out
	}},
	// A slow link: 1 to 3 KB/s each way, so a command or a batch of
	// replies takes tens to hundreds of milliseconds to cross.
	{"bandwidth", func(rng *rand.Rand) []string {
		return []string{
			chaosToxic("bandwidth", "upstream", fmt.Sprintf(`"rate":%d`, 1+rng.IntN(3))),
			chaosToxic("bandwidth", "downstream", fmt.Sprintf(`"rate":%d`, 1+rng.IntN(3))),
		}
	}},
	// Sliced writes: every transfer cut into pieces of a few bytes, each
	// delayed by up to 5 ms, so replies arrive split inside their framing.
	{"slicer", func(rng *rand.Rand) []string {
		var out []string
		for _, stream := range []string{"upstream", "downstream"} {
			size := 1 + rng.IntN(8)
			out = append(out, chaosToxic("slicer", stream, fmt.Sprintf(`"average_size":%d,"size_variation":%d,"delay":%d`,
				size, rng.IntN(size), 200+rng.IntN(4800))))
		}
		return out
	}},
	// A reset in the middle of an exchange: the command runs, then, up to
	// 100 ms later, the reply is dropped and the connection reset (RST).
	{"reset", func(rng *rand.Rand) []string {
		return []string{chaosToxic("reset_peer", "downstream", fmt.Sprintf(`"timeout":%d`, rng.IntN(100)))}
	}},
	// A truncated reply: the connection closes after 1 to 30 bytes have
	// come back, usually in the middle of a reply.
	{"truncate", func(rng *rand.Rand) []string {
		return []string{chaosToxic("limit_data", "downstream", fmt.Sprintf(`"bytes":%d`, 1+rng.IntN(30)))}
	}},
}

// chaosToxic returns a toxic definition as toxiproxy's API takes it, named
// after its type and stream.
func chaosToxic(typ, stream, attributes string) string {
	return fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":{%s}}`, typ+"_"+stream, typ, stream, attributes)
}

// A chaosNetSchedule injects network faults in episodes, as chaosSchedule
// does for container faults: it faults one, two or (rarely) three proxies,
// holds, heals them, and pauses. The first proxy of each episode
// gets the next kind of a shuffled round, so every kind comes up once per
// len(chaosNetKinds) episodes; the others get kinds at random.
type chaosNetSchedule struct {
	proxies  *chaosToxiproxy
	rng      *rand.Rand
	episodes atomic.Int64

	mu       sync.Mutex
	injected map[string]int
}

func (s *chaosNetSchedule) run(ctx context.Context) error {
	var round []int
	for ctx.Err() == nil {
		if len(round) == 0 {
			round = s.rng.Perm(len(chaosNetKinds))
		}
		k := 1 + s.rng.IntN(2)
		if s.rng.IntN(7) == 0 {
			k = 3
		}
		nodes := s.rng.Perm(len(s.proxies.listen))[:k]
		kinds := []int{round[0]}
		round = round[1:]
		for len(kinds) < k {
			kinds = append(kinds, s.rng.IntN(len(chaosNetKinds)))
		}
		hold := 200*time.Millisecond + time.Duration(s.rng.Int64N(int64(time.Second)))
		gap := 100*time.Millisecond + time.Duration(s.rng.Int64N(int64(300*time.Millisecond)))

		var err error
		for j, i := range nodes {
			if err = s.inject(i, chaosNetKinds[kinds[j]]); err != nil {
				break
			}
		}
		if err == nil {
			s.episodes.Add(1)
			sleepCtx(ctx, hold)
		}
		// Heal even when ctx has ended or an injection failed.
		for _, i := range nodes {
			if herr := s.proxies.swap(i); herr != nil && err == nil {
				err = herr
			}
		}
		if err != nil {
			return err
		}
		sleepCtx(ctx, gap)
	}
	return nil
}

// inject puts kind's toxics on proxy i.
func (s *chaosNetSchedule) inject(i int, kind chaosNetKind) error {
	s.mu.Lock()
	if s.injected == nil {
		s.injected = map[string]int{}
	}
	s.injected[kind.name]++
	s.mu.Unlock()
	if err := s.proxies.swap(i, kind.toxics(s.rng)...); err != nil {
		return fmt.Errorf("%s on node %d: %v", kind.name, i, err)
	}
	return nil
}

func (s *chaosNetSchedule) counts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	total := 0
	for _, k := range chaosNetKinds {
		parts = append(parts, fmt.Sprintf("%d %s", s.injected[k.name], k.name))
		total += s.injected[k.name]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

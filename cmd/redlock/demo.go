package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/keys"
	"github.com/quorumlock/redlock/redigo"
)

const demoUsage = `usage: redlock demo [flags]

Starts in-process Redis nodes (miniredis) and workers that take turns
incrementing a guarded counter under one Redlock lock, through Client.Do.
Worker w1 sometimes freezes, like a process in a long GC pause, and writes
after waking. A fault script kills nodes one by one until the quorum is lost,
then restores them. Exits 1 if the checker saw two valid holders at once.
--svg draws the run: a lane per node, shaded while down, and a lane per
worker with its holds, fencing tokens, writes and freezes.

Flags:
`

// demoKey is the one lock the workers contend for.
const demoKey = "demo:counter"

type demoConfig struct {
	nodes, workers int
	duration, ttl  time.Duration
	tick           time.Duration
	record         bool // keep a timeline of the run, for --svg and --html
}

func demoMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage)
		printFlags(fs, stderr)
	}
	cfg := demoConfig{tick: 500 * time.Millisecond}
	fs.IntVar(&cfg.nodes, "nodes", 5, "number of in-process Redis nodes (3 to 9)")
	fs.IntVar(&cfg.workers, "workers", 4, "number of workers contending for the lock (2 to 16)")
	fs.DurationVar(&cfg.duration, "duration", 15*time.Second, "how long the demo runs; the fault script scales with it")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lock ttl")
	svgOut := fs.String("svg", "", "also draw the run as an SVG picture into this `file`")
	htmlOut := fs.String("html", "", "also write an HTML page with the picture and the text timeline into this `file`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "redlock demo: unexpected argument %q (demo takes flags only)\n", fs.Arg(0))
		return exitUsage
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return exitUsage
	}
	for _, o := range []struct{ flag, name string }{{"svg", *svgOut}, {"html", *htmlOut}} {
		if err := checkWritable(o.name); err != nil {
			// Before the run, not after it: the run takes --duration.
			fmt.Fprintf(stderr, "redlock demo: --%s %s: %v\n", o.flag, o.name, err)
			return exitUsage
		}
	}
	cfg.record = *svgOut != "" || *htmlOut != ""
	var text strings.Builder
	out := stdout
	if *htmlOut != "" {
		out = io.MultiWriter(stdout, &text)
	}
	sum, err := runDemo(context.Background(), cfg, out)
	if err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 1
	}
	if err := writePictures(sum.timeline, *svgOut, *htmlOut, text.String()); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 1
	}
	if sum.violations > 0 {
		return 1
	}
	return 0
}

func (c demoConfig) check() error {
	switch {
	case c.nodes < 3 || c.nodes > 9:
		return fmt.Errorf("--nodes %d: want 3 to 9", c.nodes)
	case c.workers < 2 || c.workers > 16:
		return fmt.Errorf("--workers %d: want 2 to 16", c.workers)
	case c.ttl < 100*time.Millisecond:
		return fmt.Errorf("--ttl %v: want at least 100ms", c.ttl)
	case c.duration > 10*time.Minute:
		return fmt.Errorf("--duration %v: want at most 10m", c.duration)
	}
	// Killed nodes come back empty, so they must stay down longer than the
	// ttl (docs/safety.md, delayed restart).
	if s := c.script(); s.restore-s.kills[len(s.kills)-1] <= 2*c.ttl {
		return fmt.Errorf("--duration %v is too short for --ttl %v: nodes must stay down over 2 ttls; try %v",
			c.duration, c.ttl, 10*c.ttl+5*time.Second)
	}
	return nil
}

// A demoScript is when the fault script acts, from the start of the demo.
type demoScript struct {
	kills   []time.Duration // one node each; the last one loses the quorum
	restore time.Duration   // all killed nodes come back, empty
}

// script spreads the kills over 15% to 45% of the run and restores at 70%.
// It kills N − quorum + 1 nodes: the first count that leaves no majority.
func (c demoConfig) script() demoScript {
	n := c.nodes - (c.nodes/2 + 1) + 1
	var s demoScript
	for i := range n {
		frac := 0.15 + 0.30*float64(i)/float64(max(n-1, 1))
		s.kills = append(s.kills, time.Duration(frac*float64(c.duration)))
	}
	s.restore = time.Duration(0.70 * float64(c.duration))
	return s
}

// demoSummary is what the last line reports.
type demoSummary struct {
	acquisitions, writes, stale, lost, violations int64
	counter                                       int64
	timeline                                      *timeline // with demoConfig.record
}

func (s demoSummary) String() string {
	return fmt.Sprintf("violations=%d acquisitions=%d writes=%d stale_rejected=%d locks_lost=%d counter=%d",
		s.violations, s.acquisitions, s.writes, s.stale, s.lost, s.counter)
}

// runDemo plays the demo and returns its counts. Every goroutine and node it
// starts has stopped when it returns.
func runDemo(ctx context.Context, cfg demoConfig, out io.Writer) (demoSummary, error) {
	start := time.Now()
	p := &printer{out: out, start: start}
	if cfg.record {
		p.tl = newTimeline(start, cfg.nodes, cfg.workers)
	}
	cl, err := startCluster(cfg.nodes)
	if err != nil {
		return demoSummary{}, err
	}
	defer cl.close()
	q := cfg.nodes/2 + 1
	guard := &guard{}

	p.say("%d in-process Redis nodes, quorum %d; %d workers contend for %q (ttl %v, extended every %v)",
		cfg.nodes, q, cfg.workers, demoKey, cfg.ttl, (cfg.ttl / 3).Round(time.Millisecond))
	p.say("w1 freezes now and then, like a long GC pause; the counter checks each writer's validity")
	p.say("(an oracle only a demo has: real stores need fencing tokens, see docs/safety.md)")
	p.line("%7s  %-*s  %-6s %-9s %5s %7s %6s", "t", 3*cfg.nodes-1, "nodes", "holder", "validity", "acq/s", "writes", "stale")

	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	var acquisitions, lost atomic.Int64
	for i := range cfg.workers {
		w := &worker{name: fmt.Sprintf("w%d", i+1), careless: i == 0}
		client, pools, err := cl.client(w)
		if err != nil {
			cancel()
			wg.Wait()
			return demoSummary{}, err
		}
		wg.Go(func() {
			defer closePools(pools)
			// Close ends the Client's release subscriptions (wake-up),
			// which would otherwise outlive the demo until they idle out.
			defer client.Close()
			w.loop(ctx, client, cfg.ttl, guard, p, &acquisitions, &lost)
		})
	}
	wg.Go(func() { playScript(ctx, cfg, cl, guard, p) })

	ticker := time.NewTicker(cfg.tick)
	var lastAcq int64
	for done := false; !done; {
		select {
		case <-ticker.C:
		case <-ctx.Done():
			done = true
			continue
		}
		acq := acquisitions.Load()
		rate := float64(acq-lastAcq) / cfg.tick.Seconds()
		lastAcq = acq
		holder, left := guard.holder()
		validity := "-"
		if holder != "" {
			validity = left.Round(time.Millisecond).String()
		} else if cl.up() < q {
			holder = "none"
			validity = "no quorum"
		} else {
			holder = "none"
		}
		writes, stale, _ := guard.counts()
		p.line("%6.1fs  %s  %-6s %-9s %5.1f %7d %6d", time.Since(start).Seconds(), cl.states(), holder, validity, rate, writes, stale)
	}
	ticker.Stop()
	wg.Wait()

	writes, stale, violations := guard.counts()
	sum := demoSummary{
		acquisitions: acquisitions.Load(), writes: writes, stale: stale,
		lost: lost.Load(), violations: violations, counter: guard.value(), timeline: p.tl,
	}
	if sum.counter != sum.writes {
		sum.violations++
		p.say("VIOLATION: counter %d differs from accepted writes %d", sum.counter, sum.writes)
	}
	last := fmt.Sprintf("redlock demo: %v nodes=%d workers=%d duration=%v", sum, cfg.nodes, cfg.workers, time.Since(start).Round(100*time.Millisecond))
	p.line("%s", last)
	p.tl.finish(time.Now(), last)
	return sum, nil
}

func playScript(ctx context.Context, cfg demoConfig, cl *cluster, g *guard, p *printer) {
	s := cfg.script()
	q := cfg.nodes/2 + 1
	at := func(d time.Duration) bool {
		t := time.NewTimer(time.Until(p.start.Add(d)))
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i, d := range s.kills {
		if !at(d) {
			return
		}
		if i == len(s.kills)-1 {
			// Lose the quorum under a holder, if one comes along within a
			// ttl, to show it keeping the lock until its validity runs out.
			for end := time.Now().Add(cfg.ttl); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
				if h, left := g.holder(); h != "" && left > cfg.ttl/2 {
					break
				}
			}
		}
		cl.kill(i)
		p.tl.nodeDown(i, time.Now())
		up := cl.up()
		if up >= q {
			p.event("kill n%d: %d of %d up, quorum %d: locks still granted", i+1, up, cfg.nodes, q)
			continue
		}
		holder, left := g.holder()
		msg := fmt.Sprintf("kill n%d: %d of %d up, quorum %d: QUORUM LOST, no lock can be granted or extended", i+1, up, cfg.nodes, q)
		if holder != "" {
			msg += fmt.Sprintf("; %s may finish on its lock, valid %v more", holder, left.Round(time.Millisecond))
		}
		p.event("%s", msg)
	}
	if !at(s.restore) {
		return
	}
	if err := cl.restore(); err != nil {
		p.event("restore failed: %v", err)
		return
	}
	for i := range s.kills {
		p.tl.nodeUp(i, time.Now())
	}
	p.event("restore n1-n%d after more than two ttls down, their lock keys gone, fencing counters kept: %d of %d up, locks granted again", len(s.kills), cl.up(), cfg.nodes)
}

// A worker takes the lock through Do and increments the counter a few times
// per hold. The careless one ignores its context and sometimes freezes
// entirely, extender included, as a paused process would.
type worker struct {
	name     string
	careless bool
	frozen   atomic.Bool // makes the worker's pools fail: a paused process sends nothing
}

func (w *worker) loop(ctx context.Context, c *redlock.Client, ttl time.Duration, g *guard, p *printer, acquisitions, lost *atomic.Int64) {
	holds := 0
	for ctx.Err() == nil {
		err := c.Do(ctx, demoKey, ttl, func(ctx context.Context) error {
			acquisitions.Add(1)
			holds++
			l := redlock.HeldLock(ctx)
			g.enter(w.name, l, p)
			defer g.leave(l)
			h := p.tl.enter(w.name, l.Token(), time.Now(), l.Until())
			defer func() { p.tl.leave(h, time.Now(), l.Until()) }() // before Do releases: Until is zero after
			if w.careless && holds%3 == 2 {
				w.pause(ttl+ttl/2, p)
			}
			// Holds of 0.2s to 1s: the longer ones outlive a ttl/3 and
			// are extended.
			for range 2 + mathrand.IntN(7) {
				if !w.careless && ctx.Err() != nil {
					return context.Cause(ctx)
				}
				// The work between deciding to write and writing: the window
				// in which a lost lock turns a write stale.
				time.Sleep(time.Duration(60+mathrand.IntN(60)) * time.Millisecond)
				p.tl.write(w.name, time.Now(), g.write(w.name, l, p))
			}
			return nil
		})
		if errors.Is(err, redlock.ErrLockLost) {
			lost.Add(1)
			p.tl.lost(w.name, time.Now())
			p.event("%s lost the lock: %v", w.name, firstLine(err))
		}
		// Step back a moment, so that others get their turn.
		sleepCtx(ctx, time.Duration(20+mathrand.IntN(80))*time.Millisecond)
	}
}

func (w *worker) pause(d time.Duration, p *printer) {
	p.event("%s freezes for %v while holding the lock (a GC pause, a stopped VM)", w.name, d)
	w.frozen.Store(true)
	from := time.Now()
	time.Sleep(d)
	w.frozen.Store(false)
	p.tl.freeze(w.name, from, time.Now())
	p.event("%s wakes up and carries on as if it still held the lock", w.name)
}

// firstLine shortens an error for the timeline: no per-node causes, which
// repeat what the node column shows, and no repeated package prefix.
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, ";\n"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(strings.TrimPrefix(s, "redlock: "), ": redlock: ", ": ")
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// A lease is what the guard needs of a lock: its validity.
type lease interface{ Until() time.Time }

// A guard is the protected resource: a counter that accepts a write only from
// a writer whose lock is still valid, and an independent checker of the
// library's claim that no two locks on a key are valid at once.
//
// It checks validity on the writers' own clock, which in this one process it
// can read; a real store cannot, and needs fencing tokens instead.
type guard struct {
	mu         sync.Mutex
	cur        lease // the latest to enter, until it leaves
	holderName string
	count      int64
	writes     int64
	stale      int64
	violations int64
}

// enter records a new holder. If the previous one is still inside with a
// valid lock, two locks are valid at once: a violation.
func (g *guard) enter(name string, l lease, p *printer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.cur != nil && g.cur != l && now.Before(g.cur.Until()) {
		g.violations++
		p.event("VIOLATION: %s acquired while %s's lock is valid for %v more", name, g.holderName, g.cur.Until().Sub(now))
	}
	g.cur, g.holderName = l, name
}

// leave clears the holder, if l still is it. Workers leave before Do releases,
// so the next holder never finds a released lock recorded as valid.
func (g *guard) leave(l lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == l {
		g.cur, g.holderName = nil, ""
	}
}

// write increments the counter if l is still valid and l is the latest
// holder; otherwise the write is stale and rejected.
func (g *guard) write(name string, l lease, p *printer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !now.Before(l.Until()) || g.cur != l {
		g.stale++
		p.event("%s's write rejected: its lock expired %v ago", name, now.Sub(l.Until()).Round(time.Millisecond))
		return false
	}
	g.count++
	g.writes++
	return true
}

// holder returns the current holder's name and remaining validity, or "" if
// no valid lock is held.
func (g *guard) holder() (string, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil {
		return "", 0
	}
	left := time.Until(g.cur.Until())
	if left <= 0 {
		return "", 0
	}
	return g.holderName, left
}

func (g *guard) counts() (writes, stale, violations int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.writes, g.stale, g.violations
}

func (g *guard) value() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count
}

// A cluster is the in-process Redis nodes. Their keys expire in real time
// (ClockTTL), as a real server's do. A killed node is closed; a restored one
// is a new, empty server on the same address, as after a restart without
// persistence.
type cluster struct {
	mu    sync.Mutex
	nodes []*miniredis.Miniredis
	addrs []string
	down  []bool
	fence []string // each killed node's fencing counter, which it keeps
}

func startCluster(n int) (*cluster, error) {
	cl := &cluster{}
	for range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			cl.close()
			return nil, fmt.Errorf("starting an in-process node: %w", err)
		}
		cl.nodes = append(cl.nodes, m)
		cl.addrs = append(cl.addrs, m.Addr())
		cl.down = append(cl.down, false)
		cl.fence = append(cl.fence, "")
	}
	return cl, nil
}

// client returns a Client of its own for w, as a separate process would have.
func (cl *cluster) client(w *worker) (*redlock.Client, []*redigo.Pool, error) {
	var pools []*redigo.Pool
	var ports []redlock.Pool
	for _, addr := range cl.addrs {
		p := redigo.NewPool(addr)
		pools = append(pools, p)
		ports = append(ports, freezable{p, w})
	}
	// A node timeout that an in-process node on a busy laptop meets.
	// Fencing, for the tokens the picture shows on each hold.
	c, err := redlock.New(ports, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithTries(8), redlock.WithFencing())
	if err != nil {
		closePools(pools)
		return nil, nil, err
	}
	return c, pools, nil
}

func closePools(pools []*redigo.Pool) {
	for _, p := range pools {
		p.Close()
	}
}

// freezable fails every call while its worker is frozen: a paused process
// cannot extend its lock either.
type freezable struct {
	*redigo.Pool
	w *worker
}

var errFrozen = errors.New("process frozen")

func (f freezable) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if f.w.frozen.Load() {
		return errFrozen
	}
	return f.Pool.Exec(ctx, cmds, replies)
}

func (cl *cluster) kill(i int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	// Fencing tokens rest on nodes keeping their counters across a restart
	// (docs/fencing.md), as persistence would; the lock keys are gone by the
	// restore anyway, more than two ttls later.
	cl.fence[i], _ = cl.nodes[i].Get(keys.Fence(keys.DefaultFencePrefix, demoKey))
	cl.nodes[i].Close()
	cl.down[i] = true
}

func (cl *cluster) restore() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for i, down := range cl.down {
		if !down {
			continue
		}
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr(cl.addrs[i]); err != nil {
			return fmt.Errorf("n%d on %s: %w", i+1, cl.addrs[i], err)
		}
		if cl.fence[i] != "" {
			if err := m.Set(keys.Fence(keys.DefaultFencePrefix, demoKey), cl.fence[i]); err != nil {
				m.Close()
				return fmt.Errorf("n%d: restoring its fencing counter: %w", i+1, err)
			}
		}
		cl.nodes[i], cl.down[i] = m, false
	}
	return nil
}

func (cl *cluster) up() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	n := 0
	for _, d := range cl.down {
		if !d {
			n++
		}
	}
	return n
}

// states shows each node as its name, or "--" while it is down.
func (cl *cluster) states() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	s := make([]string, len(cl.down))
	for i, d := range cl.down {
		s[i] = fmt.Sprintf("n%d", i+1)
		if d {
			s[i] = "--"
		}
	}
	return strings.Join(s, " ")
}

func (cl *cluster) close() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, m := range cl.nodes {
		m.Close()
	}
}

// A printer writes the timeline: status lines, and events marked with "**".
// tl, if not nil, records the run for a picture.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	tl    *timeline
}

func (p *printer) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

func (p *printer) say(format string, args ...any) { p.line("# "+format, args...) }

func (p *printer) event(format string, args ...any) {
	p.line("%6.1fs  ** %s", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// checkWritable reports whether a file can be written at name, by making a
// temporary one next to it; "" needs nothing. It leaves name untouched.
func checkWritable(name string) error {
	if name == "" {
		return nil
	}
	if fi, err := os.Stat(name); err == nil && fi.IsDir() {
		return errors.New("is a directory")
	}
	dir := filepath.Dir(name)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no directory %s: %w", dir, errors.Unwrap(err))
	}
	f, err := os.CreateTemp(dir, ".redlock-demo-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// writePictures writes the recorded timeline as an SVG picture and as an
// HTML page, for the names that are not "".
func writePictures(tl *timeline, svgName, htmlName, text string) error {
	write := func(name string, draw func(io.Writer) error) error {
		if name == "" {
			return nil
		}
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		if err := draw(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := write(svgName, tl.SVG); err != nil {
		return err
	}
	return write(htmlName, func(w io.Writer) error { return tl.HTML(w, text) })
}

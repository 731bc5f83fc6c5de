package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
	"github.com/quorumlock/redlock/redigo"
)

// countingPool counts the batches sent through a Pool.
type countingPool struct {
	Pool
	mu      sync.Mutex
	borrows int
}

func (p *countingPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.mu.Lock()
	p.borrows++
	p.mu.Unlock()
	return p.Pool.Exec(ctx, cmds, replies)
}

func cmd(name string, args ...any) driver.Command { return driver.Command{Name: name, Args: args} }

// Every concurrent caller gets its own reply, in batches that share
// connections.
func TestPipeRepliesReachTheirCallers(t *testing.T) {
	s := redistest.Start(t)
	rp := redigo.NewPool(s.Addr)
	defer rp.Close()
	pool := &countingPool{Pool: rp}
	n := newNode(0, pool)

	const callers, rounds = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				want := strconv.Itoa(g) + ":" + strconv.Itoa(r)
				reply, err := n.command(context.Background(), time.Now().Add(time.Second), cmd("ECHO", want))
				if got, _ := reply.(string); err != nil || got != want {
					errs <- errors.New("ECHO " + want + " got " + got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if pool.borrows >= callers*rounds {
		t.Errorf("%d borrows for %d commands: no batching", pool.borrows, callers*rounds)
	}
	t.Logf("%d commands in %d batches", callers*rounds, pool.borrows)
}

// An error reply goes to its own caller only.
func TestPipeErrorReplyStaysWithItsCall(t *testing.T) {
	s := redistest.Start(t)
	rp := redigo.NewPool(s.Addr)
	defer rp.Close()
	n := newNode(0, rp)

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(time.Second)
			if g%2 == 0 {
				_, err := n.command(context.Background(), deadline, cmd("NOSUCHCOMMAND"))
				if replyCode(err) != "ERR" {
					t.Errorf("bad command: err = %v, want a ReplyError", err)
				}
				return
			}
			if reply, err := n.command(context.Background(), deadline, cmd("PING")); reply != "PONG" || err != nil {
				t.Errorf("PING = %q, %v", reply, err)
			}
		}()
	}
	wg.Wait()
}

// A node that never answers fails every queued command at its deadline, and
// no caller hangs.
func TestPipeFrozenNodeFailsEveryCallInTime(t *testing.T) {
	rp := redigo.NewPool(redistest.StartFrozen(t).Addr())
	defer rp.Close()
	n := newNode(3, rp)

	const timeout = 50 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := n.command(context.Background(), time.Now().Add(timeout), cmd("PING"))
			var nerr *NodeError
			if !errors.As(err, &nerr) || nerr.Node != 3 || nerr.Addr != rp.Addr || !errors.Is(err, ErrNodeTimeout) {
				t.Errorf("err = %v, want a NodeError for node 3 at %s with ErrNodeTimeout", err, rp.Addr)
			}
		}()
	}
	wg.Wait()
	// At most the batch ahead and the caller's own, each one timeout.
	if d := time.Since(start); d > 2*timeout+50*time.Millisecond {
		t.Errorf("callers returned after %v, want at most about %v", d, 2*timeout)
	}
}

// A command whose deadline has passed is not sent.
func TestPipeSkipsExpiredCalls(t *testing.T) {
	pool := &countingPool{Pool: failingPool{}}
	n := newNode(0, pool)
	_, err := n.command(context.Background(), time.Now().Add(-time.Millisecond), cmd("PING"))
	if !errors.Is(err, ErrNodeTimeout) {
		t.Errorf("err = %v, want ErrNodeTimeout", err)
	}
	if pool.borrows != 0 {
		t.Errorf("%d borrows for an expired command, want 0", pool.borrows)
	}
}

type failingPool struct{}

func (failingPool) Exec(context.Context, []driver.Command, []driver.Reply) error {
	return errors.New("no connection")
}

// hangingPool never answers and ignores ctx, until released.
type hangingPool struct{ release chan struct{} }

func (p hangingPool) Exec(context.Context, []driver.Command, []driver.Reply) error {
	<-p.release
	return errors.New("released")
}

// The coordinator bounds every round by the node timeout even when a Pool
// ignores ctx, and a minority of such nodes delays no one.
func TestRoundBoundedWhenPoolIgnoresContext(t *testing.T) {
	s1, s2 := redistest.Start(t), redistest.Start(t)
	hang := hangingPool{release: make(chan struct{})}
	defer close(hang.release)
	p1, p2 := redigo.NewPool(s1.Addr), redigo.NewPool(s2.Addr)
	defer p1.Close()
	defer p2.Close()
	const timeout = 100 * time.Millisecond

	for _, tc := range []struct {
		name  string
		pools []Pool
		won   bool
	}{
		{"minority hangs", []Pool{p1, hang, p2}, true},
		{"majority hangs", []Pool{p1, hang, &hangingPool{release: hang.release}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.pools, WithNodeTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			l, err := c.TryLock(context.Background(), "k:"+tc.name, time.Second)
			d := time.Since(start)
			if tc.won {
				if err != nil {
					t.Fatalf("TryLock: %v", err)
				}
				if d > timeout/2 {
					t.Errorf("took %v: waited for the hanging node", d)
				}
				if err := l.Unlock(context.Background()); err != nil {
					t.Errorf("Unlock: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNodeTimeout) || !errors.Is(err, ErrNotObtained) {
				t.Errorf("err = %v, want ErrNotObtained with ErrNodeTimeout", err)
			}
			// One node timeout for the attempt, one for the undo, and
			// generous slack for a loaded machine running -race. Without
			// the coordinator's own bound the call would hang until the
			// test released the pool.
			if d < timeout || d > 2*timeout+500*time.Millisecond {
				t.Errorf("took %v, want between %v and about %v", d, timeout, 2*timeout)
			}
		})
	}
}

// gatePool holds every Exec until the test opens its gate, and tells the
// test which keys each batch carries, in order, as it starts.
type gatePool struct{ started chan gatedBatch }

type gatedBatch struct {
	keys []string
	gate chan struct{}
}

func newGatePool() *gatePool { return &gatePool{started: make(chan gatedBatch, 16)} }

func (p *gatePool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	b := gatedBatch{gate: make(chan struct{})}
	for _, c := range cmds {
		b.keys = append(b.keys, c.Args[0].(string))
	}
	p.started <- b
	select {
	case <-b.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	for i := range replies {
		replies[i] = driver.Reply{Value: "OK"}
	}
	return nil
}

// next returns the next batch to start, failing if none does in time.
func (p *gatePool) next(t *testing.T) gatedBatch {
	t.Helper()
	select {
	case b := <-p.started:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("no batch started")
		return gatedBatch{}
	}
}

// none fails if a batch has started that the test has not taken.
func (p *gatePool) none(t *testing.T) {
	t.Helper()
	select {
	case b := <-p.started:
		t.Fatalf("a batch of %v started; want none yet", b.keys)
	default:
	}
}

// keysInLanes returns n keys, each in a lane of its own (laneOf).
func keysInLanes(n int) []string {
	var ks []string
	used := map[int]bool{}
	for i := 0; len(ks) < n; i++ {
		k := "key" + strconv.Itoa(i)
		if !used[laneOf(k)] {
			used[laneOf(k)] = true
			ks = append(ks, k)
		}
	}
	return ks
}

// sameLane returns a key other than key in key's lane.
func sameLane(key string) string {
	for i := 0; ; i++ {
		if k := "other" + strconv.Itoa(i); laneOf(k) == laneOf(key) {
			return k
		}
	}
}

// waitQueued waits until n's pipe has want commands queued: they have
// taken their place in it, so that no later command can go ahead of them.
func waitQueued(t *testing.T, n *node, want int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; runtime.Gosched() {
		n.pipe.mu.Lock()
		got := len(n.pipe.queue)
		n.pipe.mu.Unlock()
		if got == want {
			return
		}
	}
	t.Fatalf("the queue never held %d commands", want)
}

// sendAsync sends SET key from a goroutine of its own, to n, and returns
// the channel of its error.
func sendAsync(n *node, key string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := n.send(context.Background(), time.Now().Add(10*time.Second), laneOf(key), nil, "SET", 0, 1, key, "v")
		done <- err
	}()
	return done
}

// twoBusyWires returns a node on a new gatePool whose two wires are busy:
// SET ks[0] went out alone (first) and SET ks[1] beside it (second), both
// held at their gates; a and b are their callers' errors.
func twoBusyWires(t *testing.T, ks []string) (pool *gatePool, n *node, first, second gatedBatch, a, b <-chan error) {
	t.Helper()
	pool = newGatePool()
	n = newNode(0, pool)
	if n.pipe.n != 2 {
		t.Skipf("the test is written for 2 wires, not %d", n.pipe.n)
	}
	first, second, a, b = busyWires(t, pool, n, ks)
	return pool, n, first, second, a, b
}

// busyWires makes n's two wires busy, as twoBusyWires does, for a node on
// pool (or on a wrapper of it).
func busyWires(t *testing.T, pool *gatePool, n *node, ks []string) (first, second gatedBatch, a, b <-chan error) {
	t.Helper()
	a = sendAsync(n, ks[0])
	first = pool.next(t)
	b = sendAsync(n, ks[1])
	second = pool.next(t) // beside the first, which is still on the wire
	return first, second, a, b
}

// Wires open only when the others are busy: a second caller goes straight
// to the wire beside the first, once every wire is busy the callers that
// follow share one batch, and the idle wire opens beside a busy one only
// while that carries a single command: beside a batch of several, callers
// are many, and a command queues for the next batch instead of going out
// alone.
func TestPipeWiresOpenWhenBusy(t *testing.T) {
	ks := keysInLanes(6)
	pool, n, first, second, a, b := twoBusyWires(t, ks)
	if first.keys[0] != ks[0] || second.keys[0] != ks[1] {
		t.Fatalf("batches %v and %v, want [%s] and [%s]", first.keys, second.keys, ks[0], ks[1])
	}
	var rest []<-chan error
	for i, k := range ks[2:5] {
		rest = append(rest, sendAsync(n, k))
		waitQueued(t, n, i+1) // in this order
	}
	pool.none(t)
	close(first.gate)
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	third := pool.next(t)
	if !slices.Equal(third.keys, ks[2:5]) {
		t.Errorf("next batch %v, want the three queued commands %v in one batch", third.keys, ks[2:5])
	}
	close(second.gate)
	if err := <-b; err != nil {
		t.Fatal(err)
	}

	// One wire idle, the other carrying three commands: the next queues.
	rest = append(rest, sendAsync(n, ks[5]))
	waitQueued(t, n, 1)
	pool.none(t)
	close(third.gate)
	fourth := pool.next(t)
	if !slices.Equal(fourth.keys, ks[5:]) {
		t.Errorf("batch %v, want %v", fourth.keys, ks[5:])
	}
	close(fourth.gate)
	for _, done := range rest {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	pool.none(t)
}

// A pipe keeps to one wire under load: after a batch of three, a command
// that finds one wire carrying a single command and the other idle queues
// behind it rather than opening the idle one, for holdBatches small
// batches; then the idle wire opens beside a single command again, as it
// does for two callers from the start.
func TestPipeHoldsWiresUnderLoad(t *testing.T) {
	ks := keysInLanes(8 + holdBatches)
	gp := newGatePool()
	n := newNode(0, gp)
	if n.pipe.n != 2 {
		t.Fatalf("a node with %d wires, want 2", n.pipe.n)
	}
	answer := func(b gatedBatch, errs ...<-chan error) {
		t.Helper()
		close(b.gate)
		for _, done := range errs {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}

	// Two callers: the second goes out beside the first.
	first, second, a, b := busyWires(t, gp, n, ks)
	// Three more queue, and go out together once the first is answered.
	var three []<-chan error
	for i, k := range ks[2:5] {
		three = append(three, sendAsync(n, k))
		waitQueued(t, n, i+1)
	}
	answer(first, a)
	large := gp.next(t)
	if !slices.Equal(large.keys, ks[2:5]) {
		t.Fatalf("batch %v, want %v", large.keys, ks[2:5])
	}
	answer(second, b)
	answer(large, three...)

	// Under load: a single command out alone, the next queues behind it,
	// and so on, until holdBatches small batches have gone.
	k := 5
	prev, prevDone := gatedBatch{}, (<-chan error)(nil)
	cur := sendAsync(n, ks[k])
	batch := gp.next(t)
	for range holdBatches - 1 {
		k++
		prev, prevDone = batch, cur
		cur = sendAsync(n, ks[k])
		waitQueued(t, n, 1)
		gp.none(t)
		answer(prev, prevDone)
		batch = gp.next(t)
		if !slices.Equal(batch.keys, ks[k:k+1]) {
			t.Fatalf("batch %v, want [%s]", batch.keys, ks[k])
		}
	}
	// The hold has run out: the idle wire opens beside the single command.
	k++
	last := sendAsync(n, ks[k])
	beside := gp.next(t)
	if !slices.Equal(beside.keys, ks[k:k+1]) {
		t.Fatalf("batch %v, want [%s] beside the one still on the wire", beside.keys, ks[k])
	}
	answer(batch, cur)
	answer(beside, last)
	gp.none(t)
}

// The hold starts only after a batch of three or more, and never on a
// Client's only node: after a batch of two, or of three there, the idle
// wire still opens beside a single command.
func TestPipeHoldNeedsABatchOfThreeAndAnotherNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oneNode bool
		batch   int
	}{{"batch of two", false, 2}, {"batch of three, the Client's only node", true, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			ks := keysInLanes(4 + tc.batch)
			gp := newGatePool()
			n := newNode(0, gp)
			if tc.oneNode {
				c, err := New([]Pool{gp})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				n = c.nodes[0]
			}
			// Both wires busy with a command each, tc.batch queued behind
			// them, then sent as one batch.
			first, second, a, b := busyWires(t, gp, n, ks)
			var queued []<-chan error
			for i, k := range ks[2 : 2+tc.batch] {
				queued = append(queued, sendAsync(n, k))
				waitQueued(t, n, i+1)
			}
			close(first.gate)
			if err := <-a; err != nil {
				t.Fatal(err)
			}
			batch := gp.next(t)
			if len(batch.keys) != tc.batch {
				t.Fatalf("batch %v, want %d commands", batch.keys, tc.batch)
			}
			close(second.gate)
			close(batch.gate)
			for _, done := range append(queued, b) {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			// A single command, and the next beside it.
			k := 2 + tc.batch
			c := sendAsync(n, ks[k])
			one := gp.next(t)
			d := sendAsync(n, ks[k+1])
			beside := gp.next(t)
			if !slices.Equal(beside.keys, ks[k+1:k+2]) {
				t.Fatalf("batch %v, want [%s] beside the one on the wire", beside.keys, ks[k+1])
			}
			close(one.gate)
			close(beside.gate)
			for _, done := range []<-chan error{c, d} {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A runner that carried a batch of three or more yields once it has
// answered them, before it takes the queue: the callers its answers woke
// send their next commands meanwhile, and those go out together in the
// next batch rather than the first of them alone on a wire that had gone
// idle.
func TestPipeYieldsAfterALargeBatch(t *testing.T) {
	// On one processor the yield runs the woken callers first, unless the
	// scheduler takes its global queue first (one time in 61): three tries.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var sizes []int
	for range 3 {
		size := nextBatchAfterThree(t)
		if size == 3 {
			return
		}
		sizes = append(sizes, size)
	}
	t.Errorf("the batch after a batch of three had %v commands in three tries, want 3: "+
		"the three callers the runner answered sent theirs together", sizes)
}

// nextBatchAfterThree has a runner carry a batch of three asynchronous
// commands whose callers, once answered, each submit another, and returns
// the size of the batch that starts next on the runner's wire, or 0 if
// that wire went idle first.
func nextBatchAfterThree(t *testing.T) int {
	ks := keysInLanes(8)
	pool, n, first, second, a, b := twoBusyWires(t, ks)
	var done []<-chan error
	for i := 2; i < 5; i++ {
		done = append(done, submitThen(n, ks[i], ks[i+3]))
		waitQueued(t, n, i-1)
	}
	close(first.gate) // its caller hands the queue, all asynchronous, to a runner
	three := pool.next(t)
	if len(three.keys) != 3 {
		t.Fatalf("batch %v, want the three queued commands", three.keys)
	}
	close(three.gate)
	// The runner answers the three, which wakes their callers, and yields:
	// they submit their next commands, which queue, both wires being busy;
	// then it takes them on its wire. Without the yield it finds the queue
	// empty and lets its wire go idle, and the next commands queue behind
	// the other wire, to which the hold keeps them: no batch starts until
	// that wire's is answered. That outcome counts as size 0.
	var next gatedBatch
	for start := time.Now(); next.gate == nil; runtime.Gosched() {
		select {
		case next = <-pool.started:
			continue
		default:
		}
		if idleBesideQueue(n, 3) {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no batch started, and the queue never held 3 commands beside an idle wire")
		}
	}
	if next.gate != nil {
		close(next.gate)
	}
	close(second.gate)
	stop := openGates(pool)
	defer stop()
	for _, d := range append(done, a, b) {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	return len(next.keys)
}

// idleBesideQueue reports whether n's queue holds want commands while one
// of its wires is idle.
func idleBesideQueue(n *node, want int) bool {
	n.pipe.mu.Lock()
	defer n.pipe.mu.Unlock()
	idle := false
	for i := range n.pipe.n {
		idle = idle || !n.pipe.wires[i].busy
	}
	return idle && len(n.pipe.queue) == want
}

// submitThen submits SET key to n asynchronously, as a round does, and,
// once it is answered, SET then from the goroutine its answer wakes, as a
// caller that goes on to its next command; it returns the channel of the
// first error.
func submitThen(n *node, key, then string) <-chan error {
	done := make(chan error, 1)
	first, second := make(answerFunc, 1), make(answerFunc, 1)
	submitSET(n, key, first)
	go func() {
		if err := <-first; err != nil {
			done <- err
			return
		}
		submitSET(n, then, second)
		done <- <-second
	}()
	return done
}

// submitSET submits SET key to n, whose reply's error goes to then.
func submitSET(n *node, key string, then answerFunc) {
	c := n.pipe.newCall(context.Background(), time.Now().Add(10*time.Second), "SET", 0, 1, []any{key, "v"})
	c.lane, c.then, c.node = 1<<laneOf(key), then, n
	n.pipe.submit(n.pool, c)
}

// An answerFunc takes an asynchronous call's reply, as a round's fan does,
// and passes its error on.
type answerFunc chan error

func (f answerFunc) answer(c *call) { f <- c.reply.Err }

// A command whose key's lane is on a busy wire waits for that wire's batch
// to be answered, even with the other wire idle, and a wire that comes free
// leaves it queued for the wire it follows; the commands behind it that do
// not follow anything go out.
func TestPipeKeyOrderAcrossWires(t *testing.T) {
	pool := newGatePool()
	n := newNode(0, pool)
	if n.pipe.n != 2 {
		t.Skipf("the test is written for 2 wires, not %d", n.pipe.n)
	}
	ks := keysInLanes(3)
	k, k2 := ks[0], sameLane(ks[0])

	// The idle wire does not take a second command on the lane of the
	// first's batch.
	a := sendAsync(n, k)
	first := pool.next(t)
	b := sendAsync(n, k2)
	waitQueued(t, n, 1)
	pool.none(t)
	close(first.gate)
	if got := pool.next(t); !slices.Equal(got.keys, []string{k2}) {
		t.Fatalf("batch %v, want [%s] after the first was answered", got.keys, k2)
	} else {
		close(got.gate)
	}
	for _, done := range []<-chan error{a, b} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// Both wires busy; the queue holds a command on the first wire's lane
	// and one on a free lane. The second wire, once free, takes only the
	// latter; the first wire, once free, the former.
	a = sendAsync(n, k)
	first = pool.next(t)
	c := sendAsync(n, ks[1])
	second := pool.next(t)
	b = sendAsync(n, k2)
	waitQueued(t, n, 1)
	d := sendAsync(n, ks[2])
	waitQueued(t, n, 2)
	close(second.gate)
	if got := pool.next(t); !slices.Equal(got.keys, []string{ks[2]}) {
		t.Fatalf("batch %v, want [%s]: the command on the busy wire's lane stays queued", got.keys, ks[2])
	} else {
		close(got.gate)
	}
	waitQueued(t, n, 1)
	pool.none(t)
	close(first.gate)
	if got := pool.next(t); !slices.Equal(got.keys, []string{k2}) {
		t.Fatalf("batch %v, want [%s] once the first wire's batch was answered", got.keys, k2)
	} else {
		close(got.gate)
	}
	for _, done := range []<-chan error{a, b, c, d} {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	pool.none(t)
}

// A round's commands that queue in busy pipes wait there without a
// goroutine each (fanout's async ops): with every wire of three nodes held,
// 40 callers of TryLock add about one goroutine each (the caller's own),
// not one more per node. Once the wires are let go, every caller gets the
// lock.
func TestQueuedCommandsNeedNoGoroutine(t *testing.T) {
	const callers = 40
	pools := []*gatePool{newGatePool(), newGatePool(), newGatePool()}
	c, err := New([]Pool{pools[0], pools[1], pools[2]}, WithNodeTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := runtime.NumGoroutine()

	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := c.TryLock(context.Background(), "k"+strconv.Itoa(i), time.Minute)
			errs <- err
		}()
	}
	// Every node: two batches on the wire, held, and the rest queued.
	var held []gatedBatch
	for _, p := range pools {
		held = append(held, p.next(t), p.next(t))
	}
	queued := func() int {
		sum := 0
		for _, nd := range c.nodes {
			nd.pipe.mu.Lock()
			sum += len(nd.pipe.queue)
			nd.pipe.mu.Unlock()
		}
		return sum
	}
	for start := time.Now(); queued() < 3*(callers-2); runtime.Gosched() {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d commands queued, want %d", queued(), 3*(callers-2))
		}
	}
	// The callers, and a goroutine for each batch on the wire; a goroutine
	// per node per caller would be 120 more.
	if extra := runtime.NumGoroutine() - before; extra > callers+3*wires+10 {
		t.Errorf("%d goroutines more with %d callers queued on 3 nodes; want at most %d", extra, callers, callers+3*wires+10)
	}

	// Let every batch through, those held and those that follow.
	for _, b := range held {
		close(b.gate)
	}
	// The gates stay open until Close has waited for every node call: a
	// straggler's batch may start after the callers have their majority.
	stop := openGates(pools...)
	for range callers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	stop()
}

// openGates lets every batch that starts on pools through at once, until
// the returned stop is called.
func openGates(pools ...*gatePool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() {
			for {
				select {
				case b := <-p.started:
					close(b.gate)
				case <-done:
					return
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// slowObserver takes d over each node's answer, as an Observer that writes
// to a slow sink might.
type slowObserver struct{ d time.Duration }

func (o slowObserver) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.KindNode {
		time.Sleep(o.d)
	}
}

// An Observer runs for each node's answer on a goroutine of the round's own,
// as it did when every round had a goroutine per node: the goroutine that
// carries a batch for many callers does not call it for each of them in
// turn, or a batch of 38 answers would take 38 Observe calls before the
// last caller's ballot is cast, and the callers at its end would time out
// although their node answered at once.
func TestSlowObserverDelaysOnlyItsOwnRound(t *testing.T) {
	const (
		callers = 40
		obsTime = 10 * time.Millisecond
		timeout = 300 * time.Millisecond // far more than obsTime, far less than callers × obsTime
	)
	pools := []*gatePool{newGatePool(), newGatePool(), newGatePool()}
	c, err := New([]Pool{pools[0], pools[1], pools[2]}, WithNodeTimeout(timeout),
		WithObserver(slowObserver{obsTime}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			_, err := c.TryLock(context.Background(), "slowobs"+strconv.Itoa(i), time.Minute)
			errs <- err
		}()
	}
	// Every node: two batches on the wire, held, and the rest queued, so
	// that each node answers 38 callers in one batch.
	var held []gatedBatch
	for _, p := range pools {
		held = append(held, p.next(t), p.next(t))
	}
	for _, nd := range c.nodes {
		waitQueued(t, nd, callers-2)
	}
	for _, b := range held {
		close(b.gate)
	}
	// The gates stay open until Close has waited for every node call: a
	// straggler's batch may start after the callers have their majority.
	stop := openGates(pools...)
	failed := 0
	for range callers {
		if err := <-errs; err != nil {
			failed++
			if failed == 1 {
				t.Errorf("TryLock: %v", err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d callers failed behind an Observer that takes %v", failed, callers, obsTime)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	stop()
}

// recordingPool answers SET with set and EVALSHA with eval, after hold (if
// not nil) is closed, whatever its context says, and records every
// command's name and key.
type recordingPool struct {
	set, eval any
	hold      chan struct{}
	mu        sync.Mutex
	seen      []string // "NAME key"
	running   atomic.Int32
}

func (p *recordingPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.running.Add(1)
	defer p.running.Add(-1)
	if p.hold != nil {
		<-p.hold // a node that runs the commands late, whatever ctx says
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range cmds {
		key := c.Args[0]
		if c.Name == "EVALSHA" || c.Name == "EVAL" {
			key = c.Args[2]
		}
		p.seen = append(p.seen, fmt.Sprint(c.Name, " ", key))
		switch c.Name {
		case "SET":
			replies[i] = driver.Reply{Value: p.set}
		default:
			replies[i] = driver.Reply{Value: p.eval}
		}
	}
	return nil
}

func (p *recordingPool) saw(cmd string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.seen, cmd)
}

// A lost attempt sends no release to a node whose SET never went out: its
// deadline passed while it queued behind batches held on both wires, so
// the node holds nothing of it. (Releasing it anyway doubles the commands
// of a node that is already too slow.) The SETs that did go out are
// released.
func TestLostAttemptSkipsUndoOfUnsentSET(t *testing.T) {
	held := &recordingPool{set: "OK", eval: int64(1), hold: make(chan struct{})}
	refuse := func() *recordingPool { return &recordingPool{set: nil, eval: int64(0)} }
	c, err := New([]Pool{held, refuse(), refuse()}, WithNodeTimeout(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Two attempts whose SETs hold both of node 0's wires.
	var wg sync.WaitGroup
	for i, k := range []string{"a", "b"} {
		wg.Go(func() {
			if _, err := c.TryLock(ctx, k, time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Errorf("TryLock(%s) = %v, want ErrNotObtained (two nodes refuse)", k, err)
			}
		})
		for start := time.Now(); held.running.Load() < int32(i+1); runtime.Gosched() {
			if time.Since(start) > 5*time.Second {
				t.Fatal("node 0's wires never filled")
			}
		}
	}
	// The third attempt's SET queues on node 0 and outlives its deadline there.
	if _, err := c.TryLock(ctx, "c", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock(c) = %v, want ErrNotObtained", err)
	}
	time.Sleep(200 * time.Millisecond) // past the node deadline of c's SET
	close(held.hold)
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if held.saw("SET c") {
		t.Fatal("c's SET went out after its deadline")
	}
	if held.saw("EVALSHA c") {
		t.Error("a release of c went to node 0, which never got c's SET")
	}
	for _, k := range []string{"a", "b"} {
		if !held.saw("SET "+k) || !held.saw("EVALSHA "+k) {
			t.Errorf("node 0 saw %v; want %s's SET and its release", held.seen, k)
		}
	}
}

package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// verdicts tells nodes that a round on a key has been decided: the first
// release of the key that node 0 sees, since only a decided, lost round
// sends one.
type verdicts struct {
	mu   sync.Mutex
	keys map[string]chan struct{}
}

func (v *verdicts) of(key string) chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	ch, ok := v.keys[key]
	if !ok {
		ch = make(chan struct{})
		v.keys[key] = ch
	}
	return ch
}

func (v *verdicts) decide(key string) {
	ch := v.of(key)
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// rolePool is one node of a round whose answers the test orders: 'y'
// agrees at once, 'n' refuses at once, 'l' agrees only once the round on
// the key has been decided (a node whose SET runs but answers after the
// deadline or the verdict). Releases answer 1; node 0's decide its key.
type rolePool struct {
	role  byte
	first bool // node 0: its release of a key means the key's round is decided
	v     *verdicts
}

func (p *rolePool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for i, c := range cmds {
		switch c.Name {
		case "SET":
			key := c.Args[0].(string)
			switch p.role {
			case 'n':
				replies[i] = driver.Reply{}
			case 'l':
				select {
				case <-p.v.of(key):
				case <-time.After(10 * time.Second):
					return errors.New("test: the round on " + key + " was never decided")
				}
				fallthrough
			default:
				replies[i] = driver.Reply{Value: "OK"}
			}
		default: // the release
			if p.first {
				p.v.decide(c.Args[2].(string))
			}
			replies[i] = driver.Reply{Value: int64(1)}
		}
	}
	return nil
}

// A lost round over 15 nodes counts each node's answer once, those that
// came after the verdict too, whether the deadline decided it (the silent
// nodes counted as timed out until the round was lost, and no more) or
// refusals did; the error's counts and causes say so. The SETs go through
// the pipes' async path, two callers at once, and the ballots outgrow the
// round's inline storage.
func TestLostRoundCountsEveryNodeOnce(t *testing.T) {
	for _, tc := range []struct {
		name, roles string
		want        string
	}{
		{
			// 5 agree, 5 refuse, 5 silent: at the deadline nodes 1, 4
			// and 7 count as timed out, which loses the round; 10 and
			// 13 agree after the verdict.
			name:  "deadline",
			roles: "ylnylnylnylnyln",
			want: "redlock: lock not obtained: 7 agreed, 5 refused, 3 failed of 15 nodes; 8 needed; " +
				"node 1: node timeout; node 4: node timeout; node 7: node timeout",
		},
		{
			// 8 refusals lose the round before the deadline; the 4 late
			// nodes agree after the verdict.
			name:  "refusals",
			roles: "yyyllllnnnnnnnn",
			want:  "redlock: lock not obtained: 7 agreed, 8 refused, 0 failed of 15 nodes; 8 needed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &verdicts{keys: map[string]chan struct{}{}}
			var pools []Pool
			for i := range len(tc.roles) {
				pools = append(pools, &rolePool{role: tc.roles[i], first: i == 0, v: v})
			}
			c, err := New(pools, WithNodeTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Two callers whose keys hash to different lanes, so that each
			// SET finds a wire of its own on every node and none waits
			// past its deadline in a queue.
			keys := []string{"k0"}
			for i := 1; len(keys) < 2; i++ {
				if k := "k" + string(rune('0'+i)); laneOf(c.keyPrefix+k) != laneOf(c.keyPrefix+keys[0]) {
					keys = append(keys, k)
				}
			}
			var wg sync.WaitGroup
			for _, k := range keys {
				wg.Go(func() {
					_, err := c.TryLock(context.Background(), k, time.Minute)
					if !errors.Is(err, ErrNotObtained) || err.Error() != tc.want {
						t.Errorf("TryLock(%s) = %v\nwant %s", k, err, tc.want)
					}
				})
			}
			wg.Wait()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// opsContext behaves as context.WithDeadline(context.WithoutCancel(ctx),
// deadline): the caller's values, not its cancellation nor its cause; Done
// closed with DeadlineExceeded at the deadline, or with Canceled by end,
// whichever comes first; Err nil until then.
func TestOpsContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	cancel(errors.New("the caller's cause"))

	var o opsContext
	deadline := time.Now().Add(50 * time.Millisecond)
	o.start(parent, deadline, false, nil)
	if d, ok := o.Deadline(); !ok || !d.Equal(deadline) {
		t.Errorf("Deadline() = %v, %v; want %v, true", d, ok, deadline)
	}
	if v := o.Value(key{}); v != "v" {
		t.Errorf("Value = %v; want the parent's value", v)
	}
	if err := o.Err(); err != nil {
		t.Fatalf("Err() = %v before the deadline, with the parent cancelled; want nil", err)
	}
	select {
	case <-o.Done():
		if time.Now().Before(deadline) {
			t.Errorf("Done closed %v before the deadline", time.Until(deadline))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after the deadline")
	}
	if err := o.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err() = %v after the deadline; want DeadlineExceeded", err)
	}
	if err := context.Cause(&o); err != context.DeadlineExceeded {
		t.Errorf("Cause = %v; want DeadlineExceeded, not the caller's cause", err)
	}
	o.end(endCanceled) // too late: the deadline stays the reason
	if err := o.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err() = %v after a late end; want DeadlineExceeded", err)
	}

	var e opsContext
	e.start(context.Background(), time.Now().Add(time.Hour), false, nil)
	e.end(endCanceled)
	select {
	case <-e.Done():
	default:
		t.Fatal("Done not closed by end")
	}
	if err := e.Err(); err != context.Canceled {
		t.Errorf("Err() = %v after end; want Canceled", err)
	}
	if e.timer.Stop() {
		t.Error("end left the deadline's timer running")
	}

	var p opsContext // a deadline already past: ended at once, no timer
	p.start(context.Background(), time.Now().Add(-time.Millisecond), false, nil)
	if err := p.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err() = %v with the deadline past at start; want DeadlineExceeded", err)
	}

	// Detached: ctx is taken as it is (a release round's, which is
	// context.WithoutCancel's already).
	var r opsContext
	detached := context.WithoutCancel(parent)
	r.start(detached, time.Now().Add(time.Hour), true, nil)
	if r.values != detached {
		t.Error("a detached ctx was wrapped again")
	}
	r.end(endCanceled)
}

// Contexts derived from an opsContext register with its AfterFunc, as
// with the standard contexts: no goroutine watches each one, and each ends
// when the round's context ends. A function registered and stopped before
// then never runs; one registered after runs at once.
func TestOpsContextAfterFunc(t *testing.T) {
	var o opsContext
	o.start(context.Background(), time.Now().Add(time.Hour), false, nil)
	const n = 50
	before := runtime.NumGoroutine()
	var children []context.Context
	for range n {
		child, cancel := context.WithTimeout(&o, time.Hour)
		defer cancel()
		children = append(children, child)
	}
	if grown := runtime.NumGoroutine() - before; grown > n/5 {
		t.Errorf("%d derived contexts started %d goroutines", n, grown)
	}
	ran := make(chan string, 3)
	stop := o.AfterFunc(func() { ran <- "stopped" })
	o.AfterFunc(func() { ran <- "registered" })
	if !stop() {
		t.Error("stop before the end reports false")
	}
	if stop() {
		t.Error("a second stop reports true")
	}
	o.end(endCanceled)
	for i, child := range children {
		select {
		case <-child.Done():
			if err := child.Err(); err != context.Canceled {
				t.Errorf("child %d: Err() = %v, want Canceled, the round's", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("child %d outlived the round's context", i)
		}
	}
	late := o.AfterFunc(func() { ran <- "late" })
	got := map[string]bool{}
	for range 2 {
		select {
		case s := <-ran:
			got[s] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("ran %v; want registered and late", got)
		}
	}
	if !got["registered"] || !got["late"] {
		t.Errorf("ran %v; want registered and late", got)
	}
	if late() {
		t.Error("stop after the function ran reports true")
	}
	select {
	case s := <-ran:
		t.Errorf("%s ran too", s)
	case <-time.After(50 * time.Millisecond):
	}
}

// A context derived while the round's context ends, from another
// goroutine, ends with it; its cancellation never runs before Done is
// closed (the context package panics, "missing cancel error", if it does).
func TestOpsContextEndWhileDeriving(t *testing.T) {
	// The moment between end's claim and its closing of Done: a function
	// registered then waits for end to run it, after Done is closed.
	var m opsContext
	m.start(context.Background(), time.Now().Add(time.Hour), false, nil)
	m.ended.Store(endCanceled)
	m.AfterFunc(func() {})
	if len(m.after) != 1 {
		t.Fatal("AfterFunc ran its function while Done was still open")
	}
	m.timer.Stop()

	for range 2000 {
		var o opsContext
		o.start(context.Background(), time.Now().Add(time.Hour), false, nil)
		var wg sync.WaitGroup
		children := make(chan context.Context, 12)
		ready := make(chan struct{})
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-ready
				for range 4 {
					child, cancel := context.WithCancel(&o)
					defer cancel()
					children <- child
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			o.end(endCanceled)
		}()
		close(ready)
		wg.Wait()
		close(children)
		for child := range children {
			select {
			case <-child.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("a context derived as the round's ended outlived it")
			}
		}
	}
}

// ended waits up to 5 s for o to end, and reports its error and when it
// ended.
func ended(t *testing.T, o *opsContext) (error, time.Time) {
	t.Helper()
	select {
	case <-o.Done():
		return o.Err(), time.Now()
	case <-time.After(5 * time.Second):
		t.Fatalf("a round's context (deadline in %v) still running 5s on", time.Until(o.deadline).Round(time.Millisecond))
		return nil, time.Time{}
	}
}

// Queued on a Client's expiries, rounds end at their deadlines, never
// before, with DeadlineExceeded; those ended first end Canceled, and the
// timer, set for the first of them, moves on to the rounds still running.
func TestExpiriesEndRoundsAtTheirDeadlines(t *testing.T) {
	var e expiries
	now := time.Now()
	var os [12]opsContext
	for i := range os {
		os[i].start(context.Background(), now.Add(time.Duration(200+10*i)*time.Millisecond), false, &e)
		if os[i].queued != &e || os[i].timer != nil {
			t.Fatalf("round %d, deadline after the last queued: not queued", i)
		}
	}
	for i := 0; i < len(os); i += 3 { // the first one, and every third
		os[i].end(endCanceled)
	}
	for i := range os {
		err, at := ended(t, &os[i])
		switch {
		case i%3 == 0 && err != context.Canceled:
			t.Errorf("round %d, ended first: Err() = %v, want Canceled", i, err)
		case i%3 != 0 && err != context.DeadlineExceeded:
			t.Errorf("round %d: Err() = %v, want DeadlineExceeded", i, err)
		case i%3 != 0 && at.Before(os[i].deadline):
			t.Errorf("round %d ended %v before its deadline", i, os[i].deadline.Sub(at))
		}
	}
}

// A round whose deadline comes before the last one queued (a caller's ctx
// deadline, say) has a timer of its own: queued behind a later deadline,
// it would end only then.
func TestExpiriesRoundWithAnEarlierDeadline(t *testing.T) {
	var e expiries
	var late, early opsContext
	late.start(context.Background(), time.Now().Add(time.Hour), false, &e)
	defer late.end(endCanceled)
	early.start(context.Background(), time.Now().Add(200*time.Millisecond), false, &e)
	if early.queued != nil || early.timer == nil {
		t.Fatal("a round with an earlier deadline than the last queued was queued")
	}
	if err, at := ended(t, &early); err != context.DeadlineExceeded || at.Before(early.deadline) {
		t.Errorf("Err() = %v, %v after its deadline; want DeadlineExceeded, after", err, at.Sub(early.deadline))
	}
}

// A round that ends first leaves the queue at once: the queue keeps no
// round's state (its fan, its caller's ctx values) past its end, whatever
// the node timeout. Its empty slots stay while an older round runs (at
// most a node timeout), and are dropped when the next round joins after
// that.
func TestExpiriesKeepNoEndedRound(t *testing.T) {
	var e expiries
	var running opsContext // the oldest round, still running: the front of the queue stays
	running.start(context.Background(), time.Now().Add(time.Hour), false, &e)
	for range 5000 {
		o := new(opsContext)
		o.start(context.Background(), time.Now().Add(time.Hour), false, &e)
		o.end(endCanceled)
	}
	e.mu.Lock()
	held := 0
	for _, o := range e.queue[e.head:] {
		if o != nil && o != &running {
			held++
		}
	}
	e.mu.Unlock()
	if held > 0 {
		t.Errorf("the queue holds %d of 5000 rounds ended first", held)
	}
	running.end(endCanceled)
	var next opsContext
	next.start(context.Background(), time.Now().Add(time.Hour), false, &e)
	defer next.end(endCanceled)
	e.mu.Lock()
	defer e.mu.Unlock()
	if n := len(e.queue) - e.head; n != 1 {
		t.Errorf("%d slots queued after the older rounds ended and one joined; want 1", n)
	}
	if len(e.queue) > 64 || cap(e.queue) > 1024 {
		t.Errorf("the queue has %d slots and room for %d after the burst; want 1 and its storage given back", len(e.queue), cap(e.queue))
	}
}

// Rounds started and ended from many goroutines at once, some at their
// deadlines and some before, each end: those not ended first with
// DeadlineExceeded, not before their deadline, and within 5 s of it
// (go test -race checks the queue's locking).
func TestExpiriesConcurrentRounds(t *testing.T) {
	var e expiries
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				o := new(opsContext)
				d := time.Duration(1+(g+i)%5) * time.Millisecond
				o.start(context.Background(), time.Now().Add(d), false, &e)
				first := i%2 == 0
				if first {
					o.end(endCanceled)
				}
				select {
				case <-o.Done():
					if now := time.Now(); !first && (o.Err() != context.DeadlineExceeded || now.Before(o.deadline)) {
						errs <- fmt.Sprintf("a round ended %v from its deadline with %v", now.Sub(o.deadline), o.Err())
						return
					}
				case <-time.After(5 * time.Second):
					errs <- "a round outlived its deadline by 5s"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Error(s)
	}
}

// A caller's ctx deadline may carry a wall-clock reading only (a time
// from time.Date or Round(0)); the queue orders and ends rounds by their
// deadline read on the monotonic clock, as a timer of their own would, so
// that a step of the wall clock moves no round's end.
func TestExpiriesCountOnTheMonotonicClock(t *testing.T) {
	var e expiries
	var o opsContext
	wall := time.Now().Add(time.Hour).Round(0)
	o.start(context.Background(), wall, false, &e)
	defer o.end(endCanceled)
	if o.queued != &e {
		t.Fatal("not queued")
	}
	if !strings.Contains(o.due.String(), "m=") {
		t.Errorf("the queue's due time %v has no monotonic reading", o.due)
	}
	if d, _ := o.Deadline(); !d.Equal(wall) {
		t.Errorf("Deadline() = %v; want the caller's %v", d, wall)
	}
}

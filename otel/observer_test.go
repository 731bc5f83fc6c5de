package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/observe"
	redlockotel "github.com/quorumlock/redlock/otel"
)

var (
	acquired      = attribute.String("redlock.outcome", "acquired")
	notAcquired   = attribute.String("redlock.outcome", "not_acquired")
	released      = attribute.String("redlock.outcome", "released")
	releaseFailed = attribute.String("redlock.outcome", "release_failed")
	extended      = attribute.String("redlock.outcome", "extended")
	extendFailed  = attribute.String("redlock.outcome", "extend_failed")
	lost          = attribute.String("redlock.outcome", "lost")
	retried       = attribute.String("redlock.outcome", "retry")
	failed        = attribute.String("redlock.outcome", "failed")
	agreed        = attribute.String("redlock.outcome", "agreed")
	refused       = attribute.String("redlock.outcome", "refused")
)

func errType(class string) attribute.KeyValue { return attribute.String("error.type", class) }
func op(o observe.Op) attribute.KeyValue      { return attribute.String("redlock.op", o.String()) }
func node(i int) attribute.KeyValue           { return attribute.Int("redlock.node", i) }

// checkNodeEvents checks that span has one redlock.node event per node in
// want, with its op, outcome and error type; want maps node to outcome, and
// a failed node's class follows a slash ("failed/io").
func checkNodeEvents(t *testing.T, span sdktrace.ReadOnlySpan, o observe.Op, addrs []string, want map[int]string) {
	t.Helper()
	evs := events(span, "redlock.node")
	if len(evs) != len(want) {
		t.Fatalf("%s: %d node events, want %d: %v", span.Name(), len(evs), len(want), evs)
	}
	seen := map[int]bool{}
	for _, ev := range evs {
		n := int(attrInt(ev.Attributes, "redlock.node"))
		seen[n] = true
		got := attrString(ev.Attributes, "redlock.outcome")
		if c := attrString(ev.Attributes, "error.type"); c != "" {
			got += "/" + c
		}
		if got != want[n] {
			t.Errorf("%s: node %d answered %q, want %q", span.Name(), n, got, want[n])
		}
		if g := attrString(ev.Attributes, "redlock.op"); g != o.String() {
			t.Errorf("%s: node %d op %q, want %q", span.Name(), n, g, o)
		}
		if host := attrString(ev.Attributes, "server.address"); host != "127.0.0.1" {
			t.Errorf("node %d: server.address %q", n, host)
		}
		if port := attrInt(ev.Attributes, "server.port"); addrs[n] != fmt.Sprintf("127.0.0.1:%d", port) {
			t.Errorf("node %d: server.port %d, address %s", n, port, addrs[n])
		}
		if ev.Time.Before(span.StartTime()) || ev.Time.After(span.EndTime()) {
			t.Errorf("%s: node %d's event at %v, outside the span [%v, %v]", span.Name(), n, ev.Time, span.StartTime(), span.EndTime())
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%s: node events for %v, want one for each of %v", span.Name(), seen, want)
	}
}

// Five nodes, two of them down: the acquisition stands on a bare majority.
// Its span, a child of the caller's, has one event per node; the degraded
// gauge counts the lock until Unlock.
func TestBareMajority(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 5)
	addrs := make([]string, 5)
	for i, s := range c.servers {
		addrs[i] = s.Addr
	}
	c.servers[3].Stop()
	c.servers[4].Stop()
	client, gated := gatedClient(t, h, c.pools)
	// The live nodes answer after the dead ones have failed, so that Lock
	// returns knowing the lock stands on three nodes, and each span has
	// all five answers.
	c.failuresFirst(gated, 2, 0, 1, 2)

	ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
	l, err := client.Lock(ctx, "bare", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Margin() != 0 {
		t.Fatalf("margin %d, want 0", l.Margin())
	}

	span := h.oneSpan(t, "redlock.lock")
	if span.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("lock span's parent is %v, want the caller's span %v", span.Parent().SpanID(), caller.SpanContext().SpanID())
	}
	bareAnswers := map[int]string{0: "agreed", 1: "agreed", 2: "agreed", 3: "failed/io", 4: "failed/io"}
	checkNodeEvents(t, span, observe.OpAcquire, addrs, bareAnswers)
	attrs := span.Attributes()
	if attrString(attrs, "redlock.outcome") != "acquired" || attrInt(attrs, "redlock.margin") != 0 ||
		attrInt(attrs, "redlock.held") != 3 || attrInt(attrs, "redlock.quorum") != 3 || attrString(attrs, "redlock.key") != "bare" {
		t.Errorf("lock span attributes %v", attrs)
	}
	if span.Status().Code == codes.Error {
		t.Errorf("lock span status %v", span.Status())
	}

	if got := h.sum(t, "redlock.lock.degraded"); got != 1 {
		t.Errorf("degraded gauge %d while the lock is held on a bare majority, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.held"); got != 1 {
		t.Errorf("held gauge %d, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.outcomes", acquired); got != 1 {
		t.Errorf("acquired outcomes %d, want 1", got)
	}
	if got := h.count(t, "redlock.lock.acquire.duration", acquired); got != 1 {
		t.Errorf("acquire durations %d, want 1", got)
	}
	for _, i := range []int{3, 4} {
		if got := h.sum(t, "redlock.node.errors", node(i), op(observe.OpAcquire), errType("io")); got != 1 {
			t.Errorf("node %d: %d io errors, want 1", i, got)
		}
	}
	if got := h.sum(t, "redlock.node.errors", node(0)); got != 0 {
		t.Errorf("node 0: %d errors, want 0", got)
	}
	if got := h.count(t, "redlock.node.duration", op(observe.OpAcquire)); got != 5 {
		t.Errorf("%d node durations, want 5", got)
	}
	if got := h.count(t, "redlock.node.duration", op(observe.OpAcquire), agreed); got != 3 {
		t.Errorf("%d agreed node durations, want 3", got)
	}

	// An Extend on the same three nodes: still bare.
	c.failuresFirst(gated, 2, 0, 1, 2)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	ext := h.oneSpan(t, "redlock.extend")
	checkNodeEvents(t, ext, observe.OpExtend, addrs, bareAnswers)
	if ext.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("extend span's parent is %v, want the caller's", ext.Parent().SpanID())
	}
	if got := h.sum(t, "redlock.lock.degraded"); got != 1 {
		t.Errorf("degraded gauge %d after a bare Extend, want 1", got)
	}

	c.failuresFirst(gated, 2, 0, 1, 2)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()
	unlock := h.oneSpan(t, "redlock.unlock")
	checkNodeEvents(t, unlock, observe.OpRelease, addrs, bareAnswers)
	if unlock.Parent().SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("unlock span's parent is %v, want the caller's", unlock.Parent().SpanID())
	}
	// The span lasts Unlock's Latency, which covers every node's part of
	// the answers that came before Unlock returned.
	for _, ev := range events(unlock, "redlock.node") {
		if d := attrFloat(ev.Attributes, "redlock.duration"); d > unlock.EndTime().Sub(unlock.StartTime()).Seconds() {
			t.Errorf("unlock span lasts %v, less than node %d's %vs", unlock.EndTime().Sub(unlock.StartTime()), attrInt(ev.Attributes, "redlock.node"), d)
		}
	}
	if got := h.sum(t, "redlock.lock.degraded"); got != 0 {
		t.Errorf("degraded gauge %d after Unlock, want 0", got)
	}
	if got := h.sum(t, "redlock.lock.held"); got != 0 {
		t.Errorf("held gauge %d after Unlock, want 0", got)
	}
	if got := h.count(t, "redlock.lock.hold.duration", released); got != 1 {
		t.Errorf("hold durations %d, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.outcomes", released); got != 1 {
		t.Errorf("released outcomes %d, want 1", got)
	}
}

// A lock acquired on a bare majority leaves the degraded gauge when an
// Extend finds it on more nodes: two nodes applied the SET but their
// replies were lost.
func TestDegradedGaugeFollowsExtend(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 5)
	c.pools[3].dropReply.Store(true)
	c.pools[4].dropReply.Store(true)
	client, gated := gatedClient(t, h, c.pools)
	c.failuresFirst(gated, 2, 0, 1, 2)
	ctx := context.Background()

	l, err := client.Lock(ctx, "recovers", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.sum(t, "redlock.lock.degraded"); got != 1 || l.Margin() != 0 {
		t.Fatalf("degraded gauge %d at margin %d, want 1 at margin 0", got, l.Margin())
	}
	c.pools[3].dropReply.Store(false)
	c.pools[4].dropReply.Store(false)
	for _, p := range c.pools {
		p.wait.Store(nil)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if l.Margin() != 2 {
		t.Fatalf("margin %d after Extend, want 2", l.Margin())
	}
	if got := h.sum(t, "redlock.lock.degraded"); got != 0 {
		t.Errorf("degraded gauge %d after an Extend on all five nodes, want 0", got)
	}
	if got := h.sum(t, "redlock.lock.held"); got != 1 {
		t.Errorf("held gauge %d, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.outcomes", extended); got != 1 {
		t.Errorf("extended outcomes %d, want 1", got)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.sum(t, "redlock.lock.held"); got != 0 {
		t.Errorf("held gauge %d after Unlock, want 0", got)
	}
}

// Do loses its lock when the key disappears from the nodes: the loss is
// counted with its cause, on the outcome counter and the caller's span.
func TestLostLock(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 3)
	client := client(t, h, c.pools, redlock.WithRetryDelay(10*time.Millisecond, 20*time.Millisecond))

	ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
	// Do extends at a third of the ttl: that Extend finds the key gone, and
	// Unlock follows well within the validity, even on a loaded machine.
	err := client.Do(ctx, "lost", 1500*time.Millisecond, func(ctx context.Context) error {
		for _, s := range c.servers {
			conn, err := redis.Dial("tcp", s.Addr)
			if err != nil {
				return err
			}
			_, err = conn.Do("FLUSHALL")
			conn.Close()
			if err != nil {
				return err
			}
		}
		<-ctx.Done()
		return nil
	})
	caller.End()
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do returned %v, want ErrLockLost", err)
	}
	if got := h.sum(t, "redlock.lock.outcomes", lost, errType("refused")); got != 1 {
		t.Errorf("lost outcomes with error.type refused: %d, want 1; all: %v", got, h.attrSets(t, "redlock.lock.outcomes"))
	}
	if got := h.count(t, "redlock.lock.hold.duration", lost); got != 1 {
		t.Errorf("hold durations of lost locks: %d, want 1", got)
	}
	// The Extend whose refusals proved the loss, and Do's release, which
	// finds the key gone too, fail with ErrLockLost.
	if got := h.sum(t, "redlock.lock.outcomes", extendFailed, errType("lost")); got != 1 {
		t.Errorf("extensions that found the lock lost: %d, want 1; all: %v", got, h.attrSets(t, "redlock.lock.outcomes"))
	}
	if got := h.sum(t, "redlock.lock.outcomes", releaseFailed, errType("lost")); got != 1 {
		t.Errorf("releases that found the lock lost: %d, want 1; all: %v", got, h.attrSets(t, "redlock.lock.outcomes"))
	}
	if got := h.sum(t, "redlock.lock.held"); got != 0 {
		t.Errorf("held gauge %d after the loss, want 0", got)
	}
	callerSpan := h.oneSpan(t, "caller")
	evs := events(callerSpan, "redlock.lock.lost")
	if len(evs) != 1 || attrString(evs[0].Attributes, "error.type") != "refused" || attrString(evs[0].Attributes, "redlock.key") != "lost" {
		t.Errorf("caller's span events %v, want one redlock.lock.lost, refused", callerSpan.Events())
	}
	ext := h.ended("redlock.extend")
	if len(ext) == 0 || ext[len(ext)-1].Status().Code != codes.Error {
		t.Errorf("the refused Extend's span: %v", ext)
	}
}

// A Lock that finds the key held retries, and gives up: the retry and the
// failure are counted, and the span tells both.
func TestRetryCounted(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 3)
	// Wake-up off: a waiting Lock's subscription would make a woken
	// attempt (a probe for a release before it), which is one more retry
	// when it comes before the timed one; here only the timed ones count.
	client := client(t, h, c.pools, redlock.WithTries(2), redlock.WithRetryDelay(time.Millisecond, 2*time.Millisecond),
		redlock.WithWakeUp(false))
	ctx := context.Background()
	held, err := client.TryLock(ctx, "busy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h.spans.Reset()

	if _, err := client.Lock(ctx, "busy", time.Minute); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("Lock on a held key returned %v, want ErrNotObtained", err)
	}
	if got := h.sum(t, "redlock.lock.retries", errType("refused")); got != 1 {
		t.Errorf("retries %d, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.outcomes", notAcquired, errType("refused")); got != 1 {
		t.Errorf("refused acquisitions %d, want 1", got)
	}
	if got := h.count(t, "redlock.lock.attempt.duration", retried); got != 1 {
		t.Errorf("attempts that were retried: %d, want 1", got)
	}
	if got := h.count(t, "redlock.lock.attempt.duration", notAcquired); got != 1 {
		t.Errorf("attempts that gave up: %d, want 1", got)
	}
	if got := h.count(t, "redlock.lock.acquire.duration", notAcquired); got != 1 {
		t.Errorf("Lock calls that gave up: %d, want 1", got)
	}
	if got := h.count(t, "redlock.node.duration", refused); got < 4 {
		t.Errorf("refused node answers: %d, want at least 4 (a majority per attempt)", got)
	}
	span := h.oneSpan(t, "redlock.lock")
	if span.Status().Code != codes.Error {
		t.Errorf("span status %v, want Error", span.Status())
	}
	if attrString(span.Attributes(), "error.type") != "refused" || attrInt(span.Attributes(), "redlock.tries") != 2 {
		t.Errorf("span attributes %v", span.Attributes())
	}
	retries := events(span, "redlock.retry")
	if len(retries) != 1 || attrInt(retries[0].Attributes, "redlock.try") != 1 {
		t.Errorf("retry events %v, want one for try 1", retries)
	}
	if n := len(events(span, "redlock.node")); n < 4 {
		t.Errorf("%d node events, want at least 4", n)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// With two of three nodes gone, Extend and Unlock fail: both are counted
// with the nodes' error type, and the lock no longer counts as held.
func TestReleaseFailure(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 3)
	client := client(t, h, c.pools)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "orphan", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.servers[1].Stop()
	c.servers[2].Stop()

	if err := l.Extend(ctx, time.Minute); err == nil {
		t.Fatal("Extend on one of three nodes succeeded")
	}
	if got := h.sum(t, "redlock.lock.outcomes", extendFailed, errType("io")); got != 1 {
		t.Errorf("failed extensions with error.type io: %d, want 1; all: %v", got, h.attrSets(t, "redlock.lock.outcomes"))
	}
	if got := h.sum(t, "redlock.lock.held"); got != 1 {
		t.Errorf("held gauge %d after a failed Extend, want 1: the old window still holds", got)
	}
	if err := l.Unlock(ctx); err == nil {
		t.Fatal("Unlock on one of three nodes succeeded")
	}
	if got := h.sum(t, "redlock.lock.outcomes", releaseFailed, errType("io")); got != 1 {
		t.Errorf("failed releases with error.type io: %d, want 1", got)
	}
	if got := h.count(t, "redlock.lock.release.duration", releaseFailed); got != 1 {
		t.Errorf("release durations %d, want 1", got)
	}
	if got := h.sum(t, "redlock.lock.held"); got != 0 {
		t.Errorf("held gauge %d after Unlock began, want 0", got)
	}
	if got := h.sum(t, "redlock.node.errors", op(observe.OpRelease), errType("io")); got != 2 {
		t.Errorf("release node errors %d, want 2", got)
	}
	span := h.oneSpan(t, "redlock.unlock")
	if span.Status().Code != codes.Error || attrString(span.Attributes(), "error.type") != "io" {
		t.Errorf("unlock span status %v, attributes %v", span.Status(), span.Attributes())
	}
	if n := len(events(span, "redlock.node")); n < 2 {
		t.Errorf("unlock span has %d node events, want the two failures at least", n)
	}
}

// Nodes that answer after their call has returned (here: two frozen nodes,
// at the node timeout) reach the metrics, not the ended spans, and leave no
// state behind.
func TestStragglers(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 3)
	pools := append([]*faultPool(nil), c.pools...)
	for range 2 {
		pools = append(pools, poolFor(t, redistest.StartFrozen(t).Addr()))
	}
	const timeout = 500 * time.Millisecond
	client := client(t, h, pools, redlock.WithNodeTimeout(timeout))
	ctx := context.Background()

	l, err := client.TryLock(ctx, "slow", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the frozen nodes' answers", func() bool {
		return h.count(t, "redlock.node.duration") == 10
	})
	for _, o := range []observe.Op{observe.OpAcquire, observe.OpRelease} {
		if got := h.sum(t, "redlock.node.errors", op(o), errType("timeout")); got != 2 {
			t.Errorf("%v: %d timeouts counted, want 2", o, got)
		}
	}
	for _, name := range []string{"redlock.lock", "redlock.unlock"} {
		span := h.oneSpan(t, name)
		if n := len(events(span, "redlock.node")); n != 3 {
			t.Errorf("%s span: %d node events, want the 3 answers before it ended", name, n)
		}
	}
	// An undo of a frozen node's late SET may still be running: wait for it.
	waitFor(t, 5*time.Second, "the client's node calls to end", func() bool { return client.Close() == nil })

	// The Unlock is remembered a while, so that its stragglers were known
	// as such; then it goes.
	if n := redlockotel.CallStates(h.obs); n != 1 {
		t.Errorf("%d calls kept just after Unlock, want 1", n)
	}
	later := time.Now().Add(redlockotel.StragglerWindow + time.Second)
	redlockotel.SetNow(h.obs, func() time.Time { return later })
	redlockotel.Sweep(h.obs)
	if n := redlockotel.CallStates(h.obs); n != 0 {
		t.Errorf("%d calls kept after the straggler window, want 0", n)
	}
}

// redlock.key is on lock-level metrics only when asked for, and never on
// node-level ones.
func TestKeyAttribute(t *testing.T) {
	for _, withKeys := range []bool{false, true} {
		var opts []redlockotel.Option
		if withKeys {
			opts = append(opts, redlockotel.WithKeyAttribute())
		}
		h := newHarness(t, opts...)
		c := startCluster(t, 1)
		client := client(t, h, c.pools)
		l, err := client.TryLock(context.Background(), "tenant:7", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"redlock.lock.outcomes", "redlock.lock.acquire.duration", "redlock.lock.hold.duration", "redlock.node.duration"} {
			for _, set := range h.attrSets(t, name) {
				v, has := set.Value("redlock.key")
				want := withKeys && name != "redlock.node.duration"
				if has != want || has && v.AsString() != "tenant:7" {
					t.Errorf("WithKeyAttribute %v: %s has attributes %v", withKeys, name, set.ToSlice())
				}
			}
		}
		if got := h.sum(t, "redlock.lock.degraded"); got != 0 {
			t.Errorf("a lock on one node counted degraded: %d", got)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]redlockotel.Option{
		"nil MeterProvider":  redlockotel.WithMeterProvider(nil),
		"nil TracerProvider": redlockotel.WithTracerProvider(nil),
		"zero max ttl":       redlockotel.WithMaxTTL(0),
		"negative max ttl":   redlockotel.WithMaxTTL(-time.Second),
		"nil option":         nil,
	} {
		if _, err := redlockotel.NewObserver(opt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// With fencing, the second round's answers join the Lock span too, and the
// span carries the fencing token.
func TestFencing(t *testing.T) {
	h := newHarness(t)
	c := startCluster(t, 3)
	client := client(t, h, c.pools, redlock.WithFencing())
	l, err := client.TryLock(context.Background(), "fenced", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	span := h.oneSpan(t, "redlock.lock")
	ops := map[string]int{}
	for _, ev := range events(span, "redlock.node") {
		ops[attrString(ev.Attributes, "redlock.op")]++
	}
	// Each round returns once two of three agreed; the third may answer
	// after the span ended.
	if ops["acquire"] < 2 || ops["fence"] < 2 {
		t.Errorf("node events by op %v, want a majority of each round", ops)
	}
	if got := attrInt(span.Attributes(), "redlock.fencing_token"); got != int64(l.Token()) || got < 1 {
		t.Errorf("fencing token attribute %d, lock's token %d", got, l.Token())
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With a no-op TracerProvider the Observer records metrics and keeps no
// state for Extend and Unlock.
func TestMetricsOnly(t *testing.T) {
	h := newHarness(t, redlockotel.WithTracerProvider(noop.NewTracerProvider()))
	c := startCluster(t, 3)
	client := client(t, h, c.pools)
	ctx := context.Background()
	l, err := client.TryLock(ctx, "quiet", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if n := redlockotel.CallStates(h.obs); n != 0 {
		t.Errorf("%d calls kept without tracing", n)
	}
	if got := h.sum(t, "redlock.lock.outcomes"); got != 3 {
		t.Errorf("%d outcomes counted, want 3", got)
	}
	if n := len(h.spans.Ended()); n != 0 {
		t.Errorf("%d spans recorded", n)
	}
}

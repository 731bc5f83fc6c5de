package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// electTTL is the leadership ttl of the unit tests: long enough that the
// background extension never races a loaded machine, short enough that
// nothing waits for it.
const electTTL = 2 * time.Second

// electRecordKey is the leader record of the election "svc" (elect_publish.lua).
const electRecordKey = "redlock:leader:{svc}"

func mustCampaign(t *testing.T, e *redlock.Election, value string) *redlock.Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ld, err := e.Campaign(ctx, value)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", value, err)
	}
	return ld
}

func mustResign(t *testing.T, ld *redlock.Leadership) {
	t.Helper()
	if err := ld.Resign(context.Background()); err != nil {
		t.Fatalf("Resign of term %d: %v", ld.Term(), err)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One candidate leads; Leader reports its value and term; a rival cannot be
// elected until it resigns; then the rival leads with a higher term. The
// Client has no WithFencing: elections are fenced anyway.
func TestElectionCampaignLeaderResign(t *testing.T) {
	c := newCluster(t, 5)
	a := c.client(t).Election("svc", redlock.WithElectionTTL(electTTL))
	b := c.client(t).Election("svc", redlock.WithElectionTTL(electTTL))
	ctx := context.Background()

	if _, err := a.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign = %v, want ErrNoLeader", err)
	}
	la := mustCampaign(t, a, "host-a")
	if la.Term() == 0 || la.Value() != "host-a" || !time.Now().Before(la.Until()) || la.Err() != nil || isClosed(la.Done()) {
		t.Fatalf("leadership: term %d, value %q, until in %v, err %v", la.Term(), la.Value(), time.Until(la.Until()), la.Err())
	}
	for _, e := range []*redlock.Election{a, b} {
		got, err := e.Leader(ctx)
		if err != nil || !sameLeader(got, redlock.Leader{Value: "host-a", Term: la.Term()}) {
			t.Fatalf("Leader = %+v, %v; want host-a at term %d", got, err, la.Term())
		}
	}

	// The rival waits while a leads: its campaign ends with its context.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	lb, err := b.Campaign(short, "host-b")
	cancel()
	if lb != nil || !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rival Campaign while a leads = %v, %v; want ErrNotObtained and DeadlineExceeded", lb, err)
	}

	// A campaign that is waiting is elected once the leader resigns.
	elected := make(chan *redlock.Leadership, 1)
	failed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ld, err := b.Campaign(ctx, "host-b")
		if err != nil {
			failed <- err
			return
		}
		elected <- ld
	}()
	mustResign(t, la)
	if !isClosed(la.Done()) || !errors.Is(la.Err(), redlock.ErrNotLeader) || !la.Until().IsZero() {
		t.Fatalf("after Resign: Done closed %v, Err %v, Until %v", isClosed(la.Done()), la.Err(), la.Until())
	}
	if cause := context.Cause(la.Context()); !errors.Is(cause, redlock.ErrNotLeader) {
		t.Fatalf("Context's cause after Resign = %v", cause)
	}
	var lb2 *redlock.Leadership
	select {
	case lb2 = <-elected:
	case err := <-failed:
		t.Fatalf("waiting Campaign: %v", err)
	}
	if lb2.Term() <= la.Term() {
		t.Fatalf("term %d after term %d: terms must grow", lb2.Term(), la.Term())
	}
	got, err := a.Leader(ctx)
	if err != nil || !sameLeader(got, redlock.Leader{Value: "host-b", Term: lb2.Term()}) {
		t.Fatalf("Leader after the hand-over = %+v, %v; want host-b at term %d", got, err, lb2.Term())
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatalf("Election.Resign: %v", err)
	}
	if _, err := a.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after every resign = %v, want ErrNoLeader", err)
	}
}

// Terms grow strictly across candidates on clients with and without
// WithFencing, and across plain fenced Locks of the same key: they share the
// quorum's fencing counter.
func TestElectionTermsFromTheFencingCounter(t *testing.T) {
	c := newCluster(t, 3)
	plain := c.client(t)
	fenced := c.client(t, redlock.WithFencing())
	var last uint64
	for i := range 6 {
		client := plain
		if i%2 == 1 {
			client = fenced
		}
		ld := mustCampaign(t, client.Election("svc", redlock.WithElectionTTL(electTTL)), fmt.Sprint("v", i))
		if ld.Term() <= last {
			t.Fatalf("campaign %d: term %d after %d", i, ld.Term(), last)
		}
		last = ld.Term()
		mustResign(t, ld)
	}
	// The counter is the key's: a fenced Lock after the elections exceeds them.
	l, err := fenced.Lock(context.Background(), "svc", electTTL)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= last {
		t.Fatalf("fenced Lock token %d after term %d", l.Token(), last)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// And the plain Client's own Locks stay unfenced.
	l, err = plain.Lock(context.Background(), "other", electTTL)
	if err != nil || l.Token() != 0 {
		t.Fatalf("plain Lock after elections: token %d, %v; want 0", l.Token(), err)
	}
	_ = l.Unlock(context.Background())
}

func TestElectionBadInput(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	var nilCtx context.Context
	before := c.gets()

	bad := map[string]*redlock.Election{
		"empty name":    client.Election(""),
		"nil option":    client.Election("svc", nil),
		"zero ttl":      client.Election("svc", redlock.WithElectionTTL(0)),
		"ttl ≤ drift":   client.Election("svc", redlock.WithElectionTTL(2*time.Millisecond)),
		"zero interval": client.Election("svc", redlock.WithObserveInterval(0)),
		"nil client":    (*redlock.Client)(nil).Election("svc"),
		"nil Election":  nil,
	}
	for name, e := range bad {
		if ld, err := e.Campaign(ctx, "v"); ld != nil || !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Campaign = %v, %v; want ErrInvalid", name, ld, err)
		}
		if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Leader = %v; want ErrInvalid", name, err)
		}
		if ch, err := e.Observe(ctx); ch != nil || !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Observe = %v, %v; want ErrInvalid", name, ch, err)
		}
		if err := e.Resign(ctx); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Resign = %v; want ErrInvalid", name, err)
		}
	}
	good := client.Election("svc", redlock.WithElectionTTL(electTTL))
	if ld, err := good.Campaign(nilCtx, "v"); ld != nil || !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Campaign(nil ctx) = %v, %v", ld, err)
	}
	if _, err := good.Leader(nilCtx); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Leader(nil ctx) = %v", err)
	}
	if _, err := good.Observe(nilCtx); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Observe(nil ctx) = %v", err)
	}
	if err := good.Resign(nilCtx); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Resign(nil ctx) = %v", err)
	}
	if n := c.gets(); n != before {
		t.Fatalf("%d batches sent for bad input, want none", n-before)
	}

	// The nil *Leadership of a failed Campaign leads nothing.
	var none *redlock.Leadership
	if none.Term() != 0 || none.Value() != "" || !none.Until().IsZero() || !isClosed(none.Done()) ||
		!errors.Is(none.Err(), redlock.ErrInvalid) || !errors.Is(none.Resign(ctx), redlock.ErrInvalid) ||
		!errors.Is(context.Cause(none.Context()), redlock.ErrInvalid) {
		t.Fatal("the nil *Leadership does not behave as documented")
	}

	// One leadership per Election at a time.
	ld := mustCampaign(t, good, "v")
	if again, err := good.Campaign(ctx, "w"); again != nil || !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("second Campaign on a leading Election = %v, %v; want ErrInvalid", again, err)
	}
	if err := ld.Resign(nilCtx); !errors.Is(err, redlock.ErrInvalid) || ld.Err() != nil {
		t.Fatalf("Resign(nil ctx) = %v (leadership err %v); want ErrInvalid and still leading", err, ld.Err())
	}
	mustResign(t, ld)
}

// Resign by someone who does not lead: an Election that never won, the
// loser of a campaign, and a second Resign of the same leadership.
func TestElectionResignByNonLeader(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	leader := c.client(t).Election("svc", redlock.WithElectionTTL(electTTL))
	other := c.client(t).Election("svc", redlock.WithElectionTTL(electTTL))

	if err := other.Resign(ctx); !errors.Is(err, redlock.ErrNotLeader) {
		t.Fatalf("Resign of an Election that never campaigned = %v, want ErrNotLeader", err)
	}
	ld := mustCampaign(t, leader, "a")
	if err := other.Resign(ctx); !errors.Is(err, redlock.ErrNotLeader) {
		t.Fatalf("Resign by a non-leader while another leads = %v, want ErrNotLeader", err)
	}
	if got, err := other.Leader(ctx); err != nil || got.Value != "a" {
		t.Fatalf("the non-leader's Resign disturbed the leader: Leader = %+v, %v", got, err)
	}
	c.settle(t) // a straggler's SET may still be on its way to a node
	if n := c.count("svc", ""); n != 0 {
		t.Fatalf("key absent on %d nodes after a non-leader's Resign", n)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if err := leader.Resign(ctx); !errors.Is(err, redlock.ErrNotLeader) {
		t.Fatalf("Election.Resign twice = %v, want ErrNotLeader", err)
	}
	if err := ld.Resign(ctx); !errors.Is(err, redlock.ErrNotLeader) {
		t.Fatalf("Leadership.Resign after resigning = %v, want ErrNotLeader", err)
	}
}

// A majority of nodes refuses an extension (the key is gone from them: a
// restart without persistence, an eviction): Done closes, Err and Resign
// wrap ErrLockLost, and the Context is cancelled with the cause.
func TestElectionDoneOnLossByRefusal(t *testing.T) {
	c := newCluster(t, 3)
	const ttl = 300 * time.Millisecond
	e := c.client(t).Election("svc", redlock.WithElectionTTL(ttl))
	ld := mustCampaign(t, e, "a")
	for _, m := range c.nodes {
		m.Del("svc")
	}
	select {
	case <-ld.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done not closed within 10 ttls of losing the key on every node")
	}
	if !errors.Is(ld.Err(), redlock.ErrLockLost) || !errors.Is(context.Cause(ld.Context()), redlock.ErrLockLost) {
		t.Fatalf("Err = %v, cause = %v; want ErrLockLost", ld.Err(), context.Cause(ld.Context()))
	}
	// A leader that checks Until before it acts must not act on: the
	// refusals proved that no one holds a majority for it.
	if time.Now().Before(ld.Until()) {
		t.Fatalf("Until is %v ahead after a proven loss", time.Until(ld.Until()))
	}
	if err := ld.Resign(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Resign after the loss = %v, want ErrLockLost", err)
	}
	// The Election may campaign again.
	again := mustCampaign(t, e, "a")
	if again.Term() <= ld.Term() {
		t.Fatalf("term %d after %d", again.Term(), ld.Term())
	}
	mustResign(t, again)
}

// A leadership lost by a majority's refusal, and never resigned, does not
// leave its key on the node that kept it (the extensions that reached it
// pushed its expiry on): the loss sends the release, so neither Resign nor
// Close is needed to free it. (Before the fix the key stayed there until
// its ttl, even through Close.)
func TestElectionLossReleasesTheNodesThatKeptTheKey(t *testing.T) {
	c := newCluster(t, 3)
	const ttl = 600 * time.Millisecond
	client := c.client(t)
	ld := mustCampaign(t, client.Election("svc", redlock.WithElectionTTL(ttl)), "a")
	c.settle(t)
	c.nodes[0].Del("svc")
	c.nodes[1].Del("svc")
	select {
	case <-ld.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done not closed within 10 ttls of losing the key on a majority")
	}
	deadline := time.Now().Add(5 * time.Second) // miniredis never expires the key by itself
	for c.values("svc")[2] != "" {
		if time.Now().After(deadline) {
			t.Fatalf("node 2 still holds the lost leadership's key %v after the loss", time.Since(deadline.Add(-5*time.Second)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Resign before Close: Close resigns the leaderships it finds still
	// registered, and a Resign after that is told ErrNotLeader, as
	// Leadership.Resign documents; the loss's own clean-up may or may not
	// have unregistered this one by now.
	if err := ld.Resign(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Resign after the loss = %v, want ErrLockLost", err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
}

// The nodes stop answering: no extension succeeds, and Done closes when the
// validity runs out.
func TestElectionDoneOnLossByExpiry(t *testing.T) {
	c := newCluster(t, 3)
	const ttl = 300 * time.Millisecond
	e := c.client(t, redlock.WithNodeTimeout(20*time.Millisecond)).Election("svc", redlock.WithElectionTTL(ttl))
	ld := mustCampaign(t, e, "a")
	for _, p := range c.pools {
		p.set(failing)
	}
	select {
	case <-ld.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done not closed within 10 ttls of the nodes failing")
	}
	if time.Now().Before(ld.Until()) {
		t.Fatalf("Done closed %v before Until", time.Until(ld.Until()))
	}
	if !errors.Is(ld.Err(), redlock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", ld.Err())
	}
	for _, p := range c.pools {
		p.set(healthy)
	}
	if err := ld.Resign(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Resign after the loss = %v, want ErrLockLost", err)
	}
}

// The leadership outlives several ttls while it is extended, and a rival
// cannot take it meanwhile.
func TestElectionKeptPastSeveralTTLs(t *testing.T) {
	c := newCluster(t, 3)
	const ttl = 300 * time.Millisecond
	ld := mustCampaign(t, c.client(t).Election("svc", redlock.WithElectionTTL(ttl)), "a")
	rival := c.client(t).Election("svc", redlock.WithElectionTTL(ttl))
	first := ld.Until()
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ld.Err() != nil {
			t.Fatalf("leadership ended while extended: %v", ld.Err())
		}
		// miniredis keeps keys until told: expire them as Redis would, so
		// that only the extensions keep the leadership.
		for _, m := range c.nodes {
			m.FastForward(20 * time.Millisecond)
		}
	}
	if !ld.Until().After(first.Add(ttl)) {
		t.Fatalf("Until moved from %v to %v in 4 ttls: not extended", first, ld.Until())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if l, err := rival.Campaign(ctx, "b"); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("rival Campaign = %v, %v; want ErrNotObtained", l, err)
	}
	mustResign(t, ld)
}

// Leader believes only an answer that a majority of nodes gives.
func TestElectionLeaderNeedsAMajority(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t, redlock.WithNodeTimeout(200*time.Millisecond))
	e := client.Election("svc", redlock.WithElectionTTL(time.Minute))
	ctx := context.Background()
	ld := mustCampaign(t, e, "a")
	want := redlock.Leader{Value: "a", Term: ld.Term()}
	redlock.Settle(client) // the publish has reached every node

	// Two nodes down: the other three agree.
	c.pools[0].set(failing)
	c.pools[4].set(hanging)
	if got, err := e.Leader(ctx); err != nil || !sameLeader(got, want) {
		t.Fatalf("Leader with 2 of 5 down = %+v, %v; want %+v", got, err, want)
	}
	// Three down: no majority can answer.
	c.pools[2].set(failing)
	_, err := e.Leader(ctx)
	if !errors.Is(err, redlock.ErrNoLeader) || len(nodeErrors(err, nil)) < 2 {
		t.Fatalf("Leader with 3 of 5 down = %v; want ErrNoLeader naming the failed nodes", err)
	}
	for _, p := range c.pools {
		p.set(healthy)
	}

	// Two nodes see another leader (a forged record naming their key's
	// token): the majority still wins.
	for _, i := range []int{1, 3} {
		tok, _ := c.nodes[i].Get("svc")
		c.nodes[i].HSet(electRecordKey, "token", tok, "term", "999", "value", "forged")
	}
	if got, err := e.Leader(ctx); err != nil || !sameLeader(got, want) {
		t.Fatalf("Leader with 2 of 5 forged = %+v, %v; want %+v", got, err, want)
	}
	// Three nodes disagree with each other and with the rest: no majority.
	tok, _ := c.nodes[2].Get("svc")
	c.nodes[2].HSet(electRecordKey, "token", tok, "term", "998", "value", "other")
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader with a 2-1-2 split = %+v, %v; want ErrNoLeader", got, err)
	}

	// A node that answers with an error counts as failed, not as a leader
	// or as none. (Leader stops once no answer can reach a majority, so it
	// may not wait for the third.)
	for _, m := range c.nodes {
		m.Del(electRecordKey)
	}
	c.pools[0].set(errorReply)
	c.pools[1].set(errorReply)
	c.pools[3].set(errorReply)
	if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) || len(nodeErrors(err, nil)) < 2 {
		t.Fatalf("Leader with 3 error replies = %v; want ErrNoLeader naming the nodes", err)
	}
	for _, p := range c.pools {
		p.set(healthy)
	}
	mustResign(t, ld)
}

// A record left by an earlier leader never shows: a node counts a record
// only while its lock key holds the token the record names.
func TestElectionLeaderIgnoresStaleRecords(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	e := client.Election("svc", redlock.WithElectionTTL(time.Minute))
	ctx := context.Background()
	old := mustCampaign(t, e, "old")
	mustResign(t, old)
	redlock.Settle(client)
	// The old records are still on a majority of the nodes (the slowest
	// one's may have come after the release), but their key is gone.
	kept := 0
	for _, m := range c.nodes {
		if m.HGet(electRecordKey, "value") == "old" {
			kept++
		}
	}
	if kept < 2 {
		t.Fatalf("the old record is on %d nodes, want a majority", kept)
	}
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) || got.Unknown {
		t.Fatalf("Leader after the resign = %+v, %v; want ErrNoLeader, no one leading", got, err)
	}
	// A key set by someone else (a plain Lock on the same name) is no
	// leader that Leader can name: it is Unknown, since someone holds it.
	for _, m := range c.nodes {
		if err := m.Set("svc", "someone-else"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) || !got.Unknown {
		t.Fatalf("Leader with a foreign key = %+v, %v; want ErrNoLeader, Unknown", got, err)
	}
}

// When the first publish of the value reaches too few nodes, Campaign still
// returns the leadership, Leader says ErrNoLeader rather than name anyone
// else, and the value is published again in the background.
func TestElectionPublishRetried(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	e := client.Election("svc", redlock.WithElectionTTL(time.Minute))
	ctx := context.Background()
	prev := mustCampaign(t, e, "previous")
	mustResign(t, prev)
	// The record key has the wrong type on two nodes: HSET fails there.
	for _, m := range c.nodes[:2] {
		m.Del(electRecordKey)
		if err := m.Set(electRecordKey, "not a hash"); err != nil {
			t.Fatal(err)
		}
	}
	ld := mustCampaign(t, e, "a")
	if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader before the value reached a majority = %v; want ErrNoLeader", err)
	}
	for _, m := range c.nodes[:2] {
		m.Del(electRecordKey)
	}
	want := redlock.Leader{Value: "a", Term: ld.Term()}
	var got redlock.Leader
	var err error
	if !doWaitUntil(5*time.Second, func() bool { got, err = e.Leader(ctx); return err == nil }) || !sameLeader(got, want) {
		t.Fatalf("Leader once the nodes accept the record = %+v, %v; want %+v", got, err, want)
	}
	mustResign(t, ld)
}

// Observe sends the leader at the start, each change, and the zero Leader
// when no one leads; its channel closes when ctx ends.
func TestElectionObserve(t *testing.T) {
	doNoLeaks(t)
	c := newCluster(t, 3)
	client := c.client(t)
	opts := []redlock.ElectionOption{redlock.WithElectionTTL(electTTL), redlock.WithObserveInterval(5 * time.Millisecond)}
	watcher := client.Election("svc", opts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := watcher.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) redlock.Leader {
		t.Helper()
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed", what)
			}
			return l
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing observed in 5s", what)
		}
		return redlock.Leader{}
	}
	// An election may show as Unknown first: between the acquisition and
	// the publish, nodes hold the new key without its record.
	known := func(what string) redlock.Leader {
		t.Helper()
		l := next(what)
		if l.Unknown {
			l = next(what + ", after Unknown")
		}
		return l
	}
	if l := next("at the start"); !sameLeader(l, redlock.Leader{}) {
		t.Fatalf("first observation %+v, want the zero Leader", l)
	}
	a := mustCampaign(t, c.client(t).Election("svc", opts...), "a")
	if l := known("a elected"); !sameLeader(l, redlock.Leader{Value: "a", Term: a.Term()}) {
		t.Fatalf("observed %+v, want a at term %d", l, a.Term())
	}
	mustResign(t, a)
	if l := next("a resigned"); !sameLeader(l, redlock.Leader{}) {
		t.Fatalf("observed %+v after the resign, want the zero Leader", l)
	}
	b := mustCampaign(t, c.client(t).Election("svc", opts...), "b")
	if l := known("b elected"); !sameLeader(l, redlock.Leader{Value: "b", Term: b.Term()}) || l.Term <= a.Term() {
		t.Fatalf("observed %+v, want b at term %d > %d", l, b.Term(), a.Term())
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("channel not closed 5s after ctx ended")
		}
	}
	mustResign(t, b)
}

// An unread change does not keep Observe's goroutine alive once ctx ends.
func TestElectionObserveStopsWithUnreadChange(t *testing.T) {
	doNoLeaks(t)
	c := newCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := c.client(t).Election("svc", redlock.WithObserveInterval(time.Millisecond)).Observe(ctx); err != nil {
		t.Fatal(err)
	}
	cancel() // never read: doNoLeaks fails the test if the goroutine stays
}

// Campaign with a context that has already ended sends nothing that stays.
func TestElectionCampaignCancelled(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ld, err := client.Election("svc").Campaign(ctx, "a")
	if ld != nil || !errors.Is(err, redlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign(cancelled ctx) = %v, %v", ld, err)
	}
	redlock.Settle(client)
	if n := c.count("svc", ""); n != 3 {
		t.Fatalf("key present on %d nodes after a cancelled Campaign", 3-n)
	}
}

// Run a leader: campaign, work while leading with the term as fencing token,
// resign; meanwhile anyone can ask who leads.
func ExampleElection() {
	pools, stop := exampleNodes(3)
	defer stop()
	// Nodes in this process, on a busy test machine, may need more than
	// the default node timeout (50ms).
	client, err := redlock.New(pools, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	election := client.Election("scheduler", redlock.WithElectionTTL(10*time.Second))
	leadership, err := election.Campaign(ctx, "host-a") // blocks until elected
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leading at term", leadership.Term())

	// Others see who leads, as a majority of nodes reports it.
	leader, err := client.Election("scheduler").Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Value, "term", leader.Term)

	// Work under leadership.Context(), cancelled if the leadership is lost,
	// and send leadership.Term() with each write (package fence).

	if err := leadership.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = client.Election("scheduler").Leader(ctx)
	fmt.Println(errors.Is(err, redlock.ErrNoLeader))
	// Output:
	// leading at term 1
	// leader: host-a term 1
	// true
}

// A Resign that reaches too few nodes may be retried; once one has released
// the lock, another says ErrNotLeader.
func TestElectionResignRetried(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithNodeTimeout(100*time.Millisecond))
	e := client.Election("svc", redlock.WithElectionTTL(time.Minute))
	ld := mustCampaign(t, e, "a")
	ctx := context.Background()
	redlock.Settle(client)
	c.pools[0].set(failing)
	c.pools[1].set(failing)
	err := e.Resign(ctx)
	if err == nil || errors.Is(err, redlock.ErrNotLeader) || len(nodeErrors(err, nil)) != 2 {
		t.Fatalf("Resign with 2 of 3 nodes down = %v; want the two node failures", err)
	}
	if !isClosed(ld.Done()) {
		t.Fatal("Done not closed by a Resign that failed to release")
	}
	redlock.Settle(client)
	if n := c.count("svc", ""); n != 1 {
		t.Fatalf("key released on %d nodes, want 1", n)
	}
	c.pools[0].set(healthy)
	c.pools[1].set(healthy)
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign again with the nodes back = %v", err)
	}
	redlock.Settle(client)
	if n := c.count("svc", ""); n != 3 {
		t.Fatalf("key still on %d nodes after the second Resign", 3-n)
	}
	if err := ld.Resign(ctx); !errors.Is(err, redlock.ErrNotLeader) {
		t.Fatalf("third Resign = %v, want ErrNotLeader", err)
	}
}

// The leader record shares the name's Redis Cluster slot: a name with a
// hash tag keeps it, one without becomes the tag.
func TestElectionRecordKeySlot(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	for name, record := range map[string]string{
		"{jobs}:leader": "redlock:leader:{jobs}:leader",
		"svc":           "redlock:leader:{svc}",
	} {
		// A ttl of 3 s publishes again every second: a straggler node, whose
		// SET went again by EVAL after NOSCRIPT behind the first publish
		// and refused it, has the record by the next one.
		e := client.Election(name, redlock.WithElectionTTL(3*time.Second))
		if e.Name() != name {
			t.Fatalf("Name() = %q, want %q", e.Name(), name)
		}
		ld := mustCampaign(t, e, "v")
		redlock.Settle(client)
		for i, m := range c.nodes {
			if !realEventually(5*time.Second, func() bool { return m.HGet(record, "value") == "v" }) {
				t.Errorf("%s: node %d: record %q holds value %q, want v", name, i, record, m.HGet(record, "value"))
			}
		}
		mustResign(t, ld)
	}
}

// Leader returns when its context ends, with ctx.Err() reachable, even if
// every node hangs for longer.
func TestElectionLeaderContextEnds(t *testing.T) {
	c := newCluster(t, 3)
	e := c.client(t, redlock.WithNodeTimeout(5*time.Second)).Election("svc")
	for _, p := range c.pools {
		p.set(hanging)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var err error
	d := realTimed(func() { _, err = e.Leader(ctx) })
	if !errors.Is(err, redlock.ErrNoLeader) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Leader with hanging nodes = %v; want ErrNoLeader and DeadlineExceeded", err)
	}
	if d > time.Second {
		t.Fatalf("Leader took %v after its 50ms context", d)
	}
	for _, p := range c.pools {
		p.set(healthy)
	}
}

// oddPool answers every command with a reply that no Redis sends for the
// election's scripts.
type oddPool struct {
	id    int // pools that compare equal would be one master counted twice
	reply any
}

func (p *oddPool) Exec(_ context.Context, _ []driver.Command, replies []driver.Reply) error {
	for i := range replies {
		replies[i] = driver.Reply{Value: p.reply}
	}
	return nil
}

// A reply of the wrong shape fails the node: it is neither a leader nor none.
func TestElectionLeaderOddReply(t *testing.T) {
	for _, reply := range []any{int64(7), []any{"x", "v"}, []any{"0", "v"}, []any{int64(1), "v"}, []any{"1"}} {
		pools := []redlock.Pool{&oddPool{0, reply}, &oddPool{1, reply}, &oddPool{2, reply}}
		client, err := redlock.New(pools)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.Election("svc").Leader(context.Background())
		// Two failed nodes of three leave no majority: Leader stops there.
		if !errors.Is(err, redlock.ErrNoLeader) || len(nodeErrors(err, nil)) < 2 || !strings.Contains(err.Error(), "unexpected reply") {
			t.Errorf("Leader with replies %#v = %v; want ErrNoLeader and the nodes failed", reply, err)
		}
	}
}

// A leader that has lost its key never writes the record: its background
// republish must not overwrite the next leader's.
func TestElectionOnlyTheHolderPublishes(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	// The record key has the wrong type on two nodes, so that a's first
	// publish fails and a keeps trying in the background.
	for _, m := range c.nodes[:2] {
		if err := m.Set(electRecordKey, "not a hash"); err != nil {
			t.Fatal(err)
		}
	}
	a := mustCampaign(t, c.client(t).Election("svc", redlock.WithElectionTTL(time.Minute)), "a")
	// a's key vanishes from every node (an operator's DEL, say); a does not
	// know yet: its first extension is 20s away.
	for _, m := range c.nodes {
		m.Del("svc")
		m.Del(electRecordKey)
	}
	bElection := c.client(t).Election("svc", redlock.WithElectionTTL(time.Minute))
	b := mustCampaign(t, bElection, "b")
	want := redlock.Leader{Value: "b", Term: b.Term()}
	// a retries its publish every 1 to 5ms: over 100ms, b must stay visible.
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if got, err := bElection.Leader(ctx); err != nil || !sameLeader(got, want) {
			t.Fatalf("Leader while the deposed a republishes = %+v, %v; want %+v", got, err, want)
		}
	}
	mustResign(t, b)
	if err := a.Resign(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("a's Resign = %v, want ErrLockLost: its key was gone", err)
	}
}

// sameLeader reports whether got says what want says (Value, Term,
// Unknown), whenever it was read.
func sameLeader(got, want redlock.Leader) bool {
	return got.Value == want.Value && got.Term == want.Term && got.Unknown == want.Unknown
}

// Observe's channel closes when the Client is closed while it runs, and at
// once for a ctx that had already ended; a closed Client refuses Observe.
func TestElectionObserveEnds(t *testing.T) {
	doNoLeaks(t)
	c := newCluster(t, 3)
	client := c.client(t)
	drained := func(ch <-chan redlock.Leader, what string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for open := true; open; {
			select {
			case _, open = <-ch:
			case <-deadline:
				t.Fatalf("%s: channel still open after 5s", what)
			}
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ch, err := client.Election("svc").Observe(ended)
	if err != nil {
		t.Fatal(err)
	}
	drained(ch, "ended ctx")

	ch, err = client.Election("svc", redlock.WithObserveInterval(time.Millisecond)).Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l := <-ch; l.Term != 0 || l.Unknown || l.ReadAt.IsZero() {
		t.Fatalf("first value %+v, want no leader with its ReadAt", l)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	drained(ch, "Close")
	if _, err := client.Election("svc").Observe(context.Background()); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Observe after Close = %v, want ErrClosed", err)
	}
}

// A node that holds the leader's key but not yet its record (a re-seeded
// key, a publish still on its way) cannot name the leader, but it does not
// see "no leader" either: it makes the read Unknown. So while a valid leader
// holds its key on a majority, no read decides that no one leads, even when
// another node has restarted empty (issue 21: Observe sent "no leader"
// while the leader led, during restarts one node at a time).
func TestElectionKeyWithoutRecordIsNotNoLeader(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	e := client.Election("svc", redlock.WithElectionTTL(time.Minute)) // no extension or republish for 20s
	ctx := context.Background()
	ld := mustCampaign(t, e, "a")
	redlock.Settle(client) // the key and the record are on every node
	token := c.values("svc")[0]

	c.nodes[2].Del(electRecordKey) // node 2: the key, not the record
	c.nodes[1].FlushAll()          // node 1: restarted empty
	if vals := c.values("svc"); vals[0] != token || vals[2] != token {
		t.Fatalf("the leader's key is on %q; want it on nodes 0 and 2", vals)
	}
	got, err := e.Leader(ctx)
	if !errors.Is(err, redlock.ErrNoLeader) || !got.Unknown || got.Term != 0 {
		t.Fatalf("Leader with the key on 2 of 3 nodes, the record on 1 = %+v, %v; want Unknown and ErrNoLeader, never a decided no leader", got, err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := e.Observe(octx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-ch:
		if !l.Unknown || l.Term != 0 {
			t.Fatalf("Observe sent %+v; want Unknown", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe sent nothing in 5s")
	}

	// Every node that holds the key lacks the record: still Unknown.
	c.nodes[0].Del(electRecordKey)
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) || !got.Unknown {
		t.Fatalf("Leader with the key and no record on a majority = %+v, %v; want Unknown", got, err)
	}
	// Once the record is back where the key is, the leader reads again.
	if err := ld.Proclaim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || !sameLeader(got, redlock.Leader{Value: "a", Term: ld.Term()}) {
		t.Fatalf("Leader once the record is back = %+v, %v; want a at term %d", got, err, ld.Term())
	}
	mustResign(t, ld)
	// No key anywhere: a decided no leader.
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) || got.Unknown || got.Term != 0 {
		t.Fatalf("Leader after the resign = %+v, %v; want no leader, not Unknown", got, err)
	}
}

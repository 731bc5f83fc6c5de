package redlock

// Release announcements in the simulation (wake.go). A node that deletes the
// key in the release script announces it to every subscription open on it;
// each announcement travels like a reply (a delay up to maxDelay, lost with
// the drop rate), is lost besides with noticeLoss and sent twice with
// noticeDup, so waiters see announcements late, never, twice, and out of
// order. A crash closes the node's subscriptions, as a broken connection
// does; the Client opens them again.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quorumlock/redlock/observe"
)

// A simSub is one subscription to a node's release channel.
type simSub struct {
	notices chan string
	gone    chan struct{} // closed when the subscription ends
	once    sync.Once
}

func (s *simSub) end() { s.once.Do(func() { close(s.gone) }) }

// announce sends key's release to the node's subscribers; n.mu is held.
func (n *simNode) announce(key string) {
	w := n.world
	if w == nil {
		return // a node outside any simulated network (the fuzz targets' memPool) has no subscribers
	}
	for _, s := range n.subs {
		copies := 1
		if w.float() < w.cfg.noticeDup {
			copies = 2
		}
		for range copies {
			w.wires.Go(func() {
				if !w.hop() || w.float() < w.cfg.noticeLoss {
					w.tracef("announcement of %s lost", key)
					return
				}
				select {
				case s.notices <- key:
				case <-s.gone:
				}
			})
		}
	}
}

// dropSubs ends every subscription; n.mu is held.
func (n *simNode) dropSubs() {
	for _, s := range n.subs {
		s.end()
	}
	n.subs = nil
}

// Subscribe implements Subscriber over the simulated network. The channel
// name is not checked: the library uses one.
func (p simPool) Subscribe(ctx context.Context, channel string, ready func(), deliver func(string)) error {
	w, n := p.w, p.w.nodes[p.node]
	w.hop() // the SUBSCRIBE's way there; a lost one is resent by TCP
	s := &simSub{notices: make(chan string, 16), gone: make(chan struct{})}
	n.mu.Lock()
	if !n.up {
		n.mu.Unlock()
		return errSimDown
	}
	n.subs = append(n.subs, s)
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		for i, x := range n.subs {
			if x == s {
				n.subs = append(n.subs[:i], n.subs[i+1:]...)
				break
			}
		}
		n.mu.Unlock()
		s.end()
	}()
	w.hop() // the confirmation's way back
	ready()
	for {
		select {
		case key := <-s.notices:
			deliver(key)
		case <-s.gone:
			return errSimDown
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// simWakes is an observe.Observer that counts woken attempts.
type simWakes struct{ attempts, won atomic.Int64 }

func (o *simWakes) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.KindAttempt && e.Woken:
		o.attempts.Add(1)
	case e.Kind == observe.KindAcquired && e.Woken:
		o.won.Add(1)
	}
}

// An announcement is a hint: a variant that counts the nodes that announced
// a release as votes for the woken attempt, even where its SET was refused,
// must break mutual exclusion, and the checker must say so. Waiters woken by
// the same release each count the same nodes.
func TestSimulationCatchesNoticeVotes(t *testing.T) {
	base, n := simSchedules(t, simDefaultSchedules)
	var (
		mu      sync.Mutex
		found   int
		example string
	)
	forSchedulesWith(t, base, n, false, func(cfg *simConfig) {
		cfg.noticeVotes = true
		cfg.clients = max(cfg.clients, 2) // waiters in more than one Client
	}, func(t *testing.T, cfg simConfig, run simRun) {
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
	t.Logf("%d of %d schedules with announcements counted as votes violated a property; e.g. %s", found, n, example)
	if found == 0 {
		t.Fatalf("no violation in %d schedules with announcements counted as votes: the checker cannot see the unsafe variant", n)
	}
}

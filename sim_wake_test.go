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
	"sync"
	"sync/atomic"

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
			if w.cfg.unsafe.noticeVotes {
				p.proc.announced[p.node].Store(true)
			}
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

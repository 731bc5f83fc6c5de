package redlock

// Release announcements in the simulation (wake.go). A node that deletes the
// key in the release script announces it on the key's channel to every
// subscription that has the channel at the node; each announcement travels
// like a reply (a delay up to maxDelay, lost with the drop rate), is lost
// besides with noticeLoss and sent twice with noticeDup, so waiters see
// announcements late, never, twice, and out of order. A subscription's
// changes and their confirmations travel as messages do, so a release
// before a key's subscription reached the node is announced to no one. A
// crash closes the node's subscriptions, as a broken connection does; the
// Client opens them again.

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/observe"
)

// A simSub is one subscription connection to a node. Its channels are
// those the node has run a SUBSCRIBE for and no UNSUBSCRIBE since, as the
// node sees them: a change reaches the node one hop after the Client made
// it, and its confirmation the Client one hop later, so a release in
// between is announced to the channels the node had then.
type simSub struct {
	channels map[string]bool // n.mu guards it
	notices  chan [2]string  // channel and message
	gone     chan struct{}   // closed when the subscription ends
	once     sync.Once
}

func (s *simSub) end() { s.once.Do(func() { close(s.gone) }) }

// announce sends key's release to the node's subscribers of the key's
// channel, prefix+key; n.mu is held.
func (n *simNode) announce(prefix, key string) {
	w := n.world
	if w == nil {
		return // a node outside any simulated network (the fuzz targets' memPool) has no subscribers
	}
	channel := prefix + key
	for _, s := range n.subs {
		if !s.channels[channel] {
			continue
		}
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
				case s.notices <- [2]string{channel, key}:
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

var _ driver.Subscriber = simPool{}

// Subscribe implements Subscriber over the simulated network. One
// goroutine carries the changes of sub's channels to the node, one after
// another as one connection would; the loop below reports their
// confirmations and the announcements.
func (p simPool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	w, n := p.w, p.w.nodes[p.node]
	have := make(map[string]bool)
	add, _ := sub.Diff(have)
	w.hop() // the SUBSCRIBE's way there; a lost one is resent by TCP
	s := &simSub{channels: make(map[string]bool), notices: make(chan [2]string, 16), gone: make(chan struct{})}
	n.mu.Lock()
	if !n.up {
		n.mu.Unlock()
		return errSimDown
	}
	for _, ch := range add {
		s.channels[ch] = true
	}
	n.subs = append(n.subs, s)
	n.mu.Unlock()
	done := make(chan struct{})
	var writer sync.WaitGroup
	defer func() {
		close(done)
		writer.Wait()
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
	confirmed := make(chan []string)
	writer.Go(func() {
		for {
			select {
			case <-sub.Changed:
			case <-done:
				return
			}
			add, drop := sub.Diff(have)
			if len(add)+len(drop) == 0 {
				continue
			}
			w.hop() // the change's way there
			n.mu.Lock()
			for _, ch := range add {
				s.channels[ch] = true
			}
			for _, ch := range drop {
				delete(s.channels, ch)
			}
			n.mu.Unlock()
			w.hop() // the confirmations' way back
			select {
			case confirmed <- add:
			case <-done:
				return
			}
		}
	})
	w.hop() // the confirmation's way back
	for _, ch := range add {
		sub.Ready(ch)
	}
	for {
		select {
		case m := <-s.notices:
			if w.cfg.unsafe.noticeVotes {
				p.proc.announced[p.node].Store(true)
			}
			sub.Deliver(m[0], m[1])
		case add := <-confirmed:
			for _, ch := range add {
				sub.Ready(ch)
			}
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

package redlockotel

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/observe"
	"go.opentelemetry.io/otel/metric"
)

// The table of held locks behind the redlock.lock.held and
// redlock.lock.degraded gauges.
//
// Which locks this process holds, and on how many nodes, cannot be known
// exactly from events alone:
//   - Extend and Unlock events carry their own call's ID, not the ID of the
//     Lock call that acquired the lock, so they find their lock by key only;
//   - no event reports a lock that simply runs out (no Unlock), nor its ttl;
//   - Margin is reported as it stood when Lock or Extend returned, counting
//     nodes still in flight as holders; EventSettled gives the final count
//     once every node has answered, and the entry takes it then. A margin
//     that falls later still (a node that fails after its answer) has no
//     event.
//
// So the table is keyed by the lock's key, which names one lock at a time
// since only one can be valid on a key. An entry is
//   - made by EventAcquired, replacing any entry for the key: a lock newly
//     granted on a key proves that the earlier one has ended;
//   - updated by EventExtended, or made if it is missing;
//   - updated by EventSettled, which gives the final margin of the latest
//     acquisition or extension (an acquisition's must be the entry's own);
//   - removed by EventReleased or EventReleaseFailed (a lock counts as
//     released from the moment Unlock begins, whatever the nodes answer),
//     and by EventExtendFailed with ErrExpired (validity had passed) or
//     ErrLockLost (the nodes proved the key gone), if the
//     entry was made before that call began: the late report of an old
//     lock's Unlock must not remove a newer lock on the same key;
//   - removed by EventLost of the call that acquired it;
//   - removed once MaxTTL has passed since its latest acquisition or
//     extension: the lock's validity has certainly ended then.
//
// The held gauge is the number of entries; the degraded gauge is the number
// whose latest acquisition or extension reported Margin <= 0 with Quorum > 1
// (the condition of observe.Slog's warning: one more node failure
// loses the lock; with two nodes, that is every lock). Both are counted
// from the table each time they are collected, rather than kept by
// increments and decrements that could drift apart: a lock is counted at
// most once, and never after MaxTTL past its last report.
type heldLock struct {
	id       uint64    // the acquiring call's ID; 0 if first seen at an Extend
	degraded bool      // its latest acquisition or extension stood on a bare majority
	since    time.Time // when the entry was made
	seen     time.Time // its latest acquisition or extension
}

// bareMajority reports whether an acquisition or extension left the lock one
// node failure from loss.
func bareMajority(e observe.Event) bool { return e.Quorum > 1 && e.Margin <= 0 }

func (o *Observer) acquiredLocked(e observe.Event, now time.Time) {
	if o.closed {
		return
	}
	o.held[e.Key] = heldLock{id: e.ID, degraded: bareMajority(e), since: now, seen: now}
}

func (o *Observer) extendedLocked(e observe.Event, now time.Time) {
	if o.closed {
		return
	}
	h, ok := o.held[e.Key]
	if !ok {
		h = heldLock{since: now}
	}
	h.degraded, h.seen = bareMajority(e), now
	o.held[e.Key] = h
}

// endedLocked removes the lock on key if it was known before began, when the
// call that ended it started.
// settledLocked takes the final margin of a won acquisition or extension.
func (o *Observer) settledLocked(e observe.Event) {
	h, ok := o.held[e.Key]
	if !ok || (e.Op == observe.OpAcquire && h.id != e.ID) {
		return
	}
	h.degraded = bareMajority(e)
	o.held[e.Key] = h
}

func (o *Observer) endedLocked(key string, began time.Time) {
	if h, ok := o.held[key]; ok && h.since.Before(began) {
		delete(o.held, key)
	}
}

func (o *Observer) lostLocked(e observe.Event) {
	if h, ok := o.held[e.Key]; ok && (h.id == e.ID || h.id == 0) {
		delete(o.held, e.Key)
	}
}

func (o *Observer) sweepHeldLocked(now time.Time) {
	for key, h := range o.held {
		if now.Sub(h.seen) > o.maxTTL {
			delete(o.held, key)
		}
	}
}

// gauges returns the values of the held and degraded gauges now.
func (o *Observer) gauges() (held, degraded int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sweepHeldLocked(o.now())
	for _, h := range o.held {
		if h.degraded {
			degraded++
		}
	}
	return len(o.held), degraded
}

func (o *Observer) observeGauges(_ context.Context, obs metric.Observer) error {
	held, degraded := o.gauges()
	obs.ObserveInt64(o.inst.held, int64(held))
	obs.ObserveInt64(o.inst.degraded, int64(degraded))
	return nil
}

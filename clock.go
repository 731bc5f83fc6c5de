package redlock

import "time"

// Redlock's timing rules.
//
// A lock is granted only for as long as the client can prove, on its own clock,
// that a majority of nodes still hold its key. The proof rests on three numbers:
//
//   - start: read from the monotonic clock before the first SET is sent
//     (step 1). Every node that accepts sets its key at or after start, so each
//     key lives until at least start+ttl, measured by that node's clock.
//
//   - drift: how far the nodes' clocks may run ahead of ours over one ttl
//     (step 3). Redis expires keys by its own clock, so a fast node can drop a
//     key early. The bound is driftFactor×ttl plus a fixed 2 ms for the
//     millisecond resolution of PX and process scheduling. The default factor,
//     0.01, tolerates a node clock 1% faster than ours.
//
//   - until: start + ttl − drift. Before until, every key we counted still
//     exists; at until the client must assume it no longer holds the lock.
//
// The validity of an acquisition is until − now, which is the familiar
// ttl − elapsed − drift with elapsed = now − start. An acquisition that reaches a
// majority only after until has validity ≤ 0 and fails (step 3).
//
// Elapsed time must come from a monotonic clock: a wall clock stepped by NTP
// while a lock is held would stretch or shrink validity silently. time.Now
// carries a monotonic reading and Time.Sub, Before and After use it, so the
// default clock is safe; an injected Clock should behave the same way.

// defaultDriftFactor is the fraction of the ttl reserved for clock drift
// between this client and the Redis nodes.
const defaultDriftFactor = 0.01

// driftFloor is the fixed part of the drift allowance: the millisecond
// resolution of PX plus scheduling delay.
const driftFloor = 2 * time.Millisecond

// A timeSource tells the time. Redlock reads it before sending the first command of
// an acquisition or extension and again when a majority has answered.
//
// The default uses time.Now, whose readings carry the monotonic clock. Tests
// inject a Clock to check the validity arithmetic without sleeping.
type timeSource interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// drift returns the clock-drift allowance for a ttl: ttl×factor + 2 ms.
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// validUntil returns the end of the validity window of keys set with ttl at or
// after start: start + ttl − drift.
func validUntil(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(ttl - drift(ttl, factor))
}

// truncateTTL drops sub-millisecond precision, which Redis cannot express.
// Rounding down keeps the computed validity within the key's real lifetime.
func truncateTTL(ttl time.Duration) time.Duration {
	return ttl.Truncate(time.Millisecond)
}

package redlock_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// A chaosChecker judges a run of lock cycles against the library's claim:
// while Lock.Until has not passed, no other client holds the same key. It
// trusts nothing but Until and the process's monotonic clock, and it checks
// the claim three ways:
//
//   - an occupancy counter: a holder entering its critical section while
//     another holder is inside with validity left is a violation;
//   - validity intervals: after the run, no two [granted, end) intervals may
//     overlap, end being the earlier of Until and the start of the release;
//   - a guarded resource with fencing: each holder's fence is its lock's
//     fencing token (WithFencing), or else a number the checker hands out at
//     entry in grant order; the resource rejects a write whose fence is
//     older than the newest it has accepted. A rejected write from a holder
//     whose validity had not passed is a violation, and so is a fencing
//     token that does not exceed the one granted before it.
//
// A holder whose validity passed while it was inside (a stall of the test
// process longer than the ttl) is counted as an overrun, not a violation:
// Redlock promises nothing past Until, and doc.go says so.
//
// It is safe for concurrent use.
type chaosChecker struct {
	mu         sync.Mutex
	inside     map[*chaosHold]bool
	maxInside  int
	nextFence  int64
	lastToken  uint64 // the fencing token granted last, with WithFencing
	written    int64  // newest fence the resource accepted
	writes     int
	rejected   int
	overruns   int
	intervals  []chaosInterval
	violations []string
}

// chaosHeld is what the checker reads of a held lock: a *redlock.Lock, or
// any primitive that holds one (a leadership, whose term is its token).
type chaosHeld interface {
	Until() time.Time
	Token() uint64
}

// A chaosHold is one granted lock inside its critical section.
type chaosHold struct {
	worker  int
	lock    chaosHeld
	granted time.Time
	fence   int64
}

type chaosInterval struct {
	worker     int
	start, end time.Time
}

func newChaosChecker() *chaosChecker {
	return &chaosChecker{inside: map[*chaosHold]bool{}}
}

// enter records that worker holds l from now on. Call it right after Lock
// returns.
func (c *chaosChecker) enter(worker int, l chaosHeld) *chaosHold {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for other := range c.inside {
		if now.Before(other.lock.Until()) {
			c.violatef("occupancy: worker %d entered at %s while worker %d held the lock, valid for %v more",
				worker, stamp(now), other.worker, other.lock.Until().Sub(now))
		}
		// Otherwise other overran its validity; exit counts it.
	}
	c.nextFence++
	fence := c.nextFence
	if tok := l.Token(); tok != 0 {
		if tok <= c.lastToken {
			c.violatef("token order: worker %d got fencing token %d after token %d was granted",
				worker, tok, c.lastToken)
		}
		c.lastToken = tok
		fence = int64(tok)
	}
	h := &chaosHold{worker: worker, lock: l, granted: now, fence: fence}
	c.inside[h] = true
	c.maxInside = max(c.maxInside, len(c.inside))
	return h
}

// write is one write to the guarded resource by h's holder.
func (c *chaosChecker) write(h *chaosHold) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	if h.fence < c.written {
		c.rejected++
		if now.Before(h.lock.Until()) {
			c.violatef("fencing: stale write by worker %d (fence %d < %d) with its lock valid for %v more",
				h.worker, h.fence, c.written, h.lock.Until().Sub(now))
		}
		return
	}
	c.written = h.fence
}

// exit records that h's holder left its critical section. Call it before
// Unlock.
func (c *chaosChecker) exit(h *chaosHold) {
	now := time.Now()
	until := h.lock.Until()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inside, h)
	end := now
	if until.Before(end) {
		end = until
		c.overruns++
	}
	c.intervals = append(c.intervals, chaosInterval{worker: h.worker, start: h.granted, end: end})
}

// finish runs the post-hoc interval check and returns every violation found.
func (c *chaosChecker) finish() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	iv := append([]chaosInterval(nil), c.intervals...)
	sort.Slice(iv, func(i, j int) bool { return iv[i].start.Before(iv[j].start) })
	// Sorted by start, the intervals are disjoint iff each starts no earlier
	// than the latest end before it.
	for i, latest := 1, 0; i < len(iv); i++ {
		if prev := iv[latest]; iv[i].start.Before(prev.end) {
			c.violatef("intervals: worker %d's [%s, %s) overlaps worker %d's [%s, %s) by %v",
				iv[i].worker, stamp(iv[i].start), stamp(iv[i].end),
				prev.worker, stamp(prev.start), stamp(prev.end), prev.end.Sub(iv[i].start))
		}
		if iv[i].end.After(iv[latest].end) {
			latest = i
		}
	}
	return append([]string(nil), c.violations...)
}

func (c *chaosChecker) violatef(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// summary describes what the checker saw.
func (c *chaosChecker) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d intervals, %d writes (%d rejected), max occupancy %d, %d overruns, %d violations",
		len(c.intervals), c.writes, c.rejected, c.maxInside, c.overruns, len(c.violations))
}

// report formats violations for a failure message, at most ten.
func chaosReport(v []string) string {
	if len(v) > 10 {
		v = append(v[:10:10], fmt.Sprintf("... and %d more", len(v)-10))
	}
	return strings.Join(v, "\n")
}

var chaosEpoch = time.Now()

// stamp prints t as an offset from the start of the test binary, readable
// and monotonic.
func stamp(t time.Time) string { return t.Sub(chaosEpoch).Round(time.Microsecond).String() }

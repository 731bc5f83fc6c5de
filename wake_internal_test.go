package redlock

import (
	"testing"
	"time"
)

func woke(wt *waiter) bool {
	select {
	case <-wt.wake:
		return true
	default:
		return false
	}
}

// A waiter wakes once announcements, with the nodes its own attempt held,
// make a majority possible, and only for an announcement from a node it did
// not hold: its own undo announces on those.
func TestWaiterWakesOnAMajority(t *testing.T) {
	wt := &waiter{keys: []string{"k"}, need: 3, wake: make(chan struct{}, 1)}
	wt.arm()
	wt.notify(0) // the attempt is still running: nothing is known yet
	if woke(wt) {
		t.Fatal("woken before the attempt ended")
	}
	// It held nodes 0 to 2 and let them go (a majority that answered after
	// its validity ended, say).
	wt.settle(0b00111)
	if woke(wt) {
		t.Fatal("woken by its own undo")
	}
	wt.notify(1)
	if woke(wt) {
		t.Fatal("woken by its own undo")
	}
	wt.notify(3)
	if !woke(wt) {
		t.Fatal("not woken with nodes 0 to 2 (its own) and 3 (announced) free")
	}

	wt.arm()
	wt.settle(0)
	wt.notify(2)
	wt.notify(2) // a duplicate counts once
	wt.notify(4)
	if woke(wt) {
		t.Fatal("woken with 2 of 3 needed nodes free")
	}
	wt.notify(0)
	if !woke(wt) {
		t.Fatal("not woken with three nodes announced")
	}

	wt.notify(1) // a pending wake-up...
	wt.arm()     // ...belongs to the attempt before
	if woke(wt) {
		t.Fatal("a wake-up from before the attempt survived arm")
	}
}

func TestStaggerDoublesOnSplitsAndNarrowsWithTheWait(t *testing.T) {
	rtt := 100 * time.Microsecond
	for splits, want := range []time.Duration{rtt, 2 * rtt, 4 * rtt} {
		if got := staggerFor(rtt, 0, splits); got != want {
			t.Errorf("staggerFor(%v, 0, %d) = %v, want %v", rtt, splits, got, want)
		}
	}
	if got, want := staggerFor(rtt, 0, 100), rtt<<maxSplitShift; got != want {
		t.Errorf("staggerFor(%v, 0, 100) = %v, want the cap %v", rtt, got, want)
	}
	// Who has waited 16 rtt draws from half the window; 144 rtt, a tenth.
	if got, want := staggerFor(rtt, ageScale*rtt, 0), rtt/2; got != want {
		t.Errorf("staggerFor(%v, 16rtt, 0) = %v, want %v", rtt, got, want)
	}
	if got, want := staggerFor(rtt, 9*ageScale*rtt, 1), 2*rtt/10; got != want {
		t.Errorf("staggerFor(%v, 144rtt, 1) = %v, want %v", rtt, got, want)
	}
	if got := staggerFor(0, time.Second, 3); got != 0 {
		t.Errorf("staggerFor(0, 1s, 3) = %v, want 0", got)
	}
	if got := staggerFor(time.Hour, time.Hour, 60); got <= 0 {
		t.Errorf("staggerFor(1h, 1h, 60) = %v: overflowed", got)
	}
}

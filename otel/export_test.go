package redlockotel

import "time"

// SetNow replaces the Observer's clock. Call it while no event is being
// observed.
func SetNow(o *Observer, now func() time.Time) { o.now = now }

// CallStates returns how many calls the Observer keeps state for.
func CallStates(o *Observer) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.calls)
}

// HeldStates returns how many locks the Observer counts as held.
func HeldStates(o *Observer) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.held)
}

// Sweep runs the sweep now, whenever the last one ran.
func Sweep(o *Observer) {
	o.mu.Lock()
	o.lastSweep = time.Time{}
	abandoned := o.sweepLocked(o.now())
	o.mu.Unlock()
	endAll(abandoned)
}

const (
	StragglerWindow = stragglerWindow
	MaxCallAge      = maxCallAge
	MaxBufferedAge  = maxBufferedAge
)

var (
	CallClass    = callClass
	ReleaseClass = releaseClass
	LossClass    = lossClass
)

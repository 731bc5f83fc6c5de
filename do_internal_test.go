package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// scriptedLease is a lease whose extensions fail with the given errors, one
// per Extend, and whose validity runs out after the last of them.
type scriptedLease struct {
	until time.Time
	errs  []error
	done  chan struct{}
	once  sync.Once
	calls int
}

func (l *scriptedLease) Until() time.Time      { return l.until }
func (l *scriptedLease) Done() <-chan struct{} { return l.done }
func (l *scriptedLease) Extend(context.Context, time.Duration) error {
	if l.calls >= len(l.errs) { // keep's timer and Done were both ready
		return ErrExpired
	}
	err := l.errs[l.calls]
	if l.calls++; l.calls == len(l.errs) {
		l.once.Do(func() { close(l.done) })
	}
	return err
}

// When validity runs out, keep gives fn the failure that explains why the
// extensions failed: a later retry that validity's deadline ended before
// any node answered, or one begun after validity ran out, does not replace
// one that names the nodes' errors (a last retry with no answers made
// TestDoQuorumLostCancelsWithinValidity fail once in CI).
func TestKeepKeepsTheExplainingFailure(t *testing.T) {
	c, err := New([]Pool{&memPool{newSimNode(1)}}, WithRetryDelay(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	down := &NodeError{Node: 1, Err: errors.New("test: connection refused")}
	withNodes := aggregate(fmt.Errorf("%w: 0 agreed, 2 refused, 1 failed of 3 nodes; 2 needed", ErrNotObtained), []error{down})
	noAnswer := aggregate(fmt.Errorf("%w: 0 agreed, 0 refused, 0 failed of 3 nodes; 2 needed", ErrNotObtained), []error{context.DeadlineExceeded})
	for _, tc := range []struct {
		name string
		errs []error
		want error // the error whose text the cause must hold
	}{
		{"then no answer", []error{withNodes, noAnswer}, withNodes},
		{"then expired", []error{withNodes, ErrExpired}, withNodes},
		{"no answer then nodes", []error{noAnswer, withNodes}, withNodes},
		{"only no answer", []error{noAnswer, ErrExpired}, noAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &scriptedLease{until: time.Now().Add(time.Hour), errs: tc.errs, done: make(chan struct{})}
			var cause error
			lost := c.keep(l, 3*time.Millisecond, make(chan struct{}), func(err error) { cause = err })
			if !lost.expired || !errors.Is(lost.err, ErrLockLost) {
				t.Fatalf("keep = %+v, want an expiry wrapping ErrLockLost", lost)
			}
			if cause != lost.err {
				t.Errorf("fn's cause %v, keep's %v", cause, lost.err)
			}
			if !errors.Is(lost.err, tc.want) {
				t.Errorf("cause = %v, want it to wrap %v", lost.err, tc.want)
			}
		})
	}
}

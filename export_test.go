package redlock

import (
	"sync/atomic"
	"time"
)

// Settle waits until no node call of c is running, including those that
// returned calls left in the background. Tests use it before they inspect
// every node.
func Settle(c *Client) { c.calls.wait(-1) }

// HoldNodeStart makes each round's goroutine for node of client wait until
// release is closed, as if the scheduler had not run it yet. It returns a
// function that removes the hook.
func HoldNodeStart(client *Client, node int, release <-chan struct{}) (undo func()) {
	hook := func(c *Client, n int) {
		if c == client && n == node {
			<-release
		}
	}
	testHookNodeStart.Store(&hook)
	return func() { testHookNodeStart.Store(nil) }
}

// WakeLive returns the nodes on which c's release subscription is open and
// confirmed (wake.go), as a bit mask.
func WakeLive(c *Client) uint64 {
	if c.wake == nil {
		return 0
	}
	return c.wake.live.Load()
}

// WakeHeard returns the nodes on which c's subscription to the channel of
// key (a key given to the API) is confirmed (wake.go), as a bit mask.
func WakeHeard(c *Client, key string) uint64 {
	if c.wake == nil {
		return 0
	}
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	return c.wake.heard[c.keyPrefix+key]
}

// Waiting returns how many of c's calls wait for a release of key, a mutex
// or semaphore key given to the API (the Client's prefix is added).
func Waiting(c *Client, key string) int {
	if c.wake == nil {
		return 0
	}
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	return len(c.wake.waiting[c.keyPrefix+key])
}

// HoldReseed makes each node's re-seed of l (Lock.reseed) call entered and
// then wait until release is closed, before it sends. It returns a function
// that removes the hook.
func HoldReseed(l *Lock, entered chan<- int, release <-chan struct{}) (undo func()) {
	hook := func(x *Lock, node int) {
		if x == l {
			entered <- node
			<-release
		}
	}
	testHookReseed.Store(&hook)
	return func() { testHookReseed.Store(nil) }
}

// Waiters returns how many of c's calls, of every primitive, wait for a
// release announcement.
func Waiters(c *Client) int {
	if c.wake == nil {
		return 0
	}
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	return c.wake.count
}

// ReleaseChannel is where the release of key (a node key) is announced
// by a Client without a key prefix (wake.go).
func ReleaseChannel(key string) string { return releaseChannelPrefix + key }

// Clock and WithClock inject a clock, so that tests check the validity
// arithmetic without sleeping.
type Clock = timeSource

var WithClock = withClock

// FenceKey names the fencing counter of key under the default prefix.
func FenceKey(key string) string { return fenceKey(key) }

// ErrorClass is the class events carry (observer.go).
var ErrorClass = errorClass

// SlowNode makes each round's goroutine for node of client signal started
// (if it can without blocking) and then wait d before it sends: a node that
// answers d late. It returns a function that removes the hook.
func SlowNode(client *Client, node int, d time.Duration, started chan<- struct{}) (undo func()) {
	hook := func(c *Client, n int) {
		if c == client && n == node {
			select {
			case started <- struct{}{}:
			default:
			}
			time.Sleep(d)
		}
	}
	testHookNodeStart.Store(&hook)
	return func() { testHookNodeStart.Store(nil) }
}

// LeadershipLock returns the lock behind a leadership.
func LeadershipLock(ld *Leadership) *Lock { return ld.lock }

// SlowNodes makes each round's goroutine for the nodes in mask, of client,
// wait d before it sends. It returns a function that removes the hook.
func SlowNodes(client *Client, mask uint64, d time.Duration) (undo func()) {
	hook := func(c *Client, n int) {
		if c == client && mask&(1<<n) != 0 {
			time.Sleep(d)
		}
	}
	testHookNodeStart.Store(&hook)
	return func() { testHookNodeStart.Store(nil) }
}

// HoldNodeStarts makes each round's goroutine for the nodes in mask, of
// client, after the first skip such goroutines, send its node's index on
// entered and then wait until release is closed. It returns a function
// that removes the hook.
func HoldNodeStarts(client *Client, mask uint64, skip int, entered chan<- int, release <-chan struct{}) (undo func()) {
	var started atomic.Int64
	hook := func(c *Client, n int) {
		if c == client && mask&(1<<n) != 0 && started.Add(1) > int64(skip) {
			entered <- n
			<-release
		}
	}
	testHookNodeStart.Store(&hook)
	return func() { testHookNodeStart.Store(nil) }
}

// AfterAttempts makes each acquisition attempt of client, once it has
// returned, call f before the acquisition looks at its outcome. It returns
// a function that removes the hook.
func AfterAttempts(client *Client, f func()) (undo func()) {
	return setClientHook(&testHookAttempted, client, f)
}

// AtHandOff makes Do and Campaign on client call f once their acquisition
// has returned the lock, before they register it with Close. It returns a
// function that removes the hook.
func AtHandOff(client *Client, f func()) (undo func()) {
	return setClientHook(&testHookHandOff, client, f)
}

// setClientHook sets hook to call f for client's calls only, and returns
// the function that removes it.
func setClientHook(hook *atomic.Pointer[func(c *Client)], client *Client, f func()) (undo func()) {
	h := func(c *Client) {
		if c == client {
			f()
		}
	}
	hook.Store(&h)
	return func() { hook.Store(nil) }
}

// Calls is how many calls Close would wait for on c now.
func Calls(c *Client) int64 { return c.calls.n.Load() }

// Closing reports whether Close has been called on c.
func Closing(c *Client) bool { return c.closed.Load() }

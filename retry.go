package redlock

import (
	"errors"
	"math/bits"
	mathrand "math/rand/v2"
	"time"
)

// A RetryStrategy decides how long Lock pauses after a failed attempt: it
// returns the pause after attempt try (1 for the first), and a negative
// value means: give up now. Lock also stops after WithTries attempts or when
// its context ends, whichever comes first. A RetryStrategy must be safe for
// concurrent use. ConstantRetry and ExponentialRetry make the common ones;
// any function of this shape will do.
type RetryStrategy func(try int) time.Duration

// ConstantRetry pauses d after every attempt.
func ConstantRetry(d time.Duration) RetryStrategy {
	return func(int) time.Duration { return d }
}

// ExponentialRetry pauses a random time drawn uniformly from [0, ceiling],
// where the ceiling starts at base and doubles after each attempt, up to
// max ("full jitter"): clients that collided spread out fast, and none
// waits longer than max.
func ExponentialRetry(base, max time.Duration) RetryStrategy {
	return func(try int) time.Duration {
		ceiling := max
		if try >= 1 && try < 63 && base > 0 && base <= max>>(try-1) {
			ceiling = base << (try - 1)
		}
		if ceiling <= 0 {
			return 0
		}
		return mathrand.N(ceiling + 1)
	}
}

// retryPolicy is how the Client asks a strategy for a pause.
type retryPolicy interface {
	Delay(try int) time.Duration
}

// strategy is a RetryStrategy as a retryPolicy.
type strategy RetryStrategy

func (s strategy) Delay(try int) time.Duration { return s(try) }

// jitterRetry is WithRetryDelay's strategy, the default: a pause drawn
// uniformly from [min, max], so that clients that collided do not collide
// again.
type jitterRetry struct{ min, max time.Duration }

func (j jitterRetry) Delay(int) time.Duration { return j.min + mathrand.N(j.max-j.min+1) }

// WithRetryStrategy sets how long Lock pauses between attempts. The default
// is WithRetryDelay's uniform jitter in [50ms, 250ms]. The last of
// WithRetryStrategy and WithRetryDelay wins. A nil strategy is rejected.
//
// Whatever the strategy, Lock does not retry an attempt that failed for a
// reason that is not contention (see Client.Lock); TryLock makes one
// attempt.
func WithRetryStrategy(s RetryStrategy) Option {
	return func(c *Client) {
		c.retrySet = true
		c.retry = nil
		if s != nil {
			c.retry = strategy(s)
		}
	}
}

// permanent reports whether a node's failure will repeat on the next
// attempt, whatever other clients do: the node refuses the command itself
// (an ACL without the permission, a wrong password, a replica, no memory for
// writes, a key of another type, keys in different Cluster slots).
func permanent(err error) bool {
	switch replyCode(err) {
	case "NOPERM", "NOAUTH", "WRONGPASS", "READONLY", "OOM", "WRONGTYPE", "CROSSSLOT":
		return true
	}
	return false
}

// hopeless reports whether err, a lost attempt's error, has so many nodes
// failing permanently that no quorum of need can agree on any later
// attempt: more than N − need of them. It returns the number of such nodes.
func (c *Client) hopeless(err error, need int) (bool, int) {
	seen := uint64(0)
	for _, cause := range causesOf(err) {
		var ne *NodeError
		if errors.As(cause, &ne) && permanent(ne.Err) {
			seen |= 1 << ne.Node
		}
	}
	n := bits.OnesCount64(seen)
	return n > len(c.nodes)-need, n
}

// causesOf returns the errors an aggregate holds, or err alone.
func causesOf(err error) []error {
	if e, ok := err.(*opError); ok {
		return e.causes
	}
	return []error{err}
}

package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/gomodule/redigo/redis"
)

// ErrStaleToken reports a write whose fencing token is lower than one the
// resource has already accepted: its lock has since passed to another holder.
var ErrStaleToken = errors.New("redlock: stale fencing token")

// A Guard is the resource side of fencing for state kept in this process: it
// admits writes in fencing-token order and rejects any token lower than the
// highest it has admitted. Equal tokens pass, so one holder may write many
// times. The zero value admits any first token. A Guard is safe for
// concurrent use.
type Guard struct {
	mu      sync.Mutex
	highest uint64
}

// Do admits token if it is at least the highest token admitted so far:
// it records token as the highest, then runs write and returns its error.
// The check, the record and the write run under the Guard's lock, so no stale
// write can slip in between. The token stays recorded even if write fails:
// the lock that issued it was granted after every lock with a lower token,
// so their holders are stale whether or not this write took effect. It
// returns ErrStaleToken, without running write, for a stale token, and an
// error wrapping ErrInvalid for token 0 (a lock made without WithFencing).
func (g *Guard) Do(token uint64, write func() error) error {
	if token == 0 {
		return invalid("fencing token 0: the lock was made without WithFencing")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest {
		return fmt.Errorf("%w: %d, the resource has seen %d", ErrStaleToken, token, g.highest)
	}
	g.highest = token
	if write == nil {
		return nil
	}
	return write()
}

// Highest returns the highest token admitted so far.
func (g *Guard) Highest() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}

//go:embed scripts/fenced_set.lua
var fencedSetSource string
var fencedSetScript = redis.NewScript(2, fencedSetSource)

// FencedSet is the resource side of fencing for data kept in Redis: it sets
// key to value on conn only if token is at least the highest token accepted
// for key so far, which it keeps in key's companion "<key>:fence". It returns
// ErrStaleToken for a stale token. The data node need not be a lock node.
func FencedSet(ctx context.Context, conn redis.Conn, key string, token uint64, value string) error {
	if token == 0 {
		return invalid("fencing token 0: the lock was made without WithFencing")
	}
	stored, err := redis.Int(fencedSetScript.DoContext(ctx, conn, key, key+":fence", token, value))
	if err != nil {
		return fmt.Errorf("redlock: fenced set of %q: %w", key, err)
	}
	if stored == 0 {
		return fmt.Errorf("%w: %d for %q", ErrStaleToken, token, key)
	}
	return nil
}

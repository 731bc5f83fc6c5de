// Package fence is the resource side of fencing: what the store a lock
// protects does with the fencing tokens of a redlock Client made WithFencing.
//
// A lock cannot stop a holder that paused past its validity (a GC pause, a
// stalled VM) from writing after its lock has passed to another holder. The
// resource can: every holder sends its lock's Token with each write, and the
// resource refuses a token lower than one it has already accepted. Guard
// does this for state kept in the process; Set does it for data kept in
// Redis, through any client's Pool (redigo, go-redis, rueidis, valkey-go).
// See docs/fencing.md.
package fence

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// ErrStale reports a write whose fencing token is lower than one the
// resource has already accepted: its lock has since passed to another holder.
var ErrStale = errors.New("redlock: stale fencing token")

var errNilGuard = fmt.Errorf("%w: nil *Guard: declare a Guard (its zero value is ready)", redlock.ErrInvalid)

var errTokenZero = fmt.Errorf("%w: fencing token 0: the lock was made without WithFencing", redlock.ErrInvalid)

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
// returns ErrStale, without running write, for a stale token, and an
// error wrapping redlock.ErrInvalid for token 0 (a lock made without
// WithFencing) or a nil Guard.
func (g *Guard) Do(token uint64, write func() error) error {
	switch {
	case g == nil:
		return errNilGuard
	case token == 0:
		return errTokenZero
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest {
		return fmt.Errorf("%w: %d, the resource has seen %d", ErrStale, token, g.highest)
	}
	g.highest = token
	if write == nil {
		return nil
	}
	return write()
}

// Highest returns the highest token admitted so far (0 for a nil Guard).
func (g *Guard) Highest() uint64 {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}

//go:embed set.lua
var setSource string

var setHash = func() string { h := sha1.Sum([]byte(setSource)); return hex.EncodeToString(h[:]) }()

// defaultTimeout bounds a Set whose ctx has no deadline.
const defaultTimeout = 5 * time.Second

// Set is the resource side of fencing for data kept in Redis: it sets key to
// value on the Redis behind pool only if token is at least the highest token
// accepted for key so far, which it keeps in key's companion "<key>:fence";
// the check and the write are one script, so no stale write slips in
// between. pool is any client's Pool: redigo.NewPool, or the goredis,
// rueidis or valkeygo adapters' (a Redis Cluster client too: the two keys
// share a slot only if key has a hash tag, "{doc}:1"). The data node need
// not be a lock node.
//
// It returns ErrStale for a stale token, an error wrapping
// redlock.ErrInvalid for token 0, and otherwise the node's error. A ctx
// without a deadline gets one of five seconds.
func Set(ctx context.Context, pool redlock.Pool, key string, token uint64, value string) error {
	switch {
	case token == 0:
		return errTokenZero
	case pool == nil:
		return fmt.Errorf("%w: nil pool", redlock.ErrInvalid)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	args := []any{setHash, int64(2), key, key + ":fence", int64(token), value}
	cmd := driver.Command{Name: "EVALSHA", Args: args, FirstKey: 2, NumKeys: 2}
	reply, err := exec(ctx, pool, cmd)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		cmd.Name, cmd.Args[0] = "EVAL", setSource // EVAL caches it again
		reply, err = exec(ctx, pool, cmd)
	}
	if err != nil {
		return fmt.Errorf("redlock: fenced set of %q: %w", key, err)
	}
	switch reply {
	case int64(1):
		return nil
	case int64(0):
		return fmt.Errorf("%w: %d for %q", ErrStale, token, key)
	}
	return fmt.Errorf("redlock: fenced set of %q: unexpected reply %v", key, reply)
}

// exec runs one command and returns its reply, or the error reply as an
// error, however the driver stored it.
func exec(ctx context.Context, pool redlock.Pool, cmd driver.Command) (any, error) {
	replies := make([]driver.Reply, 1)
	if err := pool.Exec(ctx, []driver.Command{cmd}, replies); err != nil {
		return nil, err
	}
	r := replies[0]
	if r.Err != nil {
		return nil, r.Err
	}
	if err, ok := r.Value.(error); ok {
		return nil, driver.ReplyError(err.Error())
	}
	return r.Value, nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/redigo"
	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock"
)

// ttl is the lock ttl in every case; keys are deleted by the unlock long
// before it runs out.
const ttl = 10 * time.Second

// Retry pause for the contention case, the same for both libraries: short, so
// that handoffs measure the libraries rather than the default 50-250ms pause.
const (
	retryMin = 1 * time.Millisecond
	retryMax = 3 * time.Millisecond
	tries    = 10000
)

// A locker is one implementation under test, behind the smallest interface
// the cases need, so that the harness adds the same cost to each.
type locker interface {
	// lockUnlock acquires key once, without retrying, and releases it.
	lockUnlock(ctx context.Context, key string) error
	// handoff acquires key, retrying until it holds it, and releases it.
	handoff(ctx context.Context, key string) error
}

// impls are the implementations a case compares, in column order: benchstat
// reports each one's ratio to the first.
var impls = []struct {
	name string
	new  func(pools []*redis.Pool) locker
}{
	{"floor", newFloor},
	{"redlock", newRedlock},
	{"redsync", newRedsync},
}

// floor sends SET NX PX to every node in parallel, waits for every reply,
// then does the same with the compare-and-delete script: the commands a
// Redlock acquisition and release must send, with no library logic.
type floor struct {
	pools []*redis.Pool
	hash  string
}

const floorRelease = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

func newFloor(pools []*redis.Pool) locker {
	f := &floor{pools: pools}
	for _, p := range pools {
		c := p.Get()
		h, err := redis.String(c.Do("SCRIPT", "LOAD", floorRelease))
		c.Close()
		if err == nil {
			f.hash = h
		}
	}
	return f
}

// floorToken stands in for a random token: the same length, no cost.
const floorToken = "0123456789abcdefghijkl"

func (f *floor) lockUnlock(ctx context.Context, key string) error {
	if err := f.all(func(c redis.Conn) error {
		ok, err := redis.String(c.Do("SET", key, floorToken, "NX", "PX", ttl.Milliseconds()))
		if err == nil && ok != "OK" {
			err = errors.New("not set")
		}
		return err
	}); err != nil {
		return err
	}
	return f.all(func(c redis.Conn) error {
		_, err := c.Do("EVALSHA", f.hash, 1, key, floorToken)
		return err
	})
}

func (f *floor) handoff(ctx context.Context, key string) error {
	return errors.New("floor: no contention case")
}

func (f *floor) all(cmd func(redis.Conn) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, p := range f.pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.Get()
			err := cmd(c)
			c.Close()
			if err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

type redlockLocker struct{ c *redlock.Client }

func newRedlock(pools []*redis.Pool) locker {
	ps := make([]redlock.Pool, len(pools))
	for i, p := range pools {
		ps[i] = redlockPool(p)
	}
	return newRedlockOver(ps)
}

// newRedlockOver is newRedlock on pools of any driver's adapter.
func newRedlockOver(ps []redlock.Pool) locker {
	c, err := redlock.New(ps, redlock.WithTries(tries), redlock.WithRetryDelay(retryMin, retryMax))
	if err != nil {
		panic(err)
	}
	return redlockLocker{c}
}

func (r redlockLocker) lockUnlock(ctx context.Context, key string) error {
	l, err := r.c.TryLock(ctx, key, ttl)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

func (r redlockLocker) handoff(ctx context.Context, key string) error {
	l, err := r.c.Lock(ctx, key, ttl)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// redsyncLocker uses redsync's defaults (it waits for every node) except for
// the ttl and the retry pause, set as for redlock.
type redsyncLocker struct{ rs *redsync.Redsync }

func newRedsync(pools []*redis.Pool) locker {
	return redsyncLocker{newRedsyncOn(pools)}
}

func newRedsyncOn(pools []*redis.Pool) *redsync.Redsync {
	ps := make([]redsyncredis.Pool, len(pools))
	for i, p := range pools {
		ps[i] = redigo.NewPool(p)
	}
	return redsync.New(ps...)
}

// newRedsyncOver is newRedsync on pools of any of redsync's adapters.
func newRedsyncOver(ps []redsyncredis.Pool) locker {
	return redsyncLocker{redsync.New(ps...)}
}

var redsyncDelay = redsync.WithRetryDelayFunc(func(int) time.Duration {
	return retryMin + rand.N(retryMax-retryMin+1)
})

func (r redsyncLocker) lockUnlock(ctx context.Context, key string) error {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl))
	if err := m.TryLockContext(ctx); err != nil {
		return err
	}
	return unlocked(m.UnlockContext(ctx))
}

func (r redsyncLocker) handoff(ctx context.Context, key string) error {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(tries), redsyncDelay)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	return unlocked(m.UnlockContext(ctx))
}

// unlocked folds redsync's (ok, err) into one error.
func unlocked(ok bool, err error) error {
	if err == nil && !ok {
		err = fmt.Errorf("redsync: unlock reached too few nodes")
	}
	return err
}

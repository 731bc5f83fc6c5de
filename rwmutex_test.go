package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// readersOn returns the reader tokens in key's readers set on each node.
func (c *cluster) readersOn(key string) [][]string {
	_, r, _ := redlock.RWNames(key)
	out := make([][]string, len(c.nodes))
	for i, m := range c.nodes {
		out[i], _ = m.ZMembers(r)
	}
	return out
}

// holdsReader returns on how many nodes token is in key's readers set.
func (c *cluster) holdsReader(key, token string) int {
	n := 0
	for _, members := range c.readersOn(key) {
		for _, m := range members {
			if m == token {
				n++
			}
		}
	}
	return n
}

// Readers share the lock; a writer excludes readers and other writers, and
// gets in once they are gone.
func TestRWMutexExclusion(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	rw := client.RWMutex("doc")
	w, r, _ := redlock.RWNames("doc")

	r1, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	r2, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err, "a second reader must share the lock")
	assert.NotEqual(t, r1.Value(), r2.Value())
	assert.Equal(t, "doc", r1.Key())
	c.settle(t)
	assert.Equal(t, 3, c.holdsReader("doc", r1.Value()))
	assert.Equal(t, 3, c.holdsReader("doc", r2.Value()))

	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a writer got in beside two readers")
	require.NoError(t, r1.Unlock(ctx))
	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a writer got in beside a reader")
	require.NoError(t, r2.Unlock(ctx))
	c.settle(t) // Unlock returns on a majority; let the last node's release land

	wl, err := rw.TryLock(ctx, time.Second)
	require.NoError(t, err, "the writer must get in once the readers are gone")
	c.settle(t)
	assert.Equal(t, 3, c.count(w, wl.Value()))
	_, err = rw.TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a reader got in beside a writer")
	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "two writers")
	// The lock on "doc" is not the mutex on "doc", and the reverse.
	ml, err := client.TryLock(ctx, "doc", time.Second)
	require.NoError(t, err)
	require.NoError(t, ml.Unlock(ctx))

	require.NoError(t, wl.Unlock(ctx))
	c.settle(t)
	assert.Equal(t, make([]string, 3), c.values(w), "the writer key outlived Unlock")
	r3, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r3.Unlock(ctx))
	c.settle(t)
	for i, m := range c.nodes {
		assert.False(t, m.Exists(r), "node %d keeps an empty readers set", i)
	}
}

// Every subset of failed nodes for N=5, both sides: granted exactly when a
// majority works, and a lost attempt leaves nothing behind on any node,
// even where the command ran but its reply was lost.
func TestRWMutexEveryFailingSubset(t *testing.T) {
	const n = 5
	for _, kind := range []fault{failing, lostReply} {
		for _, write := range []bool{false, true} {
			t.Run(fmt.Sprintf("fault=%d/write=%v", kind, write), func(t *testing.T) {
				c := newCluster(t, n)
				client := c.client(t)
				for mask := 0; mask < 1<<n; mask++ {
					for i, p := range c.pools {
						p.set(healthy)
						if mask&(1<<i) != 0 {
							p.set(kind)
						}
					}
					key := fmt.Sprintf("subset-%d", mask)
					rw := client.RWMutex(key)
					var l *redlock.Lock
					var err error
					if write {
						l, err = rw.TryLock(context.Background(), time.Second)
					} else {
						l, err = rw.TryRLock(context.Background(), time.Second)
					}
					for _, p := range c.pools {
						p.set(healthy)
					}
					if bits.OnesCount(uint(mask)) <= 2 {
						require.NoError(t, err, "mask %05b", mask)
						require.NoError(t, l.Unlock(context.Background()), "mask %05b", mask)
					} else {
						require.ErrorIs(t, err, redlock.ErrNotObtained, "mask %05b", mask)
						assert.Len(t, nodeErrors(err, nil), bits.OnesCount(uint(mask)), "mask %05b: %v", mask, err)
					}
					c.settle(t)
					w, _, _ := redlock.RWNames(key)
					assert.Equal(t, make([]string, n), c.values(w), "mask %05b leaves a writer key", mask)
					assert.Equal(t, make([][]string, n), c.readersOn(key), "mask %05b leaves a reader", mask)
				}
			})
		}
	}
}

// A lost attempt undoes itself on the nodes that granted it: a reader
// refused by a writer on two of three nodes leaves no entry on the third,
// and a writer refused by readers on two leaves no key on the third.
func TestRWMutexLostAttemptUndone(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	w, r, _ := redlock.RWNames("undo")
	for _, i := range []int{0, 1} {
		require.NoError(t, c.nodes[i].Set(w, "someone"))
	}
	_, err := client.RWMutex("undo").TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	assert.Equal(t, make([][]string, 3), c.readersOn("undo"))

	for _, i := range []int{0, 1} {
		c.nodes[i].Del(w)
		_, err := c.nodes[i].ZAdd(r, float64(time.Now().Add(time.Hour).UnixMilli()), "reader")
		require.NoError(t, err)
	}
	_, err = client.RWMutex("undo").TryLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	assert.Equal(t, make([]string, 3), c.values(w))
}

// A reader whose entry has expired on the node, though not yet pruned,
// blocks no writer; the writer's script prunes it.
func TestRWMutexExpiredReaderPruned(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	_, r, _ := redlock.RWNames("prune")
	for _, m := range c.nodes {
		_, err := m.ZAdd(r, float64(time.Now().Add(-time.Second).UnixMilli()), "ghost")
		require.NoError(t, err)
	}
	l, err := client.RWMutex("prune").TryLock(context.Background(), time.Second)
	require.NoError(t, err, "an expired reader blocked a writer")
	c.settle(t)
	assert.Equal(t, make([][]string, 3), c.readersOn("prune"), "the expired reader was not pruned")
	require.NoError(t, l.Unlock(context.Background()))
}

// Only the holder can extend or release: another reader's Unlock leaves a
// reader in place, and a lost hold is reported, not revived.
func TestRWMutexNonHolderRefused(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	rw := client.RWMutex("holder")
	w, r, _ := redlock.RWNames("holder")

	a, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	b, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, a.Unlock(ctx))
	c.settle(t)
	assert.Equal(t, 3, c.holdsReader("holder", b.Value()), "one reader's Unlock removed another")

	// b's entry is gone from two nodes (expired, evicted): Extend and Unlock
	// report the loss and never put it back.
	for _, i := range []int{0, 1} {
		_, err := c.nodes[i].ZRem(r, b.Value())
		require.NoError(t, err)
	}
	err = b.Extend(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	c.settle(t)
	assert.Equal(t, 1, c.holdsReader("holder", b.Value()), "Extend revived a lost reader")
	require.ErrorIs(t, b.Unlock(ctx), redlock.ErrLockLost)

	// A writer whose key another token took over cannot extend it, and its
	// Unlock leaves the other token's key alone.
	wl, err := rw.TryLock(ctx, time.Second)
	require.NoError(t, err)
	c.settle(t)
	for _, m := range c.nodes {
		require.NoError(t, m.Set(w, "other"))
	}
	require.ErrorIs(t, wl.Extend(ctx, time.Second), redlock.ErrLockLost)
	require.ErrorIs(t, wl.Unlock(ctx), redlock.ErrLockLost)
	c.settle(t)
	assert.Equal(t, []string{"other", "other", "other"}, c.values(w))
}

// Extend pushes a reader's expiry forward and never back, and moves Until.
func TestRWMutexReaderExtend(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	_, r, _ := redlock.RWNames("ext")
	// Node 1 a straggler, as on a loaded machine: TryRLock returns on the
	// other two, with node 1's acquisition still on its way. An Extend sent
	// before it arrives is refused there (no member yet), and the
	// acquisition then lands with its own ttl; the checks below are of
	// every node, so they wait for it.
	undo := redlock.SlowNodes(client, 0b010, 50*time.Millisecond)
	l, err := client.RWMutex("ext").TryRLock(ctx, time.Second)
	undo()
	require.NoError(t, err)
	c.settle(t)
	first := l.Until()
	require.NoError(t, l.Extend(ctx, 10*time.Second))
	assert.True(t, l.Until().After(first.Add(8*time.Second)), "Until did not move")
	c.settle(t)
	scores := make([]float64, 3)
	for i, m := range c.nodes {
		scores[i], err = m.ZScore(r, l.Value())
		require.NoError(t, err)
		assert.Greater(t, scores[i], float64(time.Now().Add(9*time.Second).UnixMilli()), "node %d", i)
	}
	require.NoError(t, l.Extend(ctx, time.Second))
	c.settle(t)
	for i, m := range c.nodes {
		s, err := m.ZScore(r, l.Value())
		require.NoError(t, err)
		assert.Equal(t, scores[i], s, "node %d: a shorter Extend shortened the reader", i)
	}
	require.NoError(t, l.Unlock(ctx))
}

// Done closes when validity ends, no earlier than Until, for both sides.
func TestRWMutexDoneAtExpiry(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	rw := client.RWMutex("done")
	for _, write := range []bool{false, true} {
		var l *redlock.Lock
		var err error
		if write {
			l, err = rw.TryLock(context.Background(), 100*time.Millisecond)
		} else {
			l, err = rw.TryRLock(context.Background(), 100*time.Millisecond)
		}
		require.NoError(t, err)
		select {
		case <-l.Done():
			assert.False(t, time.Now().Before(l.Until()), "write=%v: Done closed before Until", write)
		case <-time.After(10 * time.Second):
			t.Fatalf("write=%v: Done not closed 10s after a 100ms lock", write)
		}
		require.ErrorIs(t, l.Extend(context.Background(), time.Second), redlock.ErrExpired)
		c.nodes[0].FastForward(time.Second) // the keys expire on the nodes too
		c.nodes[1].FastForward(time.Second)
		c.nodes[2].FastForward(time.Second)
	}
}

// Bad input is an error wrapping ErrInvalid, with no network call.
func TestRWMutexBadInput(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	ctx := context.Background()
	rw := client.RWMutex("bad")
	var none *redlock.RWMutex
	before := c.gets()
	fn := func(context.Context) error { return nil }
	cases := map[string]func() error{
		"empty key":       func() error { _, err := client.RWMutex("").Lock(ctx, time.Second); return err },
		"empty key read":  func() error { _, err := client.RWMutex("").RLock(ctx, time.Second); return err },
		"zero ttl":        func() error { _, err := rw.TryLock(ctx, 0); return err },
		"negative ttl":    func() error { _, err := rw.TryRLock(ctx, -time.Second); return err },
		"ttl under drift": func() error { _, err := rw.RLock(ctx, time.Millisecond); return err },
		"nil ctx":         func() error { _, err := rw.Lock(nil, time.Second); return err },     //nolint:staticcheck
		"nil ctx read":    func() error { _, err := rw.TryRLock(nil, time.Second); return err }, //nolint:staticcheck
		"nil mutex":       func() error { _, err := none.Lock(ctx, time.Second); return err },
		"nil mutex try":   func() error { _, err := none.TryLock(ctx, time.Second); return err },
		"nil mutex read":  func() error { _, err := none.RLock(ctx, time.Second); return err },
		"nil mutex tryr":  func() error { _, err := none.TryRLock(ctx, time.Second); return err },
		"nil mutex Do":    func() error { return none.Do(ctx, time.Second, fn) },
		"nil mutex RDo":   func() error { return none.RDo(ctx, time.Second, fn) },
		"nil fn":          func() error { return rw.Do(ctx, time.Second, nil) },
		"nil fn read":     func() error { return rw.RDo(ctx, time.Second, nil) },
		"zero mutex":      func() error { _, err := (&redlock.RWMutex{}).RLock(ctx, time.Second); return err },
	}
	for name, call := range cases {
		err := call()
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		if err != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: "), "%s: %v", name, err)
		}
	}
	assert.Equal(t, before, c.gets(), "bad input made a network call")
	assert.Empty(t, none.Key())

	closed := c.client(t)
	require.NoError(t, closed.Close())
	_, err := closed.RWMutex("x").TryRLock(ctx, time.Second)
	assert.ErrorIs(t, err, redlock.ErrClosed, "a closed client")
}

// The three keys of a lock share one Redis Cluster hash slot whatever the
// key, and a key's own tag is kept.
func TestRWNamesShareASlot(t *testing.T) {
	// tag is Redis Cluster's rule: the part between the first '{' and the
	// first '}' after it, if not empty; else the whole key.
	tag := func(k string) string {
		open := strings.IndexByte(k, '{')
		if open < 0 {
			return k
		}
		end := strings.IndexByte(k[open+1:], '}')
		if end <= 0 {
			return k
		}
		return k[open+1 : open+1+end]
	}
	for _, key := range []string{"doc", "user:{42}:profile", "{a}", "a}b", "}a", "}", "a{", "{}", "{}x}", "x{}{y}", "{{a}}", "a{b}c"} {
		w, r, i := redlock.RWNames(key)
		assert.Equal(t, tag(w), tag(r), "key %q: %q and %q", key, w, r)
		assert.Equal(t, tag(w), tag(i), "key %q: %q and %q", key, w, i)
		assert.NotEqual(t, w, tag(w), "key %q: %q has no tag", key, w)
		if tag(key) != key || !strings.ContainsAny(key, "{}") {
			assert.Equal(t, tag(key), tag(w), "key %q: its names leave its slot", key)
		}
		assert.True(t, w != r && r != i && w != i, "key %q", key)
	}
}

// A waiting writer's intent mark keeps new readers out while it waits,
// so the writer gets in once the current reader leaves; a writer that
// gives up removes its mark, and TryLock leaves none.
func TestRWMutexWriterIntent(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithRetryDelay(5*time.Millisecond, 10*time.Millisecond), redlock.WithTries(1000))
	ctx := context.Background()
	rw := client.RWMutex("intent")
	_, _, mark := redlock.RWNames("intent")

	first, err := rw.TryRLock(ctx, time.Minute)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	assert.Equal(t, make([]string, 3), c.values(mark), "TryLock left an intent mark")

	// A Lock that gives up removes its mark.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = rw.Lock(short, time.Second)
	cancel()
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	assert.Equal(t, make([]string, 3), c.values(mark), "a Lock that gave up left its mark")
	require.NoError(t, first.Unlock(ctx))

	// A reader that holds; a writer that waits for it.
	reader, err := rw.TryRLock(ctx, time.Minute)
	require.NoError(t, err)
	// Its registration on the last node may still be on its way: a writer
	// attempt that got there first would take that node, and the
	// reader's registration be refused, so that the writer's later
	// attempts win it again and again, leaving no mark there (seen under
	// -race on a loaded machine).
	c.settle(t)
	got := make(chan error, 1)
	var writer *redlock.Lock
	go func() {
		var err error
		writer, err = rw.Lock(ctx, time.Second)
		got <- err
	}()
	marked := realEventually(10*time.Second, func() bool { return c.count(mark, c.values(mark)[0]) == 3 && c.values(mark)[0] != "" })
	require.True(t, marked, "no intent mark on every node while the writer waits")
	_, err = rw.TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a new reader got in past the writer's mark")
	require.NoError(t, reader.Extend(ctx, time.Minute), "the mark must not stop a holder's Extend")
	require.NoError(t, reader.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not get in after the reader left")
	}
	require.NoError(t, writer.Unlock(ctx))
	c.settle(t)
}

// Writer starvation, measured: eight readers re-lock without pause, so
// that some reader holds nearly always. With its intent mark, a writer gets
// in within a generous bound; without it, it may wait for ever, which the
// test logs rather than asserts.
func TestRWMutexWriterNotStarved(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	const (
		readers = 8
		hold    = 20 * time.Millisecond
		bound   = 3 * time.Second // generous: the readers drain within one hold
	)
	measure := func(rw *redlock.RWMutex) (time.Duration, error) {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var cycles atomic.Int64
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					l, err := rw.RLock(ctx, time.Second)
					if err != nil {
						continue
					}
					cycles.Add(1)
					time.Sleep(hold)
					_ = l.Unlock(context.WithoutCancel(ctx))
				}
			}()
		}
		defer func() { stop(); wg.Wait() }()
		// Wait until the stream runs, then time a writer.
		if !realEventually(10*time.Second, func() bool { return cycles.Load() >= 50 }) {
			return 0, errors.New("the readers did not get going")
		}
		wctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		start := time.Now()
		l, err := rw.Lock(wctx, time.Second)
		wait := time.Since(start)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		return wait, err
	}
	c := newCluster(t, 3)
	client := c.client(t, redlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond), redlock.WithTries(1<<20))
	without, errWithout := measure(redlock.WithoutIntent(client.RWMutex("starve-plain")))
	with, errWith := measure(client.RWMutex("starve-intent"))
	t.Logf("writer's wait under %d readers re-locking: with intent %v (%v), without %v (%v)",
		readers, with.Round(time.Millisecond), errWith, without.Round(time.Millisecond), errWithout)
	require.NoError(t, errWith, "with its intent mark the writer starved for %v", bound)
	assert.Less(t, with, bound)
}

// Do and RDo hold the lock while fn runs, extending it, and cancel fn's
// context with ErrLockLost once the nodes prove it gone, as Client.Do does.
func TestRWMutexDoCancelsOnLoss(t *testing.T) {
	c := newCluster(t, 3)
	client := c.client(t)
	for _, write := range []bool{true, false} {
		rw := client.RWMutex(fmt.Sprintf("do-%v", write))
		w, r, _ := redlock.RWNames(rw.Key())
		held := make(chan *redlock.Lock, 1)
		fn := func(ctx context.Context) error {
			held <- redlock.HeldLock(ctx)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * time.Second):
				return errors.New("fn's context was not cancelled after the lock was lost")
			}
		}
		errc := make(chan error, 1)
		go func() {
			if write {
				errc <- rw.Do(context.Background(), 300*time.Millisecond, fn)
			} else {
				errc <- rw.RDo(context.Background(), 300*time.Millisecond, fn)
			}
		}()
		l := <-held
		require.NotNil(t, l, "write=%v: fn does not see its lock", write)
		c.settle(t)
		for _, m := range c.nodes { // the hold disappears from every node
			if write {
				m.Del(w)
			} else {
				_, err := m.ZRem(r, l.Value())
				require.NoError(t, err)
			}
		}
		err := <-errc
		assert.ErrorIs(t, err, redlock.ErrLockLost, "write=%v", write)
		assert.NotContains(t, err.Error(), "was not cancelled", "write=%v", write)
	}
}

// A holdPool holds the first batch that hold picks until gate is closed,
// then sends it; other batches go through at once.
type holdPool struct {
	redlock.Pool
	hold func(cmds []driver.Command) bool
	gate chan struct{}
	held atomic.Bool
}

func (p *holdPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	if p.hold(cmds) && p.held.CompareAndSwap(false, true) {
		<-p.gate
	}
	return p.Pool.Exec(ctx, cmds, replies)
}

// A reader granted by a majority while its attempt is still on its way to
// a third node removes its registration there after that attempt, not
// before: the removal follows the attempt in the node's pipe. Before, it
// went on another lane and could overtake the attempt, whose script, refused
// by a writer's intent mark, then registered the reader after the removal;
// the next writer's release entitled that absent reader, and the node
// refused every writer until the entitlement lapsed (with one such node
// per two, TestRealRWMutexPhaseFair saw both sides stall for seconds).
func TestRWMutexUnmarkFollowsTheAttempt(t *testing.T) {
	c := newCluster(t, 3)
	writer, readers, intent := redlock.RWNames("follow")
	waiting, _ := redlock.RWQueueNames("follow")
	// Node 2 refuses readers: a writer waits there (its intent mark). Its
	// script cache holds the reader's scripts, as a node's does in steady
	// state: a script resent by EVAL after NOSCRIPT enters the pipe late
	// (docs/rwlock.md).
	c.nodes[2].Set(intent, "a-writer")
	c.nodes[2].SetTTL(intent, time.Minute)
	conn, err := redis.Dial("tcp", c.nodes[2].Addr())
	require.NoError(t, err)
	for _, name := range []string{"rw_rlock.lua", "rw_unwait.lua"} {
		src, err := os.ReadFile("scripts/" + name)
		require.NoError(t, err)
		_, err = conn.Do("SCRIPT", "LOAD", src)
		require.NoError(t, err)
	}
	conn.Close()
	slow := &holdPool{Pool: c.pools[2], gate: make(chan struct{}), hold: func(cmds []driver.Command) bool {
		for _, cmd := range cmds { // the reader's attempt names the writer key and the readers set
			if len(cmd.Args) > 3 && cmd.Args[2] == writer && cmd.Args[3] == readers {
				return true
			}
		}
		return false
	}}
	// Nodes 0 and 1 answer once node 2 holds the attempt, so that it is in
	// node 2's pipe when the reader, granted, sends the removal.
	for _, p := range c.pools[:2] {
		p.onGet(func() {
			for start := time.Now(); !slow.held.Load() && time.Since(start) < 5*time.Second; {
				time.Sleep(time.Millisecond)
			}
		})
	}
	client, err := redlock.New([]redlock.Pool{c.pools[0], c.pools[1], slow},
		redlock.WithNodeTimeout(10*time.Second), redlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond), redlock.WithTries(100))
	require.NoError(t, err)
	c.clients = append(c.clients, client)
	defer client.Close()

	l, err := client.RWMutex("follow").RLock(context.Background(), time.Minute)
	require.NoError(t, err, "nodes 0 and 1 grant the reader")
	require.True(t, slow.held.Load(), "the attempt on node 2 was not held")
	// The removal must come after the attempt on node 2: it waits for
	// every node's answer, then goes to every node. Let the attempt through
	// and wait for every node call.
	close(slow.gate)
	c.settle(t)
	members, _ := c.nodes[2].ZMembers(waiting)
	assert.Empty(t, members, "node 2 keeps the granted reader's registration: the removal overtook its attempt")
	require.NoError(t, l.Unlock(context.Background()))
}

// Lock and RLock with ctx already ended send nothing, as every acquisition
// does (fanout): no attempt, and no removal of a wait mark that no attempt
// left. (The first attempt counted as marking, and the giveUp sent a
// removal round, which with frozen nodes took a node timeout.)
func TestRWEndedContextSendsNothing(t *testing.T) {
	for _, write := range []bool{true, false} {
		name := "RLock"
		if write {
			name = "Lock"
		}
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			rw := c.client(t).RWMutex("ended")
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			before := c.gets()
			var err error
			if write {
				_, err = rw.Lock(ended, time.Minute)
			} else {
				_, err = rw.RLock(ended, time.Minute)
			}
			require.ErrorIs(t, err, context.Canceled)
			c.settle(t)
			if sent := c.gets() - before; sent != 0 {
				t.Errorf("%s with ctx ended sent %d commands, want none", name, sent)
			}
		})
	}
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/observe"
)

// members returns the tokens in the sorted set of the semaphore on key, on
// each node, sorted: each member without its "weight:" (rawMembers keeps it).
func (c *cluster) members(key string) [][]string {
	out := c.rawMembers(key)
	for _, ms := range out {
		for j, m := range ms {
			if w, tok, ok := strings.Cut(m, ":"); ok && strings.Trim(w, "0123456789") == "" {
				ms[j] = tok
			}
		}
		slices.Sort(ms)
	}
	return out
}

// rawMembers returns the members of the sorted set of the semaphore on key,
// on each node, sorted.
func (c *cluster) rawMembers(key string) [][]string {
	key = redlock.SemaphoreKey(key)
	out := make([][]string, len(c.nodes))
	for i, m := range c.nodes {
		if !m.Exists(key) {
			continue
		}
		ms, err := m.ZMembers(key)
		if err != nil {
			panic(err)
		}
		slices.Sort(ms)
		out[i] = ms
	}
	return out
}

// holding returns on how many nodes key's set holds token, whatever its
// weight.
func (c *cluster) holding(key, token string) int {
	n := 0
	for _, ms := range c.members(key) {
		if slices.Contains(ms, token) {
			n++
		}
	}
	return n
}

// fill gives key's set on node i k members that expire in an hour.
func (c *cluster) fill(t testing.TB, i int, key string, k int) {
	t.Helper()
	key = redlock.SemaphoreKey(key)
	expiry := float64(time.Now().Add(time.Hour).UnixMilli())
	for j := range k {
		_, err := c.nodes[i].ZAdd(key, expiry, fmt.Sprintf("other-%d", j))
		require.NoError(t, err)
	}
}

// The quorum is the least q with (K+1)·q > K·N, found here by search rather
// than by the formula, and the fault tolerance is N − q.
func TestSemaphoreQuorum(t *testing.T) {
	for n := 1; n <= 9; n++ {
		c := newCluster(t, n)
		client := c.client(t)
		for k := 1; k <= 10; k++ {
			want := 1
			for (k+1)*want <= k*n {
				want++
			}
			s := mustSemaphore(t, client, "q", k, redlock.AllowNoFaultTolerance())
			assert.Equal(t, want, s.Quorum(), "N=%d K=%d", n, k)
			assert.Equal(t, n-want, s.FaultTolerance(), "N=%d K=%d", n, k)
			if k == 1 {
				assert.Equal(t, n/2+1, s.Quorum(), "N=%d: one permit is a mutex, whose quorum is the majority", n)
			}
		}
	}
}

// mustSemaphore makes the semaphore of key, failing the test if it cannot.
func mustSemaphore(t testing.TB, c *redlock.Client, key string, k int, opts ...redlock.SemaphoreOption) *redlock.Semaphore {
	t.Helper()
	s, err := c.Semaphore(key, k, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// acquireOn makes the semaphore of key on c and acquires one permit: the
// constructor's error, or Acquire's.
func acquireOn(ctx context.Context, c *redlock.Client, key string, k int, ttl time.Duration) (*redlock.Lock, error) {
	s, err := c.Semaphore(key, k)
	if err != nil {
		return nil, err
	}
	return s.Acquire(ctx, ttl)
}

// tryAcquireOn is acquireOn with TryAcquire.
func tryAcquireOn(ctx context.Context, c *redlock.Client, key string, k int, ttl time.Duration) (*redlock.Lock, error) {
	s, err := c.Semaphore(key, k)
	if err != nil {
		return nil, err
	}
	return s.TryAcquire(ctx, ttl)
}

// Impossible configurations fail with ErrInvalid when the semaphore is
// made, and bad arguments from the first call that sees them, before any
// network call.
func TestSemaphoreInvalid(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t)
	ctx := context.Background()
	noFT := "needs every node"
	single := newCluster(t, 1).client(t)
	pow52 := int64(1) << 52 // a variable: 2^52 is no int constant on 32-bit platforms
	before := c.gets()
	for _, tc := range []struct {
		name    string
		client  *redlock.Client
		key     string
		permits int
		opts    []redlock.SemaphoreOption
		message string
	}{
		{"zero permits", client, "s", 0, nil, "permits 0"},
		{"negative permits", client, "s", -3, nil, "permits -3"},
		{"permits above 2^52", single, "s", int(pow52) + 1, nil, "exceed 2^52"},
		{"K=4 on N=5 tolerates no failure", client, "s", 4, nil, noFT},
		{"K=9 on N=5 tolerates no failure", client, "s", 9, nil, noFT},
		{"K=2 on N=3 tolerates no failure", newCluster(t, 3).client(t), "s", 2, nil, "at least 4 tolerate one failure"},
		{"nil option", client, "s", 2, []redlock.SemaphoreOption{nil}, "nil semaphore option"},
		{"empty key", client, "", 2, nil, "empty key"},
		{"nil client", nil, "s", 2, nil, "nil or zero *Client"},
		{"weight 0", client, "s", 2, []redlock.SemaphoreOption{redlock.WithWeight(0)}, "weight 0 must be from 1 to the 2 permits"},
		{"negative weight", client, "s", 2, []redlock.SemaphoreOption{redlock.WithWeight(-1)}, "weight -1"},
		{"weight above K", client, "s", 2, []redlock.SemaphoreOption{redlock.WithWeight(3)}, "weight 3 must be from 1 to the 2 permits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.client.Semaphore(tc.key, tc.permits, tc.opts...)
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tc.message)
			assert.Nil(t, s)
		})
	}
	if s, err := single.Semaphore("s", int(pow52)); err != nil || s == nil {
		t.Errorf("2^52 permits on one node: %v, want a Semaphore", err)
	}
	for _, tc := range []struct {
		name    string
		sem     *redlock.Semaphore
		ctx     context.Context
		ttl     time.Duration
		message string
	}{
		{"nil context", mustSemaphore(t, client, "s", 2), nil, time.Second, "nil context"},
		{"zero ttl", mustSemaphore(t, client, "s", 2), ctx, 0, "ttl"},
		{"ttl within drift", mustSemaphore(t, client, "s", 2), ctx, 2 * time.Millisecond, "drift"},
		{"nil semaphore", nil, ctx, time.Second, "nil or zero *Semaphore"},
		{"zero semaphore", &redlock.Semaphore{}, ctx, time.Second, "nil or zero *Semaphore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, call := range map[string]func() (*redlock.Lock, error){
				"Acquire":    func() (*redlock.Lock, error) { return tc.sem.Acquire(tc.ctx, tc.ttl) },
				"TryAcquire": func() (*redlock.Lock, error) { return tc.sem.TryAcquire(tc.ctx, tc.ttl) },
			} {
				p, err := call()
				require.ErrorIs(t, err, redlock.ErrInvalid, name)
				assert.Contains(t, err.Error(), tc.message, name)
				assert.Nil(t, p, name)
			}
			err := tc.sem.Do(tc.ctx, tc.ttl, func(context.Context) error { return nil })
			require.ErrorIs(t, err, redlock.ErrInvalid)
		})
	}
	assert.Equal(t, before, c.gets(), "a network call was made")

	// Asked for, the configuration without fault tolerance works, on every node.
	p, err := mustSemaphore(t, client, "s", 4, redlock.AllowNoFaultTolerance()).TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	c.settle(t)
	assert.Equal(t, 5, c.holding("s", p.Value()))
	require.NoError(t, p.Unlock(ctx))

	// One node has no failure to tolerate, whatever K.
	one := newCluster(t, 1)
	p, err = mustSemaphore(t, one.client(t), "s", 7).TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, p.Unlock(ctx))

	// A nil function, and the nil *Lock of a failed Acquire.
	require.ErrorIs(t, mustSemaphore(t, client, "s", 2).Do(ctx, time.Second, nil), redlock.ErrInvalid)
	var nilPermit *redlock.Lock
	require.ErrorIs(t, nilPermit.Extend(ctx, time.Second), redlock.ErrInvalid)
	require.ErrorIs(t, nilPermit.Unlock(ctx), redlock.ErrInvalid)
	assert.True(t, nilPermit.Until().IsZero())
	assert.Zero(t, nilPermit.Held())
	assert.Empty(t, nilPermit.Value())
	select {
	case <-nilPermit.Done():
	default:
		t.Error("the nil *Lock's Done is open")
	}

	// A permit's own calls check their arguments too.
	p, err = mustSemaphore(t, client, "s", 2).TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	require.ErrorIs(t, p.Extend(ctx, 0), redlock.ErrInvalid)
	require.ErrorIs(t, p.Extend(nil, time.Second), redlock.ErrInvalid) //nolint:staticcheck // nil ctx on purpose
	require.ErrorIs(t, p.Unlock(nil), redlock.ErrInvalid)              //nolint:staticcheck // nil ctx on purpose
	require.NoError(t, p.Unlock(ctx))

	// A closed Client.
	require.NoError(t, client.Close())
	_, err = mustSemaphore(t, client, "s", 2).TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrClosed)
}

// Weighted permits: a node admits holders while their weights add up to at
// most K, so K=3 on N=5 (quorum 4) takes a permit of weight 2 and one of
// weight 1, and then nothing; a second permit of weight 2 waits for the
// first to be released, not for the one of weight 1. The weight is in each
// member ("2:token"), a member without one counts as weight 1, and a token
// that repeats under another weight is refused as under the same.
func TestSemaphoreWeighted(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t)
	ctx := context.Background()
	two := mustSemaphore(t, client, "w", 3, redlock.WithWeight(2))
	one := mustSemaphore(t, client, "w", 3)
	three := mustSemaphore(t, client, "w", 3, redlock.WithWeight(3))
	assert.Equal(t, 2, two.Weight())
	assert.Equal(t, 1, one.Weight(), "the default weight")
	assert.Equal(t, 4, two.Quorum(), "the quorum depends on K alone")

	a, err := two.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	c.settle(t)
	for i, ms := range c.rawMembers("w") {
		assert.Equal(t, []string{"2:" + a.Value()}, ms, "node %d", i)
	}
	_, err = two.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "2+2 > 3")
	_, err = three.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "2+3 > 3")
	b, err := one.TryAcquire(ctx, time.Minute)
	require.NoError(t, err, "2+1 = 3")
	_, err = one.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "2+1+1 > 3")

	require.NoError(t, a.Unlock(ctx))
	c.settle(t)
	d, err := two.TryAcquire(ctx, time.Minute)
	require.NoError(t, err, "1+2 = 3 once the first weight 2 is released")
	require.NoError(t, d.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	c.settle(t)

	// A token already in the set under weight 1 is refused under weight 2.
	// Two Clients, so that the repeat is each one's first token: a Client
	// refuses its own token function's repeat before anything is sent.
	repeating := c.client(t, redlock.WithTokenFunc(scriptedTokens("dup")))
	dup, err := mustSemaphore(t, repeating, "w", 3).TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "dup", dup.Value())
	c.settle(t)
	again := c.client(t, redlock.WithTokenFunc(scriptedTokens("dup")))
	_, err = mustSemaphore(t, again, "w", 3, redlock.WithWeight(2)).TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), "already a holder's")
	require.NoError(t, dup.Unlock(ctx))
	c.settle(t)

	// A member without a weight (another client's, or an older one's)
	// counts as 1: two of them leave room for weight 1, not 2.
	for i := range c.nodes {
		c.fill(t, i, "w", 2)
	}
	_, err = two.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "1+1+2 > 3")
	e, err := one.TryAcquire(ctx, time.Minute)
	require.NoError(t, err, "1+1+1 = 3")
	require.NoError(t, e.Unlock(ctx))

	// Weight on the nil value.
	var nilSem *redlock.Semaphore
	assert.Zero(t, nilSem.Weight())
}

// K permits are granted and the next is refused; a release frees one; and
// the refused attempt leaves no token of its own behind.
func TestSemaphoreAdmitsK(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{1, 1}, {3, 1}, {5, 1}, {5, 2}, {5, 3}, {7, 3}, {9, 4}} {
		t.Run(fmt.Sprintf("N=%d/K=%d", tc.n, tc.k), func(t *testing.T) {
			c := newCluster(t, tc.n)
			s := mustSemaphore(t, c.client(t), "pool", tc.k)
			ctx := context.Background()
			var held []*redlock.Lock
			for range tc.k {
				p, err := s.TryAcquire(ctx, time.Minute)
				require.NoError(t, err)
				held = append(held, p)
				c.settle(t) // the stragglers too, so that every node holds it
			}
			_, err := s.TryAcquire(ctx, time.Minute)
			require.ErrorIs(t, err, redlock.ErrNotObtained)
			c.settle(t)
			var want []string
			for _, p := range held {
				want = append(want, p.Value())
			}
			slices.Sort(want)
			for i, ms := range c.members("pool") {
				assert.Equal(t, want, ms, "node %d holds exactly the K holders' tokens", i)
			}

			require.NoError(t, held[0].Unlock(ctx))
			c.settle(t)
			assert.Zero(t, c.holding("pool", held[0].Value()), "a released token is on no node")
			p, err := s.TryAcquire(ctx, time.Minute)
			require.NoError(t, err, "a released permit is free again")
			for _, p := range append(held[1:], p) {
				require.NoError(t, p.Unlock(ctx))
			}
			c.settle(t)
			for i, m := range c.nodes {
				assert.False(t, m.Exists(redlock.SemaphoreKey("pool")), "node %d: the empty set is deleted", i)
			}
		})
	}
}

// Every subset of full nodes, for K=2 on N=5 (quorum 4): a permit is
// granted exactly when q nodes have room, and a refused attempt removes its
// token from every node that admitted it.
func TestSemaphoreEveryFullSubset(t *testing.T) {
	const n, k = 5, 2
	c := newCluster(t, n)
	client := c.client(t)
	ctx := context.Background()
	for mask := 0; mask < 1<<n; mask++ {
		key := fmt.Sprintf("full-%d", mask)
		s := mustSemaphore(t, client, key, k)
		require.Equal(t, 4, s.Quorum())
		for i := range n {
			if mask&(1<<i) != 0 {
				c.fill(t, i, key, k)
			}
		}
		free := n - bits.OnesCount(uint(mask))
		p, err := s.TryAcquire(ctx, time.Minute)
		c.settle(t)
		if free >= s.Quorum() {
			require.NoError(t, err, "mask %05b", mask)
			assert.Equal(t, free, c.holding(key, p.Value()), "mask %05b: every node with room admitted the token", mask)
			require.NoError(t, p.Unlock(ctx))
			c.settle(t)
		} else {
			require.ErrorIs(t, err, redlock.ErrNotObtained, "mask %05b", mask)
			assert.Contains(t, err.Error(), "4 needed")
		}
		for i, ms := range c.members(key) {
			if mask&(1<<i) != 0 {
				assert.Equal(t, []string{"other-0", "other-1"}, ms, "mask %05b node %d: others' tokens untouched", mask, i)
			} else {
				assert.Empty(t, ms, "mask %05b node %d still holds a token", mask, i)
			}
		}
	}
}

// Every subset of failed nodes, for each kind of failure, for K=2 on N=5:
// Acquire, Extend and Release each need 4 working nodes; errors
// name every failed node; and nothing of a failed acquisition is left on
// any node, even where the reply was lost after the script ran.
func TestSemaphoreEveryFailingSubset(t *testing.T) {
	const n, k = 5, 2
	kinds := map[string]fault{"down": failing, "lost reply": lostReply, "error reply": errorReply}
	for name, kind := range kinds {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, n)
			client := c.client(t)
			ctx := context.Background()
			for mask := 0; mask < 1<<n; mask++ {
				key := fmt.Sprintf("fail-%d", mask)
				s := mustSemaphore(t, client, key, k)
				working := n - bits.OnesCount(uint(mask))
				setFaults := func() {
					for i, p := range c.pools {
						if mask&(1<<i) != 0 {
							p.set(kind)
						} else {
							p.set(healthy)
						}
					}
				}
				heal := func() {
					for _, p := range c.pools {
						p.set(healthy)
					}
				}

				// Acquire.
				setFaults()
				p, err := s.TryAcquire(ctx, time.Minute)
				c.settle(t)
				heal()
				if working < 4 {
					require.ErrorIs(t, err, redlock.ErrNotObtained, "mask %05b", mask)
					failed := nodeErrors(err, nil)
					for i := range n {
						assert.Equal(t, mask&(1<<i) != 0, failed[i], "mask %05b: node %d named in %v", mask, i, err)
					}
					for i, ms := range c.members(key) {
						assert.Empty(t, ms, "mask %05b: node %d keeps a token of a failed acquisition", mask, i)
					}
				} else {
					require.NoError(t, err, "mask %05b", mask)
				}

				// Extend and Release of a permit held on every node.
				if p == nil {
					p, err = s.TryAcquire(ctx, time.Minute)
					require.NoError(t, err)
				}
				c.settle(t)
				setFaults()
				err = p.Extend(ctx, time.Minute)
				if working >= 4 {
					require.NoError(t, err, "Extend, mask %05b", mask)
				} else {
					require.ErrorIs(t, err, redlock.ErrNotObtained, "Extend, mask %05b", mask)
					assert.NotErrorIs(t, err, redlock.ErrLockLost, "failures prove no loss")
				}
				err = p.Unlock(ctx)
				c.settle(t)
				heal()
				if working >= 4 {
					require.NoError(t, err, "Release, mask %05b", mask)
				} else {
					require.Error(t, err, "Release, mask %05b", mask)
					assert.NotErrorIs(t, err, redlock.ErrLockLost, "failures prove no loss")
					require.NoError(t, p.Unlock(ctx), "a retry on healed nodes")
				}
				c.settle(t)
				if kind != errorReply && kind != failing {
					// A lost reply ran the removal: nothing is left.
					for i, ms := range c.members(key) {
						assert.Empty(t, ms, "mask %05b: node %d after Release", mask, i)
					}
				}
			}
		})
	}
}

// Only the holder can extend or release its permit: a token that is gone
// from the nodes (here removed by hand, as after a flush) is refused, with
// ErrLockLost, and the other holders' tokens are never touched.
func TestSemaphoreNonHolder(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t), "s", 2)
	ctx := context.Background()
	a, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	c.settle(t)
	scores := func(token string) []float64 {
		var out []float64
		for _, m := range c.nodes {
			sc, err := m.ZScore(redlock.SemaphoreKey("s"), "1:"+token)
			require.NoError(t, err)
			out = append(out, sc)
		}
		return out
	}
	before := scores(a.Value())
	for _, m := range c.nodes {
		_, err := m.ZRem(redlock.SemaphoreKey("s"), "1:"+b.Value())
		require.NoError(t, err)
	}

	err = b.Extend(ctx, time.Hour)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	err = b.Unlock(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	c.settle(t)
	assert.Equal(t, before, scores(a.Value()), "the holder's token is untouched")
	assert.Equal(t, 5, c.holding("s", a.Value()))
	assert.Zero(t, c.holding("s", b.Value()), "Extend revived a token that was gone")

	// A released permit is no longer held: it cannot be extended.
	require.NoError(t, a.Unlock(ctx))
	require.ErrorIs(t, a.Extend(ctx, time.Minute), redlock.ErrReleased)
	require.ErrorIs(t, a.Unlock(ctx), redlock.ErrReleased, "a second Release")
}

// Extend never shortens a token's expiry, lengthens it when asked for more,
// and keeps the set's own ttl at least its latest score.
func TestSemaphoreExtendNeverShortens(t *testing.T) {
	c := newCluster(t, 3)
	s := mustSemaphore(t, c.client(t), "s", 1)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	c.settle(t)
	score := func(i int) time.Time {
		sc, err := c.nodes[i].ZScore(redlock.SemaphoreKey("s"), "1:"+p.Value())
		require.NoError(t, err)
		return time.UnixMilli(int64(sc))
	}
	first := score(0)
	assert.WithinDuration(t, time.Now().Add(time.Minute), first, 5*time.Second, "score is the expiry on the node's clock")
	assert.InDelta(t, time.Minute.Seconds(), c.nodes[0].TTL(redlock.SemaphoreKey("s")).Seconds(), 5, "the set lives as long as its latest member")

	require.NoError(t, p.Extend(ctx, time.Second))
	c.settle(t)
	assert.Equal(t, first, score(0), "a shorter Extend shortened the token")
	assert.True(t, p.Until().Before(time.Now().Add(time.Second)), "Until follows the ttl asked for")

	require.NoError(t, p.Extend(ctx, time.Hour))
	c.settle(t)
	for i := range c.nodes {
		assert.WithinDuration(t, time.Now().Add(time.Hour), score(i), 5*time.Second, "node %d", i)
		assert.InDelta(t, time.Hour.Seconds(), c.nodes[i].TTL(redlock.SemaphoreKey("s")).Seconds(), 5, "node %d: the set's ttl follows its latest score", i)
	}
	require.NoError(t, p.Unlock(ctx))
}

// Expiry is judged by each node's clock inside the scripts: once the nodes'
// time passes the holders' scores, their tokens no longer count, are removed
// by the next acquisition, and cannot be extended.
func TestSemaphoreExpiredMembersRemoved(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t), "s", 2)
	ctx := context.Background()
	a, err := s.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	c.settle(t)
	b, err := s.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	c.settle(t)
	_, err = s.TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	c.settle(t)
	for _, m := range c.nodes {
		m.SetTime(time.Now().Add(2 * time.Second)) // TIME, as the scripts read it
	}
	// b is still valid on the client's clock, but not on the nodes': its
	// Extend is sent, refused, and must not revive it.
	require.True(t, time.Now().Before(b.Until()))
	err = b.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	c.settle(t)
	assert.Zero(t, c.holding("s", b.Value()), "Extend revived an expired token")
	p, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	c.settle(t)
	for i, ms := range c.members("s") {
		assert.Equal(t, []string{p.Value()}, ms, "node %d: expired tokens removed", i)
	}
	err = a.Extend(ctx, time.Minute)
	require.Error(t, err)
	assert.True(t, errors.Is(err, redlock.ErrExpired) || errors.Is(err, redlock.ErrNotObtained), "%v", err)
	assert.Zero(t, c.holding("s", a.Value()), "Extend revived an expired token")
	require.NoError(t, p.Unlock(ctx))
}

// Acquire waits for a permit to come free.
func TestSemaphoreAcquireWaits(t *testing.T) {
	c := newCluster(t, 3)
	s := mustSemaphore(t, c.client(t, redlock.WithTries(1000), redlock.WithRetryDelay(time.Millisecond, 3*time.Millisecond)), "s", 1)
	ctx := context.Background()
	held, err := s.Acquire(ctx, time.Minute)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		p, err := s.Acquire(ctx, time.Minute)
		if err == nil {
			err = p.Unlock(ctx)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v while the only permit was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, held.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire still waiting 5s after the permit was released")
	}

	// With the permit held, Acquire gives up when ctx ends, with ctx's error.
	held, err = s.Acquire(ctx, time.Minute)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(short, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, held.Unlock(ctx))
}

// Done closes when the permit's validity ends, not before, and at once on
// Release.
func TestSemaphorePermitDone(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t), "s", 2)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, 200*time.Millisecond)
	require.NoError(t, err)
	select {
	case <-p.Done():
		assert.False(t, time.Now().Before(p.Until()), "Done closed %v before Until", time.Until(p.Until()))
	case <-time.After(2 * time.Second):
		t.Fatal("Done not closed within 2s of a 200ms permit")
	}
	assert.Less(t, time.Since(p.Until()), 500*time.Millisecond, "Done closed long after Until")
	require.ErrorIs(t, p.Unlock(ctx), redlock.ErrExpired, "a permit released after its validity")

	p, err = s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	done := p.Done()
	require.NoError(t, p.Unlock(ctx))
	select {
	case <-done:
	default:
		t.Fatal("Done still open after Release")
	}
	assert.True(t, p.Until().IsZero())
}

// Semaphore.Do holds the permit while fn runs, extending it past several
// ttls, and releases it after.
func TestSemaphoreDoHolds(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t), "s", 2)
	// Long enough that a loaded 2-core machine still extends in time: each
	// extension is due ttl/3 after the last.
	const ttl = 600 * time.Millisecond
	var during int
	var held *redlock.Lock
	err := s.Do(context.Background(), ttl, func(ctx context.Context) error {
		held = redlock.HeldLock(ctx)
		if held == nil || !time.Now().Before(held.Until()) {
			return errors.New("no valid permit in fn's context")
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * ttl):
		}
		c.settle(t)
		for _, ms := range c.members("s") {
			during += len(ms)
		}
		return errors.New("fn's own error")
	})
	require.EqualError(t, err, "fn's own error")
	assert.Equal(t, 5, during, "the permit's token was on every node while fn ran")
	assert.True(t, held.Until().IsZero(), "released after Do")
	assert.Nil(t, redlock.HeldLock(context.Background()))
	c.settle(t)
	for i, ms := range c.members("s") {
		assert.Empty(t, ms, "node %d after Do", i)
	}
}

// When the nodes refuse an extension because the token is gone, Do cancels
// fn's context with ErrLockLost, and returns it.
func TestSemaphoreDoCancelsOnLoss(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t), "s", 2)
	const ttl = 3 * time.Second
	var cause error
	var lostAt time.Time
	err := s.Do(context.Background(), ttl, func(ctx context.Context) error {
		c.settle(t)
		lostAt = time.Now()
		for _, m := range c.nodes {
			m.FlushAll()
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(ttl + time.Second):
			return errors.New("fn's context never ended")
		}
		return nil
	})
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.ErrorIs(t, cause, redlock.ErrLockLost)
	assert.True(t, strings.Contains(cause.Error(), "refused"), "cause %v", cause)
	assert.Less(t, time.Since(lostAt), ttl/3+time.Second, "cancelled at the first refused extension, not at expiry")

	// Not acquired: fn does not run.
	full := mustSemaphore(t, c.client(t), "full", 1)
	p, err := full.TryAcquire(context.Background(), time.Minute)
	require.NoError(t, err)
	ran := false
	err = full.Do(context.Background(), time.Minute, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.False(t, ran)
	require.NoError(t, p.Unlock(context.Background()))
}

// Release right after Acquire, before the goroutine that sends one node's
// admission has even run: the removal reaches that node first, so the
// admission's goroutine must remove the token again once it returns, or the
// token would take a slot until its ttl.
func TestSemaphoreReleaseBeforeAdmissionIsSent(t *testing.T) {
	c := newCluster(t, 5)
	client := c.client(t)
	s := mustSemaphore(t, client, "unsent", 2)
	ctx := context.Background()
	warm, err := s.TryAcquire(ctx, time.Minute) // caches the scripts
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	c.settle(t)

	ran := make(chan string, 10)
	c.pools[4].onDone(func(cmd string) { ran <- cmd })
	held := make(chan struct{})
	undo := redlock.HoldNodeStart(client, 4, held)
	p, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	undo() // Release's goroutine for node 4 runs at once
	require.NoError(t, p.Unlock(ctx))
	require.Equal(t, "EVALSHA", <-ran, "the removal ran on node 4 first")
	close(held) // now node 4's admission goes out, after the removal
	c.settle(t)
	for i, ms := range c.members("unsent") {
		assert.Empty(t, ms, "node %d", i)
	}
}

// Acquire does not retry when so many nodes refuse the command itself that
// no quorum is possible: for K=2 on N=5, two such nodes already leave only
// three, fewer than the quorum of 4 (a majority would still be possible).
func TestSemaphoreHopelessNotRetried(t *testing.T) {
	c := newCluster(t, 5)
	s := mustSemaphore(t, c.client(t, redlock.WithTries(50)), "s", 2)
	c.pools[0].set(errorReply)
	c.pools[3].set(errorReply)
	before := c.gets()
	_, err := s.Acquire(context.Background(), time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.Contains(t, err.Error(), "not retried")
	// One attempt and its undo, each sent to 5 nodes and resent once after
	// NOSCRIPT: at most 20 batches, where 50 attempts would send hundreds.
	assert.LessOrEqual(t, c.gets()-before, 20)
}

// With an observe.Observer, every node's answer to each of a permit's rounds is
// reported, under one ID per round, with the semaphore's key and the
// round's Op; the semaphore reports no call-level events.
func TestSemaphoreObserverSeesNodes(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	s := mustSemaphore(t, c.client(t, redlock.WithObserver(rec)), "obs", 1)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	// Each round returns on a quorum; a straggler's first script on a node
	// is resent after NOSCRIPT, and the next round's may overtake it. Let
	// each round finish, so that every node agrees to every round.
	c.settle(t)
	require.NoError(t, p.Extend(ctx, time.Minute))
	c.settle(t)
	require.NoError(t, p.Unlock(ctx))
	c.settle(t)
	ids := map[observe.Op]map[uint64]int{}
	for _, e := range rec.kinds(observe.KindNode) {
		assert.Equal(t, "obs", e.Key)
		assert.Equal(t, observe.OutcomeAgreed, e.Outcome, "node %d, op %v: %v", e.Node, e.Op, e.Err)
		if ids[e.Op] == nil {
			ids[e.Op] = map[uint64]int{}
		}
		ids[e.Op][e.ID]++
	}
	for _, op := range []observe.Op{observe.OpAcquire, observe.OpExtend, observe.OpRelease} {
		require.Len(t, ids[op], 1, "one round of %v", op)
		for id, n := range ids[op] {
			assert.NotZero(t, id, "%v", op)
			assert.Equal(t, 3, n, "every node's answer to %v", op)
		}
	}
	// The call's own events, as for Lock, under the ID of its node events.
	acquired := rec.kinds(observe.KindAcquired)
	require.Len(t, acquired, 1)
	assert.Equal(t, "obs", acquired[0].Key)
	assert.Equal(t, 1, acquired[0].Try)
	assert.Equal(t, s.Quorum(), acquired[0].Quorum)
	assert.Contains(t, ids[observe.OpAcquire], acquired[0].ID, "the Acquired event's ID is its node events'")
	require.Len(t, rec.kinds(observe.KindAttempt), 1)
	assert.Empty(t, rec.kinds(observe.KindNotAcquired))

	// A refused TryAcquire reports NotAcquired.
	held, err := s.TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx, time.Minute)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	failed := rec.kinds(observe.KindNotAcquired)
	require.Len(t, failed, 1)
	assert.ErrorIs(t, failed[0].Err, redlock.ErrNotObtained)
	require.NoError(t, held.Unlock(ctx))
}

// Weighted permits on 1, 3 and 5 nodes, with an ended ctx, and on a closed
// Client: a weight that fills K leaves no room, a context that had ended
// sends nothing, and Close refuses before any network call.
func TestSemaphoreWeightedNodesAndEnds(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			c := newCluster(t, n)
			client := c.client(t)
			ctx := context.Background()
			full := mustSemaphore(t, client, "w", 3, redlock.AllowNoFaultTolerance(), redlock.WithWeight(3))
			one := mustSemaphore(t, client, "w", 3, redlock.AllowNoFaultTolerance())
			p, err := full.TryAcquire(ctx, time.Minute)
			require.NoError(t, err)
			_, err = one.TryAcquire(ctx, time.Minute)
			require.ErrorIs(t, err, redlock.ErrNotObtained, "weight 3 fills K=3")
			require.NoError(t, p.Unlock(ctx))
			c.settle(t)
			p, err = one.TryAcquire(ctx, time.Minute)
			require.NoError(t, err, "free again")
			require.NoError(t, p.Unlock(ctx))
			c.settle(t) // Unlock's stragglers, which would count below

			ended, cancel := context.WithCancel(ctx)
			cancel()
			before := c.gets()
			_, err = full.Acquire(ended, time.Minute)
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, redlock.ErrNotObtained)
			c.settle(t)
			assert.Equal(t, before, c.gets(), "an ended ctx sent something")

			require.NoError(t, client.Close())
			_, err = full.TryAcquire(ctx, time.Minute)
			require.ErrorIs(t, err, redlock.ErrClosed)
		})
	}
}

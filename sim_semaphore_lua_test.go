package redlock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
)

// The simulation's copies of the semaphore's scripts (simSemAcquire,
// simSemExtend, simSemRelease) against the Lua itself, run by miniredis:
// random calls on one key, weighted, unweighted and odd members ("0:t",
// "x:t", "02:t", no colon), tokens that repeat under other weights, members
// that expire while the key lives on, and time moving on between calls.
// After every call, both must have answered the same and hold the same
// members with the same scores, and the key must expire at the same
// instant. The simulation proves the library against the Go copies, so
// this is what ties it to the scripts that the nodes run. (The release's
// PUBLISH, a hint, is not compared: a node outside a simulated world has no
// subscribers.)
func TestSimSemaphoreScriptsMatchLua(t *testing.T) {
	m := miniredis.RunT(t)
	conn, err := redis.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const key = "redlock:sem:{k}"
	tokens := []string{"a", "b", "c", "d", "e"}
	prefixes := []string{"1:", "2:", "3:", "", "0:", "x:", "02:", "-1:", "10:"}
	steps := 1500
	if testing.Short() {
		steps = 400
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 21))
		m.FlushAll()
		// The node's clock stands still (rate 0) at epoch, half a
		// millisecond past a whole one, and both clocks move together.
		n := newSimNode(0)
		n.epoch = time.UnixMilli(1_700_000_000_000 + int64(seed)*1_000_000).Add(500 * time.Microsecond)
		m.SetTime(n.epoch)
		counts := map[string]int{}
		for step := range steps {
			member := prefixes[rng.IntN(len(prefixes))] + tokens[rng.IntN(len(tokens))]
			ttl := int64(1 + rng.IntN(40))
			var (
				op     string
				ka     []any
				script *script
				sim    func(*simNode, []any) (any, error)
			)
			switch rng.IntN(4) {
			case 0, 1:
				weight, _ := semSplit(member) // as the library sends it
				if rng.IntN(5) == 0 {
					weight = int64(1 + rng.IntN(3))
				}
				op, script, sim = "acquire", &semAcquireScript, simSemAcquire
				ka = []any{key, member, ttl, int64(1 + rng.IntN(4)), weight}
			case 2:
				op, script, sim = "extend", &semExtendScript, simSemExtend
				ka = []any{key, member, ttl}
			default:
				op, script, sim = "release", &semReleaseScript, simSemRelease
				ka = []any{key, member, []string{"", "ch"}[rng.IntN(2)]}
			}
			args := append([]any{script.src, 1}, ka...)
			want, err := redis.Int64(conn.Do("EVAL", args...))
			if err != nil {
				t.Fatalf("seed %d step %d: Lua %s %v: %v", seed, step, op, ka, err)
			}
			n.mu.Lock()
			got, err := sim(n, ka)
			n.mu.Unlock()
			if err != nil || got != want {
				t.Fatalf("seed %d step %d: %s %v: the Go copy replies %v (%v), the Lua %d", seed, step, op, ka, got, err, want)
			}
			counts[fmt.Sprintf("%s %d", op, want)]++
			compareZset(t, fmt.Sprintf("seed %d step %d, after %s %v", seed, step, op, ka), conn, m, n, key)
			if d := time.Duration(rng.IntN(12)) * time.Millisecond; d > 0 {
				n.epoch = n.epoch.Add(d)
				m.SetTime(n.epoch)
				m.FastForward(d)
			}
		}
		// Every reply of every script came up, or the comparison proves
		// less than it seems.
		for _, c := range []string{"acquire 0", "acquire 1", "acquire 2", "extend 0", "extend 1", "release 0", "release 1"} {
			if counts[c] == 0 {
				t.Errorf("seed %d: no %s in %d steps: %v", seed, c, steps, counts)
			}
		}
	}
}

// compareZset fails unless miniredis and the simulated node hold key with
// the same members and scores, expiring at the same instant.
func compareZset(t *testing.T, where string, conn redis.Conn, m *miniredis.Miniredis, n *simNode, key string) {
	t.Helper()
	flat, err := redis.Strings(conn.Do("ZRANGE", key, 0, -1, "WITHSCORES"))
	if err != nil {
		t.Fatalf("%s: ZRANGE: %v", where, err)
	}
	var want []string
	for i := 0; i < len(flat); i += 2 {
		want = append(want, flat[i]+" "+flat[i+1])
	}
	n.mu.Lock()
	z := n.zset(key)
	n.mu.Unlock()
	var got []string
	for member, score := range z.members {
		got = append(got, member+" "+strconv.FormatInt(score, 10))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: the Go copy holds %q, the Lua %q", where, got, want)
	}
	var wantExp time.Time
	if ttl := m.TTL(key); ttl > 0 {
		wantExp = n.epoch.Add(ttl)
	}
	if len(want) > 0 && !z.expires.Equal(wantExp) {
		t.Fatalf("%s: the Go copy's key expires at %v, the Lua's at %v", where, z.expires, wantExp)
	}
}

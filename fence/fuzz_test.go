package fence_test

// Fuzz targets for the resource side of fencing, Guard and Set,
// against a reference model. Each runs its seeds as an ordinary test; to
// fuzz one:
//
//	go test -run '^$' -fuzz '^FuzzGuard$' -fuzztime 60s .

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/fence"
	"github.com/quorumlock/redlock/redigo"
)

// A fenceOp is one write attempt at a fenced resource.
type fenceOp struct {
	token uint64
	fail  bool // the write itself fails
	bare  bool // Guard.Do with a nil write
}

// decodeFenceOps reads a sequence of write attempts: each is a byte whose
// low two bits say how the write behaves and whose next bit picks the token:
// small (the byte's top five bits, so tokens repeat and 0 comes up) or the
// next eight bytes, big-endian, masked to maxToken.
func decodeFenceOps(data []byte, maxToken uint64) []fenceOp {
	var ops []fenceOp
	for len(data) > 0 {
		h := data[0]
		data = data[1:]
		op := fenceOp{token: uint64(h >> 3), fail: h&3 == 1, bare: h&3 == 2}
		if h&4 != 0 && len(data) >= 8 {
			op.token = binary.BigEndian.Uint64(data) & maxToken
			data = data[8:]
		}
		ops = append(ops, op)
	}
	return ops
}

// fenceModel is the reference: a write is admitted iff its token is not 0
// and at least the highest admitted so far, and an admitted token is
// recorded whether or not the write succeeds.
type fenceModel struct{ highest uint64 }

func (m *fenceModel) admit(token uint64) bool {
	if token == 0 || token < m.highest {
		return false
	}
	m.highest = token
	return true
}

func addFenceSeeds(f *testing.F) {
	big := func(h byte, token uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{h | 4}, token)
	}
	f.Add([]byte{})
	f.Add([]byte{3 << 3, 3 << 3, 5 << 3, 4 << 3, 0, 6<<3 | 1, 5 << 3, 6 << 3}) // TestGuard's sequence
	f.Add([]byte{1 << 3, 2<<3 | 1, 1 << 3, 2<<3 | 2, 3<<3 | 1, 3 << 3, 2 << 3})
	f.Add([]byte{31 << 3, 30 << 3, 31<<3 | 2, 0, 0, 1 << 3})
	f.Add(append(big(0, 1<<53), big(1, 1<<53-1)...))
	f.Add(append(append(big(0, 1<<40), 7<<3), big(2, 1<<40)...))
	f.Add(append(big(0, ^uint64(0)), big(0, ^uint64(0)-1)...))
}

// Guard admits, refuses and records tokens exactly as the model does, runs a
// write only when it admits its token, returns the write's error, and keeps
// to the model under concurrent use too.
func FuzzGuard(f *testing.F) {
	addFenceSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := decodeFenceOps(data, ^uint64(0))
		var (
			g     fence.Guard
			model fenceModel
			boom  = errors.New("write failed")
		)
		for i, op := range ops {
			ran := false
			var write func() error
			if !op.bare {
				write = func() error {
					ran = true
					if op.fail {
						return boom
					}
					return nil
				}
			}
			err := g.Do(op.token, write)
			admitted := model.admit(op.token)
			switch {
			case op.token == 0 && !errors.Is(err, redlock.ErrInvalid),
				op.token != 0 && !admitted && !errors.Is(err, fence.ErrStale),
				admitted && op.fail && !op.bare && !errors.Is(err, boom),
				admitted && (!op.fail || op.bare) && err != nil:
				t.Fatalf("op %d, token %d (highest %d): Do = %v", i, op.token, model.highest, err)
			}
			if ran != (admitted && !op.bare) {
				t.Fatalf("op %d, token %d: write ran %v, want %v", i, op.token, ran, admitted && !op.bare)
			}
			if g.Highest() != model.highest {
				t.Fatalf("op %d, token %d: Highest = %d, want %d", i, op.token, g.Highest(), model.highest)
			}
		}

		// Concurrently: the writes that run do so in non-decreasing token
		// order, one at a time, and the largest token is always admitted.
		var (
			cg      fence.Guard
			mu      sync.Mutex
			written []uint64
			inside  atomic.Int32
			wg      sync.WaitGroup
			largest uint64
		)
		for _, op := range ops {
			largest = max(largest, op.token)
			wg.Go(func() {
				_ = cg.Do(op.token, func() error {
					if inside.Add(1) != 1 {
						t.Errorf("two writes ran at once")
					}
					mu.Lock()
					written = append(written, op.token)
					mu.Unlock()
					inside.Add(-1)
					return nil
				})
			})
		}
		wg.Wait()
		for i := 1; i < len(written); i++ {
			if written[i] < written[i-1] {
				t.Fatalf("concurrent writes ran with token %d after %d", written[i], written[i-1])
			}
		}
		if cg.Highest() != largest {
			t.Fatalf("after concurrent writes, Highest = %d, want the largest token %d", cg.Highest(), largest)
		}
	})
}

// Set stores a value and refuses a token exactly as the model does,
// for every token up to 2^53: Redis Lua compares tokens as doubles, which
// docs/fencing.md states as the limit.
func FuzzSet(f *testing.F) {
	addFenceSeeds(f)
	m := miniredis.RunT(f)
	pool := redigo.NewPool(m.Addr())
	f.Cleanup(func() { pool.Close() })
	var run atomic.Int64
	const maxToken = 1<<53 - 1
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := decodeFenceOps(data, maxToken)
		conn := pool.Get()
		defer conn.Close()
		ctx := context.Background()
		key := "doc:" + strconv.FormatInt(run.Add(1), 10) // a resource of its own
		var model fenceModel
		stored := ""
		for i, op := range ops {
			value := "v" + strconv.Itoa(i)
			err := fence.Set(ctx, pool, key, op.token, value)
			admitted := model.admit(op.token)
			switch {
			case op.token == 0 && !errors.Is(err, redlock.ErrInvalid),
				op.token != 0 && !admitted && !errors.Is(err, fence.ErrStale),
				admitted && err != nil:
				t.Fatalf("op %d, token %d (highest %d): Set = %v", i, op.token, model.highest, err)
			}
			if admitted {
				stored = value
			}
			got, err := redis.String(conn.Do("GET", key))
			if errors.Is(err, redis.ErrNil) {
				err = nil
			}
			if err != nil || got != stored {
				t.Fatalf("op %d, token %d: the resource holds %q (%v), want %q", i, op.token, got, err, stored)
			}
		}
	})
}

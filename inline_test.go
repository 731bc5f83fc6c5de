package redlock

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// goid returns the calling goroutine's ID, from the first line of its stack
// trace ("goroutine 7 [running]:").
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// scriptedPool answers SET with OK and scripts with 1, and records the
// goroutine each Exec ran on and the commands it saw. With hang set, it
// waits instead, until ctx ends if honour is set, or until release closes.
type scriptedPool struct {
	honour  bool // HonorsDeadline's answer
	hang    bool
	release chan struct{}

	mu    sync.Mutex
	goids []uint64
	cmds  []string
}

func (p *scriptedPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.mu.Lock()
	p.goids = append(p.goids, goid())
	for _, c := range cmds {
		p.cmds = append(p.cmds, c.Name)
	}
	p.mu.Unlock()
	if p.hang {
		if p.honour {
			<-ctx.Done()
			return ctx.Err()
		}
		<-p.release
		return errors.New("released")
	}
	for i, c := range cmds {
		if c.Name == "SET" {
			replies[i] = driver.Reply{Value: "OK"}
		} else {
			replies[i] = driver.Reply{Value: int64(1)}
		}
	}
	return nil
}

func (p *scriptedPool) seen() (goids []uint64, cmds []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint64(nil), p.goids...), append([]string(nil), p.cmds...)
}

// honouringPool is a scriptedPool that declares DeadlineHonorer.
type honouringPool struct{ *scriptedPool }

func (p honouringPool) HonorsDeadline() bool { return p.honour }

// A round runs on the caller's goroutine only with one node whose Pool
// declares that it honours deadlines, and reports true.
func TestInlineOnlyForDeadlineHonorers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pools  func() []*scriptedPool
		wrap   bool // as honouringPool
		inline bool
	}{
		{"N=1 honours", func() []*scriptedPool { return []*scriptedPool{{honour: true}} }, true, true},
		{"N=1 reports false", func() []*scriptedPool { return []*scriptedPool{{honour: false}} }, true, false},
		{"N=1 no capability", func() []*scriptedPool { return []*scriptedPool{{honour: true}} }, false, false},
		{"N=3 honour", func() []*scriptedPool {
			return []*scriptedPool{{honour: true}, {honour: true}, {honour: true}}
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sps := tc.pools()
			pools := make([]Pool, len(sps))
			for i, sp := range sps {
				pools[i] = sp
				if tc.wrap {
					pools[i] = honouringPool{sp}
				}
			}
			c, err := New(pools)
			if err != nil {
				t.Fatal(err)
			}
			me := goid()
			l, err := c.TryLock(context.Background(), "k", time.Minute)
			if err != nil {
				t.Fatalf("TryLock: %v", err)
			}
			if err := l.Unlock(context.Background()); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if err := c.Close(); err != nil { // waits for the nodes a majority left behind
				t.Fatal(err)
			}
			for i, sp := range sps {
				goids, cmds := sp.seen()
				// With N=3 a SET that the release overtook is undone
				// once more (round.overtaken).
				if len(goids) < 2 {
					t.Fatalf("node %d: %d batches (%v), want the SET and the release", i, len(goids), cmds)
				}
				for _, g := range goids {
					if (g == me) != tc.inline {
						t.Errorf("node %d: Exec on the caller's goroutine = %v, want %v", i, g == me, tc.inline)
					}
				}
			}
		})
	}
}

// An inline round is bounded by the node timeout when its Pool honours ctx
// as it promised, and a lost acquisition still sends its undo, also bounded.
func TestInlineRoundBoundedByHonouringPool(t *testing.T) {
	sp := &scriptedPool{honour: true, hang: true}
	const timeout = 100 * time.Millisecond
	c, err := New([]Pool{honouringPool{sp}}, WithNodeTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	me := goid()
	start := time.Now()
	_, err = c.TryLock(context.Background(), "k", time.Second)
	d := time.Since(start)
	if !errors.Is(err, ErrNodeTimeout) || !errors.Is(err, ErrNotObtained) {
		t.Errorf("err = %v, want ErrNotObtained with ErrNodeTimeout", err)
	}
	// One node timeout for the SET, one for its undo (the SET failed, so
	// it may have landed), and slack for a loaded machine under -race.
	if d < 2*timeout || d > 2*timeout+500*time.Millisecond {
		t.Errorf("took %v, want about %v", d, 2*timeout)
	}
	goids, cmds := sp.seen()
	if len(cmds) != 2 || cmds[0] != "SET" || cmds[1] != "EVALSHA" {
		t.Errorf("commands = %v, want the SET, then its undo", cmds)
	}
	for _, g := range goids {
		if g != me {
			t.Errorf("Exec ran on goroutine %d, not the caller's (%d)", g, me)
		}
	}
}

// The inline path keeps fanout's ctx rule: a ctx that ends during the round
// makes it lost with ctx.Err() among the causes, even if the node agreed,
// and the node's SET is undone.
func TestInlineRoundLostWhenCtxEnds(t *testing.T) {
	sp := &scriptedPool{honour: true}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	pool := cancellingPool{honouringPool{sp}, func() { once.Do(cancel) }}
	c, err := New([]Pool{pool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.TryLock(ctx, "k", time.Minute)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
		t.Errorf("err = %v, want ErrNotObtained with context.Canceled", err)
	}
	if _, cmds := sp.seen(); len(cmds) != 2 || cmds[1] != "EVALSHA" {
		t.Errorf("commands = %v, want the SET, then its undo", cmds)
	}
}

// cancellingPool calls cancel once it has answered its first batch.
type cancellingPool struct {
	honouringPool
	cancel func()
}

func (p cancellingPool) Exec(ctx context.Context, cmds []driver.Command, replies []driver.Reply) error {
	err := p.honouringPool.Exec(ctx, cmds, replies)
	p.cancel()
	return err
}

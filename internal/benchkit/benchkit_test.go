package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pairedRounds rotates the order of the ops from round to round, gives
// each slice keys of its own, and computes each op's rate and each later
// op's per-round ratios to the first, leaving out a round in which the
// first succeeded not once.
func TestPairedRounds(t *testing.T) {
	counts := [][]int64{ // successes by op, then round
		{100, 100, 0, 100},
		{50, 200, 30, 75},
	}
	var (
		order    []string // "round:op", in the order the slices ran
		prefixes = map[string]bool{}
	)
	fake := func(op Op, prefix string, k int, warm, run time.Duration) int64 {
		if prefixes[prefix] {
			t.Errorf("prefix %q given twice", prefix)
		}
		prefixes[prefix] = true
		f := strings.Split(strings.TrimSuffix(prefix, ":"), ":")
		round, i := f[len(f)-2], f[len(f)-1]
		order = append(order, round+":"+i)
		var r, o int
		fmt.Sscan(round, &r)
		fmt.Sscan(i, &o)
		return counts[o][r]
	}
	nop := func(context.Context, string) error { return nil }
	res := pairedRounds(4, "p:", []Op{nop, nop}, 2, time.Millisecond, 2*time.Second, fake)

	if want := []string{"0:0", "0:1", "1:1", "1:0", "2:0", "2:1", "3:1", "3:0"}; !slices.Equal(order, want) {
		t.Errorf("slices ran in the order %v, want %v", order, want)
	}
	if want := []float64{300.0 / 8, 355.0 / 8}; !slices.Equal(res.okPerSec, want) {
		t.Errorf("okPerSec = %v, want %v (successes over rounds × run)", res.okPerSec, want)
	}
	if want := []float64{0.5, 2, 0.75}; !slices.Equal(res.ratios[1], want) {
		t.Errorf("ratios = %v, want %v", res.ratios[1], want)
	}
	if got := median(res.ratios[1]); got != 0.75 {
		t.Errorf("median = %v, want 0.75", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		vs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{4, 1}, 2.5},
		{[]float64{5, 1, 3}, 3},
		{[]float64{8, 1, 2, 4}, 3},
	} {
		in := slices.Clone(tc.vs)
		if got := median(in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.vs, got, tc.want)
		}
		if !slices.Equal(in, tc.vs) {
			t.Errorf("median reordered its input: %v", in)
		}
	}
}

// runSlice counts only the calls that succeed within its window: not
// those of its warm-up, nor failures; and its keys are distinct.
func TestRunSlice(t *testing.T) {
	var (
		mu    sync.Mutex
		seen  = map[string]bool{}
		dup   string
		total atomic.Int64 // successes, counted or not
		calls atomic.Int64
	)
	op := func(ctx context.Context, key string) error {
		mu.Lock()
		if seen[key] && dup == "" {
			dup = key
		}
		seen[key] = true
		mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		if calls.Add(1)%3 != 0 {
			return errors.New("refused") // two calls in three
		}
		total.Add(1)
		return nil
	}
	// The warm-up is twice the window: about a third of the successes
	// fall in the window, and counting the warm-up's too would count
	// nearly all, as counting failures would count more than all.
	n := runSlice(op, "s:", 4, 80*time.Millisecond, 40*time.Millisecond)
	if n <= 0 || n > total.Load()*3/4 {
		t.Errorf("counted %d of %d successes: want some, and not those of the warm-up or failures", n, total.Load())
	}
	if dup != "" {
		t.Errorf("key %q given twice", dup)
	}
}

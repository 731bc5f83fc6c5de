package benchkit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// Paired counts only the operations that succeed, rotates the order of the
// ops, gives every op distinct keys, and reports each later op's ratio to
// the first.
func TestPaired(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		dup  string
	)
	record := func(key string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[key] && dup == "" {
			dup = key
		}
		seen[key] = true
	}
	ok := func(ctx context.Context, key string) error {
		record(key)
		time.Sleep(100 * time.Microsecond)
		return nil
	}
	fails := func(ctx context.Context, key string) error {
		record(key)
		time.Sleep(100 * time.Microsecond)
		return errors.New("refused")
	}
	first := map[string]string{} // each round's first op: the key's third field from the end
	track := func(name string, op Op) Op {
		return func(ctx context.Context, key string) error {
			f := strings.Split(key, ":")
			mu.Lock()
			if round := strings.Join(f[:len(f)-2], ":"); first[round] == "" {
				first[round] = name
			}
			mu.Unlock()
			return op(ctx, key)
		}
	}
	res := testing.Benchmark(func(b *testing.B) {
		Paired(b, []string{"a", "b"}, []Op{track("a", ok), track("b", fails)}, 2, 2*time.Millisecond, 10*time.Millisecond)
	})
	if res.N < 2 {
		t.Fatalf("%d rounds", res.N)
	}
	if res.Extra["okops/s-a"] <= 0 {
		t.Errorf("okops/s-a = %v, want > 0", res.Extra["okops/s-a"])
	}
	if got := res.Extra["okops/s-b"]; got != 0 {
		t.Errorf("okops/s-b = %v for an op that always fails, want 0", got)
	}
	if got, ok := res.Extra["xb-p50"]; !ok || got != 0 {
		t.Errorf("xb-p50 = %v (reported %v), want 0", got, ok)
	}
	if dup != "" {
		t.Errorf("key %q given twice", dup)
	}
	a, b := 0, 0
	for _, name := range first {
		if name == "a" {
			a++
		} else {
			b++
		}
	}
	if a == 0 || b == 0 {
		t.Errorf("first in a round: a %d times, b %d times; want both", a, b)
	}
}

package main

import (
	"strings"
	"testing"
)

const fixture = `goos: linux
BenchmarkParallel/N=5/p=32/impl=redlock-2   100  1 ns/op  6000 ops/s
BenchmarkParallel/N=5/p=32/impl=redlock-2   100  1 ns/op  5000 ops/s
BenchmarkParallel/N=5/p=32/impl=redsync-2   100  1 ns/op  1000 ops/s
BenchmarkParallel/N=5/p=32/impl=redsync-2   100  1 ns/op  1500 ops/s
BenchmarkUncontended/N=5/impl=redlock-2     100  900 ns/op
BenchmarkUncontended/N=5/impl=redsync-2     100  1000 ns/op
BenchmarkCeiling/N=5/impl=servers-2         1    1 ns/op  100000 ceiling-locks/s
BenchmarkCeiling/N=5/callers=512/impl=redlock-2  100  1 ns/op  15000 okops/s  0.15 of-ceiling
BenchmarkDrivers/driver=rueidis/N=5/p=32/impl=redlock-2  100  1 ns/op  4500 ops/s
BenchmarkDrivers/driver=rueidis/N=5/p=32/impl=redlock-2  100  1 ns/op  3700 ops/s
BenchmarkDrivers/driver=rueidis/N=5/p=32/impl=redsync-2  100  1 ns/op  1000 ops/s
BenchmarkDrivers/driver=rueidis/N=5/p=32/impl=redsync-2  100  1 ns/op  1000 ops/s
BenchmarkDrivers/driver=goredis/N=5/p=32/impl=redlock-2  100  1 ns/op  6000 ops/s
BenchmarkDrivers/driver=goredis/N=5/p=32/impl=redsync-2  100  1 ns/op  1000 ops/s
BenchmarkPaired/driver=valkeygo/N=5/p=32-2  8  1 ns/op  5.5 xredlock-p50  4.5 xredlock-min
BenchmarkPaired/driver=valkeygo/N=5/p=32-2  8  1 ns/op  4.5 xredlock-p50  3.5 xredlock-min
BenchmarkPaired/driver=valkeygo/N=5/p=32-2  8  1 ns/op  5.7 xredlock-p50  4.9 xredlock-min
BenchmarkPaired/redislock/N=1/serial-2  8  1 ns/op  0.8 xredlock-p50  0.7 xredlock-min
BenchmarkPaired/driver=goredis/N=5/p=32-2  8  1 ns/op  0 xredlock-p50  0 xredlock-min
BenchmarkHandover/N=5/w=2/hold=3ms/impl=redlock-2  400  1 ns/op  600 handover-p50-µs  100 rtt-p50-µs  200 won-round-p50-µs
BenchmarkHandover/N=5/w=2/hold=3ms/impl=redlock-2  400  1 ns/op  500 handover-p50-µs  100 rtt-p50-µs  200 won-round-p50-µs
`

// Each target gets its ratio of medians and its verdict: met, missed, or
// not measured.
func TestReport(t *testing.T) {
	rs, err := parse(strings.NewReader(fixture), "fixture")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	report(&out, rs, rs, 0, 0)
	got := out.String()
	for _, want := range [][]string{
		{"64 goroutines, N=5: ops/s against redsync (p=32)", "4.400× (target ≥ 5.00×)", "MISSED"},
		{"64 goroutines, N=5: worst repetition", "3.333× (target ≥ 4.00×)", "MISSED"},
		{"512 callers, N=5: fraction of the servers' ceiling", "15.0% (target ≥ 20%)", "MISSED"},
		{"uncontended, N=5: time against redsync", "0.900× (target ≤ 0.85×)", "MISSED"},
		{"64 callers, N=5: ops/s against redsync (sweep)", "not measured"},
		{"hand-over, one waiter: round trips (PING rounds)", "5.500× (target ≤ 3.00×)", "MISSED"},
		{"hand-over, one waiter: round trips (the run's SET rounds)", "2.750× (target ≤ 3.00×)", "met"},
		{"hand-over, 8 workers, to a waiter: round trips (PING rounds)", "not measured"},
		{"rueidis at 64 goroutines: ops/s against redsync on rueidis", "4.100× (target ≥ 5.00×)", "MISSED"},
		{"rueidis at 64 goroutines: worst repetition", "3.700× (target ≥ 4.00×)", "MISSED"},
		{"goredis at 64 goroutines: ops/s against redsync on goredis", "6.000× (target ≥ 5.00×)", "met"},
		{"goredis at 64 goroutines: worst repetition", "6.000× (target ≥ 4.00×)", "met"},
		{"redigo at 64 goroutines: ops/s against redsync on redigo", "not measured"},
		{"valkeygo at 64 goroutines, paired rounds: median against redsync", "5.500× (target ≥ 5.00×)", "met", "3 repetitions"},
		{"valkeygo at 64 goroutines, paired rounds: lowest round", "3.500× (target ≥ 4.00×)", "MISSED"},
		{"rueidis at 64 goroutines, paired rounds: median against redsync", "not measured"},
		{"N=1, go-redis, paired rounds: time against bsm/redislock", "1.250× (target ≤ 1.00×)", "MISSED"},
		{"goredis at 64 goroutines, paired rounds: median against redsync", "0.000× (target ≥ 5.00×)", "MISSED"},
		{"11 of 29 targets missed"},
	} {
		found := false
		for _, line := range strings.Split(got, "\n") {
			ok := true
			for _, part := range want {
				ok = ok && strings.Contains(line, part)
			}
			found = found || ok
		}
		if !found {
			t.Errorf("report lacks a line with %q:\n%s", want, got)
		}
	}
}

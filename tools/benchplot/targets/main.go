// Command targets prints each throughput and latency target of
// docs/benchmarks.md (issue 22) with the ratio measured in one make bench
// run, and says which are met and which are missed. It reads the results
// go test -bench wrote (root.bench.txt, peer.bench.txt) and, for the
// servers' ceiling, the output of redis-benchmark -P 16 -t set -q run on
// every node at once.
//
//	go run ./targets -root root.bench.txt -peer peer.bench.txt -ceiling ceiling.txt
//
// Each ratio is of medians over the run's -count repetitions. The exit
// status is 0 even when a target is missed: the report is the result.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// results maps a benchmark's full name, without the -GOMAXPROCS suffix, to
// each unit's values over the repetitions.
type results map[string]map[string][]float64

func read(name string) (results, error) {
	out := results{}
	if name == "" {
		return out, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f, name)
}

var procs = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader, name string) (results, error) {
	out := results{}
	rd := benchfmt.NewReader(r, name)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		full := strings.TrimPrefix(procs.ReplaceAllString(string(res.Name.Full()), ""), "Benchmark")
		if out[full] == nil {
			out[full] = map[string][]float64{}
		}
		for _, v := range res.Values {
			unit := v.Unit
			if unit == "ns/op" { // benchfmt keeps the unit as written
				unit, v.Value = "sec/op", v.Value/1e9
			}
			out[full][unit] = append(out[full][unit], v.Value)
		}
	}
	return out, rd.Err()
}

// median returns the median of name's unit, and whether there is one.
func (r results) median(name, unit string) (float64, bool) {
	vs := slices.Clone(r[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}

// okRate is name's successful operations per second: ops/s × (1 − fails/op).
func (r results) okRate(name string) (float64, bool) {
	ops, ok := r.median(name, "ops/s")
	if !ok {
		return 0, false
	}
	fails, _ := r.median(name, "fails/op")
	return ops * (1 - fails), true
}

// ceiling sums the requests per second of every "SET: N requests per
// second" line (redis-benchmark -q), one per node, and divides by 10: a
// Lock+Unlock at N=5 costs ten commands.
func ceiling(name string) (float64, int, error) {
	if name == "" {
		return 0, 0, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	line := regexp.MustCompile(`SET: ([0-9.]+) requests per second`)
	var sum float64
	nodes := 0
	sc := bufio.NewScanner(f)
	sc.Split(scanCRLF)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				return 0, 0, err
			}
			sum += v
			nodes++
		}
	}
	return sum / 10, nodes, sc.Err()
}

// scanCRLF splits at '\n' and '\r', since redis-benchmark redraws its
// progress line with carriage returns.
func scanCRLF(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		if b == '\n' || b == '\r' {
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// A target is one line of the report: a measured ratio against a bound.
type target struct {
	name    string
	ratio   float64
	ok      bool // the inputs were there
	atLeast bool // the bound is a floor (≥), not a ceiling (≤)
	percent bool // a fraction, printed as a percentage
	bound   float64
	detail  string
}

func (t target) String() string {
	if !t.ok {
		return fmt.Sprintf("%-58s  not measured in this run", t.name)
	}
	cmp, met := "≤", t.ratio <= t.bound
	if t.atLeast {
		cmp, met = "≥", t.ratio >= t.bound
	}
	verdict := "met"
	if !met {
		verdict = "MISSED"
	}
	if t.percent {
		return fmt.Sprintf("%-58s  %6.1f%% (target %s %.0f%%)  %-6s  %s", t.name, 100*t.ratio, cmp, 100*t.bound, verdict, t.detail)
	}
	return fmt.Sprintf("%-58s  %6.3f× (target %s %.2f×)  %-6s  %s", t.name, t.ratio, cmp, t.bound, verdict, t.detail)
}

// ratio is a/b for two medians, with a detail line naming them.
func ratio(ra results, a string, rb results, b, unit string) (float64, bool, string) {
	x, okx := ra.median(a, unit)
	y, oky := rb.median(b, unit)
	if !okx || !oky || y == 0 {
		return 0, false, ""
	}
	return x / y, true, fmt.Sprintf("%s %.4g against %.4g", unit, x, y)
}

// worst is the lowest of a's values of unit over b's, paired in the order
// of the repetitions ("never below 4× in any run"), and how many pairs
// there were.
func worst(r results, a, b, unit string) (float64, int) {
	mine, theirs := r[a][unit], r[b][unit]
	n := min(len(mine), len(theirs))
	w := 0.0
	for i := range n {
		if q := mine[i] / theirs[i]; i == 0 || q < w {
			w = q
		}
	}
	return w, n
}

// lowest is the lowest of name's values of unit over its repetitions.
func lowest(r results, name, unit string) (float64, bool) {
	vs := r[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	return slices.Min(vs), true
}

// inUnits is name's unit over its yardstick unit, both medians of the same
// benchmark: a hand-over in round trips.
func inUnits(r results, name, unit, yardstick string) (float64, bool, string) {
	x, okx := r.median(name, unit)
	y, oky := r.median(name, yardstick)
	if !okx || !oky || y == 0 {
		return 0, false, ""
	}
	return x / y, true, fmt.Sprintf("%s %.4g against %s %.4g", unit, x, yardstick, y)
}

func report(w io.Writer, root, peer results, ceil float64, nodes int) {
	var ts []target
	add := func(name string, atLeast bool, bound, r float64, ok bool, detail string) {
		ts = append(ts, target{name: name, ratio: r, ok: ok, atLeast: atLeast, bound: bound, detail: detail})
	}

	r, ok, d := ratio(peer, "Parallel/N=5/p=32/impl=redlock", peer, "Parallel/N=5/p=32/impl=redsync", "ops/s")
	add("64 goroutines, N=5: ops/s against redsync (p=32)", true, 5, r, ok, d)
	r, ok, d = ratio(peer, "Sweep/N=5/callers=64/impl=redlock", peer, "Sweep/N=5/callers=64/impl=redsync", "ops/s")
	add("64 callers, N=5: ops/s against redsync (sweep)", true, 5, r, ok, d)
	if w, n := worst(peer, "Parallel/N=5/p=32/impl=redlock", "Parallel/N=5/p=32/impl=redsync", "ops/s"); n > 0 {
		add("64 goroutines, N=5: worst repetition against redsync", true, 4, w, true, fmt.Sprintf("%d repetitions, paired in order", n))
	}
	// The same targets for each adapter, against redsync through its own
	// adapter for the same client (BenchmarkDrivers).
	for _, d := range []string{"redigo", "goredis", "rueidis", "valkeygo"} {
		mine, theirs := "Drivers/driver="+d+"/N=5/p=32/impl=redlock", "Drivers/driver="+d+"/N=5/p=32/impl=redsync"
		r, ok, detail := ratio(peer, mine, peer, theirs, "ops/s")
		add(d+" at 64 goroutines: ops/s against redsync on "+d, true, 5, r, ok, detail)
		w, n := worst(peer, mine, theirs, "ops/s")
		add(d+" at 64 goroutines: worst repetition", true, 4, w, n > 0, fmt.Sprintf("%d repetitions, paired in order", n))
	}

	// The same, paired in time (BenchmarkPaired): each repetition is b.N
	// rounds of redsync and redlock in alternate slices (0.3 s counted of
	// each), so that a change of the machine's speed between two cases
	// does not enter their ratio. The median of the repetitions' median
	// rounds, and the lowest single round of all, which is noisier than a
	// repetition of a sequential case and falls as rounds are added.
	for _, d := range []string{"redigo", "goredis", "rueidis", "valkeygo"} {
		name := "Paired/driver=" + d + "/N=5/p=32"
		r, ok := peer.median(name, "xredlock-p50")
		add(d+" at 64 goroutines, paired rounds: median against redsync", true, 5, r, ok,
			fmt.Sprintf("%d repetitions", len(peer[name]["xredlock-p50"])))
		w, okw := lowest(peer, name, "xredlock-min")
		add(d+" at 64 goroutines, paired rounds: lowest round", true, 4, w, okw, "one round: a slice of 0.3 s of each")
	}

	// The ceiling and the 512 callers from the same nodes (BenchmarkCeiling),
	// or else the sweep against a ceiling measured apart (-ceiling).
	if frac, okf := peer.median("Ceiling/N=5/callers=512/impl=redlock", "of-ceiling"); okf {
		rate, _ := peer.median("Ceiling/N=5/callers=512/impl=redlock", "okops/s")
		c, _ := peer.median("Ceiling/N=5/impl=servers", "ceiling-locks/s")
		add("512 callers, N=5: fraction of the servers' ceiling", true, 0.20, frac, true,
			fmt.Sprintf("%.0f successful locks/s against a ceiling of %.0f (BenchmarkCeiling)", rate, c))
	} else {
		ok512, okm := peer.okRate("Sweep/N=5/callers=512/impl=redlock")
		detail := ""
		if okm && ceil > 0 {
			detail = fmt.Sprintf("%.0f successful locks/s against a ceiling of %.0f (%d nodes' SET -P 16 / 10)", ok512, ceil, nodes)
		}
		add("512 callers, N=5: fraction of the servers' ceiling", true, 0.20, ok512/max(ceil, 1), okm && ceil > 0, detail)
	}

	r, ok, d = ratio(peer, "Uncontended/N=5/impl=redlock", peer, "Uncontended/N=5/impl=redsync", "sec/op")
	add("uncontended, N=5: time against redsync", false, 0.85, r, ok, d)
	r, ok, d = ratio(peer, "Redislock/N=1/serial/impl=redlock", peer, "Redislock/N=1/serial/impl=redislock", "sec/op")
	add("N=1, go-redis: time against bsm/redislock", false, 1.0, r, ok, d)
	// Paired in time: redlock's ops/s over redislock's per round, as time.
	// A median of zero (redlock never succeeded) is an infinite time.
	x, okx := peer.median("Paired/redislock/N=1/serial", "xredlock-p50")
	add("N=1, go-redis, paired rounds: time against bsm/redislock", false, 1.0, 1/x, okx,
		fmt.Sprintf("median round: redlock %.3f× redislock's ops/s", x))
	r, ok, d = ratio(root, "Parallel/N=1/p=1/impl=floor", root, "Parallel/N=1/p=1/impl=redlock", "ops/s")
	add("two goroutines, one node: floor's ops/s over ours", false, 1.10, r, ok, d)
	r, ok, d = ratio(peer, "Handover/N=5/w=8/impl=redlock", peer, "Handover/N=5/w=8/impl=redsync", "handovers/s")
	add("hand-over under contention: against redsync", true, 5, r, ok, d)
	r, ok, d = ratio(peer, "Handover/N=5/w=8/impl=redlock", peer, "Handover/N=5/w=8/impl=redsync", "wait-p99-µs")
	add("hand-over under contention: p99 wait against redsync", false, 0.25, r, ok, d)

	// Release to the next grant in 3 round trips (release, notice, SET
	// round): with one waiter, against one PING round to the nodes and
	// against the run's own winning SET round; and with eight workers, for
	// the grants to a worker that was already waiting.
	const lone = "Handover/N=5/w=2/hold=3ms/impl=redlock"
	r, ok, d = inUnits(peer, lone, "handover-p50-µs", "rtt-p50-µs")
	add("hand-over, one waiter: round trips (PING rounds)", false, 3, r, ok, d)
	r, ok, d = inUnits(peer, lone, "handover-p50-µs", "won-round-p50-µs")
	add("hand-over, one waiter: round trips (the run's SET rounds)", false, 3, r, ok, d)
	r, ok, d = inUnits(peer, "Handover/N=5/w=8/impl=redlock", "waiter-handover-p50-µs", "rtt-p50-µs")
	add("hand-over, 8 workers, to a waiter: round trips (PING rounds)", false, 3, r, ok, d)

	for i := range ts {
		ts[i].percent = strings.Contains(ts[i].name, "fraction")
	}
	missed := 0
	for _, t := range ts {
		fmt.Fprintln(w, t)
		if t.ok && ((t.atLeast && t.ratio < t.bound) || (!t.atLeast && t.ratio > t.bound)) {
			missed++
		}
	}
	fmt.Fprintf(w, "%d of %d targets missed; allocs/op are compared with the parent commit, not here (docs/benchmarks.md)\n", missed, len(ts))
}

func main() {
	rootName := flag.String("root", "", "the root suite's results (go test -bench output)")
	peerName := flag.String("peer", "", "bench/'s results")
	ceilName := flag.String("ceiling", "", "redis-benchmark -q output of every node, run at once")
	flag.Parse()
	root, err := read(*rootName)
	check(err)
	peer, err := read(*peerName)
	check(err)
	ceil, nodes, err := ceiling(*ceilName)
	check(err)
	report(os.Stdout, root, peer, ceil, nodes)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "targets:", err)
		os.Exit(2)
	}
}

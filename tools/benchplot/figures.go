package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// inputs are the result files, each read once.
type inputs struct {
	peer, adapters         []result
	peerName, adaptersName string
	waits                  map[string][]float64 // impl → wait in ns; nil without a file
	waitsName              string
	note                   string // appended to every figure's source line, e.g. the commit
}

// figures returns every figure the inputs have data for, in a fixed
// order. A figure or panel without data is left out, so that a run of a
// subset of the benchmarks (make bench BENCH=Parallel) plots that subset.
func figures(in inputs) []figure {
	var out []figure
	add := func(f figure, name string, rs []result) {
		var kept []panel
		for _, p := range f.panels {
			if len(p.series) > 0 {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			return
		}
		f.panels = kept
		f.source = describe(name, rs, in.note)
		out = append(out, f)
	}

	// Lock+Unlock against N: the uncontended case, one caller, a fresh key
	// each time.
	unc := selection{base: "Uncontended", keys: map[string]string{"N": "*", "impl": "*"}}
	add(figure{file: "latency-n.svg", title: "One Lock+Unlock against the number of nodes N (uncontended)", panels: []panel{
		numericPanel(in.peer, unc, "N", "sec/op", 1e6, "mean time per Lock+Unlock", "nodes N", "µs", false),
		numericPanel(in.peer, unc, "N", "p50-µs", 1, "median latency (p50)", "nodes N", "µs", false),
	}}, in.peerName, in.peer)

	// Throughput against parallelism, one panel per N.
	var tp []panel
	for _, n := range keyValues(in.peer, "Parallel", "N") {
		sel := selection{base: "Parallel", keys: map[string]string{"N": n, "p": "*", "impl": "*"}}
		p := numericPanel(in.peer, sel, "p", "ops/s", 1, "N="+n, "parallelism p", "Lock+Unlock per second", true)
		tp = append(tp, p)
	}
	add(figure{file: "throughput.svg", title: "Throughput against parallelism p: p × GOMAXPROCS goroutines on distinct keys", panels: tp, cols: 2}, in.peerName, in.peer)

	// Throughput against callers (BenchmarkSweep, issue 22): exactly k
	// goroutines, N=5.
	sweep := selection{base: "Sweep", keys: map[string]string{"N": "5", "callers": "*", "impl": "*"}}
	add(figure{file: "sweep.svg", title: "Throughput against callers, N=5: exactly k goroutines on distinct keys", panels: []panel{
		numericPanel(in.peer, sweep, "callers", "ops/s", 1, "Lock+Unlock per second", "callers k", "Lock+Unlock per second", true),
		numericPanel(in.peer, sweep, "callers", "p50-µs", 1e-3, "median latency (p50)", "callers k", "ms", true),
	}}, in.peerName, in.peer)

	// The slow node and the frozen node, next to the same nodes without a
	// fault.
	cats := []category{
		{"none", selection{base: "SlowNode", keys: map[string]string{"fault": "none", "impl": "*"}}},
		{"+10 ms", selection{base: "SlowNode", keys: map[string]string{"fault": "slow10ms", "impl": "*"}}},
		{"frozen", selection{base: "FrozenNode", keys: map[string]string{"fault": "frozen", "impl": "*"}}},
	}
	add(figure{file: "faults.svg", title: "One node of N=5 slowed by 10 ms, or frozen (accepts connections, never answers)", panels: []panel{
		categoryPanel(in.peer, cats, "sec/op", 1e3, "mean time per Lock+Unlock", "ms (log)"),
		categoryPanel(in.peer, cats, "p50-µs", 1e-3, "median latency (p50)", "ms (log)"),
	}}, in.peerName, in.peer)

	// Contention: handoffs per second among k goroutines on one key.
	var ct []panel
	for _, n := range keyValues(in.peer, "Contention", "N") {
		sel := selection{base: "Contention", keys: map[string]string{"N": n, "k": "*", "impl": "*"}}
		ct = append(ct, numericPanel(in.peer, sel, "k", "handoffs/s", 1, "N="+n, "goroutines k", "handoffs per second", false))
	}
	add(figure{file: "contention.svg", title: "Hand-overs per second, k goroutines taking one key in turn", panels: ct, cols: 2}, in.peerName, in.peer)

	// One panel per driver adapter, and redislock at N=1.
	mode := func(r result) (string, bool) {
		if _, ok := r.keys["serial"]; ok {
			return "serial", true
		}
		p, ok := r.keys["p"]
		return "p=" + p, ok
	}
	var ad []panel
	for _, d := range driverOrder(keyValues(in.adapters, "Drivers", "driver")) {
		sel := selection{base: "Drivers", keys: map[string]string{"driver": d, "impl": "*"}}
		ad = append(ad, modePanel(in.adapters, sel, mode, "p50-µs", d+", N=5: p50 latency", "µs (log)"))
	}
	ad = append(ad, modePanel(in.adapters, selection{base: "Redislock", keys: map[string]string{"impl": "*"}}, mode,
		"p50-µs", "go-redis, N=1, against redislock: p50", "µs (log)"))
	add(figure{file: "adapters.svg", title: "Each driver adapter against redsync's adapter for the same client", panels: ad, cols: 3}, in.adaptersName, in.adapters)

	if in.waits != nil {
		var ss []series
		var names []string
		for impl := range in.waits {
			names = append(names, impl)
		}
		for _, impl := range order(names) {
			ns := in.waits[impl]
			ms := make([]float64, len(ns))
			for i, v := range ns {
				ms[i] = v / 1e6
			}
			ss = append(ss, cdf(impl, ms, 1e-3))
		}
		out = append(out, figure{file: "handover-cdf.svg", title: "Hand-over wait under contention: cumulative distribution",
			source: strings.TrimSuffix(filepath.Base(in.waitsName)+"; one point per acquisition that had to wait; "+in.note, "; "),
			panels: []panel{{title: "wait of each acquisition that had to wait", xlabel: "wait, ms (log scale)", ylabel: "fraction of waits ≤ x",
				logX: true, series: ss}}})
	}
	return out
}

// describe names the run a figure comes from: the file, the machine, and
// how many runs each point summarizes.
func describe(name string, rs []result, note string) string {
	parts := []string{filepath.Base(name)}
	if len(rs) > 0 && rs[0].cpu != "" {
		parts = append(parts, rs[0].cpu)
	}
	if note != "" {
		parts = append(parts, note)
	}
	return strings.Join(parts, "; ") + "\n" +
		"points: each case's median; bars: its 95% confidence interval (from 6 runs), as benchstat computes them"
}

// A category is one x position of a categorical panel.
type category struct {
	label string
	sel   selection
}

// numericPanel plots unit (times scale) against the numeric key x, one
// series per impl.
func numericPanel(rs []result, sel selection, x, unit string, scale float64, title, xlabel, ylabel string, logX bool) panel {
	p := panel{title: title, xlabel: xlabel, ylabel: ylabel, logX: logX}
	g := group(rs, sel, "impl", byKey(x), unit)
	ticks := map[float64]bool{}
	for _, impl := range order(keysOf(g)) {
		xs, keys := numeric(g[impl])
		s := series{name: impl}
		for i, k := range keys {
			sm := summarize(g[impl][k])
			s.x = append(s.x, xs[i])
			s.y = append(s.y, sm.center*scale)
			s.lo = append(s.lo, sm.lo*scale)
			s.hi = append(s.hi, sm.hi*scale)
			ticks[xs[i]] = true
		}
		if len(s.x) > 0 {
			p.series = append(p.series, s)
		}
	}
	for t := range ticks {
		p.xticks = append(p.xticks, t)
	}
	sort.Float64s(p.xticks)
	return p
}

// categoryPanel plots unit (times scale) at each category, one series per
// impl, on a log scale: faults move times by orders of magnitude.
func categoryPanel(rs []result, cats []category, unit string, scale float64, title, ylabel string) panel {
	p := panel{title: title, ylabel: ylabel, logY: true}
	byImpl := map[string]*series{}
	var found []string
	for i, c := range cats {
		g := group(rs, c.sel, "impl", func(result) (string, bool) { return "", true }, unit)
		for impl, xs := range g {
			s := byImpl[impl]
			if s == nil {
				s = &series{name: impl}
				byImpl[impl] = s
			}
			sm := summarize(xs[""])
			s.x = append(s.x, float64(i))
			s.y = append(s.y, sm.center*scale)
			s.lo = append(s.lo, sm.lo*scale)
			s.hi = append(s.hi, sm.hi*scale)
		}
		if len(g) > 0 {
			found = append(found, c.label)
		}
	}
	if len(found) == 0 {
		return p
	}
	for _, c := range cats {
		p.nominal = append(p.nominal, c.label)
	}
	for _, impl := range order(keysOf(byImpl)) {
		p.series = append(p.series, *byImpl[impl])
	}
	return p
}

// modePanel is a categorical panel whose categories are the serial and
// parallel modes the results have, serial first, then by parallelism.
func modePanel(rs []result, sel selection, mode func(result) (string, bool), unit, title, ylabel string) panel {
	seen := map[string]bool{}
	for _, r := range rs {
		if sel.matches(r) {
			if m, ok := mode(r); ok {
				seen[m] = true
			}
		}
	}
	modes := keysOf(seen)
	sort.Slice(modes, func(i, j int) bool { return modeRank(modes[i]) < modeRank(modes[j]) })
	var cats []category
	for _, m := range modes {
		s := selection{base: sel.base, keys: map[string]string{}}
		for k, v := range sel.keys {
			s.keys[k] = v
		}
		if m == "serial" {
			s.keys["serial"] = ""
		} else {
			s.keys["p"] = strings.TrimPrefix(m, "p=")
		}
		cats = append(cats, category{m, s})
	}
	return categoryPanel(rs, cats, unit, 1, title, ylabel)
}

func modeRank(m string) float64 {
	if m == "serial" {
		return -1
	}
	v, err := strconv.ParseFloat(strings.TrimPrefix(m, "p="), 64)
	if err != nil {
		return 1e18
	}
	return v
}

// keyValues lists the values key takes in base's results, numbers in
// numeric order.
func keyValues(rs []result, base, key string) []string {
	seen := map[string][]float64{}
	for _, r := range rs {
		if v, ok := r.keys[key]; ok && r.base == base {
			seen[v] = nil
		}
	}
	_, nums := numeric(seen)
	if len(nums) == len(seen) {
		return nums
	}
	out := keysOf(seen)
	sort.Strings(out)
	return out
}

// driverOrder puts the adapters in the order docs/drivers.md lists them.
func driverOrder(ds []string) []string {
	rank := map[string]int{"redigo": 0, "goredis": 1, "rueidis": 2, "valkeygo": 3}
	sort.SliceStable(ds, func(i, j int) bool {
		ri, oki := rank[ds[i]]
		rj, okj := rank[ds[j]]
		if oki && okj {
			return ri < rj
		}
		return oki && !okj
	})
	return ds
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// check that every panel's data is finite and, on a log scale, positive:
// gonum panics on a non-positive value on a log axis.
func (p panel) check() error {
	for _, s := range p.series {
		for i := range s.y {
			vals := []float64{s.y[i]}
			if s.lo != nil {
				vals = append(vals, s.lo[i], s.hi[i])
			}
			for _, v := range vals {
				if p.logY && v <= 0 {
					return fmt.Errorf("panel %q: %s: %v on a log scale", p.title, s.name, v)
				}
			}
			if p.logX && s.x[i] <= 0 {
				return fmt.Errorf("panel %q: %s: x %v on a log scale", p.title, s.name, s.x[i])
			}
		}
	}
	return nil
}

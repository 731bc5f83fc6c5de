package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// A result is one line of a results file: a benchmark, its sub-benchmark
// keys, and its measurements by unit (as benchfmt tidies them: ns/op
// becomes sec/op).
type result struct {
	pkg    string
	cpu    string
	base   string            // "Uncontended", without "Benchmark"
	keys   map[string]string // "N" → "5", "impl" → "redlock"; a part without "=" is its own key, with value ""
	values map[string]float64
}

// readResults reads every result in the named file, in the format go test
// -bench writes and benchstat reads. Lines that are not results (logs,
// PASS, ok) are skipped, as benchstat skips them.
func readResults(name string) ([]result, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseResults(f, name)
}

func parseResults(r io.Reader, name string) ([]result, error) {
	var out []result
	rd := benchfmt.NewReader(r, name)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue // unit metadata, or a line benchfmt could not read
		}
		base, parts := res.Name.Parts()
		x := result{
			pkg:    res.GetConfig("pkg"),
			cpu:    res.GetConfig("cpu"),
			base:   strings.TrimPrefix(string(base), "Benchmark"),
			keys:   map[string]string{},
			values: map[string]float64{},
		}
		for _, p := range parts {
			if !bytes.HasPrefix(p, []byte("/")) {
				continue // -GOMAXPROCS
			}
			k, v, _ := strings.Cut(string(p[1:]), "=")
			x.keys[k] = v
		}
		for _, v := range res.Values {
			x.values[v.Unit] = v.Value
		}
		out = append(out, x)
	}
	if err := rd.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// A summary is benchstat's: the median of the runs and its 95% confidence
// interval, distribution-free; lo = hi = center when there are too few runs
// for one.
type summary struct {
	center, lo, hi float64
	n              int
}

func summarize(values []float64) summary {
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(append([]float64(nil), values...), &benchmath.DefaultThresholds), 0.95)
	if math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) {
		// Too few runs (under 6) for a 95% interval: no bar, as
		// benchstat prints no ± then.
		s.Lo, s.Hi = s.Center, s.Center
	}
	return summary{center: s.Center, lo: s.Lo, hi: s.Hi, n: len(values)}
}

// A selection picks results: from one benchmark, optionally one package,
// with the given keys (a value of "*" means the key must be present).
type selection struct {
	pkgSuffix string
	base      string
	keys      map[string]string
}

func (s selection) matches(r result) bool {
	if r.base != s.base || !strings.HasSuffix(r.pkg, s.pkgSuffix) {
		return false
	}
	for k, want := range s.keys {
		got, ok := r.keys[k]
		if !ok || (want != "*" && got != want) {
			return false
		}
	}
	return true
}

// group collects the values of unit from the selected results, by the
// value of series (usually "impl") and of the x key: series → x → values.
func group(rs []result, sel selection, series string, x func(result) (string, bool), unit string) map[string]map[string][]float64 {
	out := map[string]map[string][]float64{}
	for _, r := range rs {
		if !sel.matches(r) {
			continue
		}
		v, ok := r.values[unit]
		if !ok {
			continue
		}
		xv, ok := x(r)
		if !ok {
			continue
		}
		s := r.keys[series]
		if out[s] == nil {
			out[s] = map[string][]float64{}
		}
		out[s][xv] = append(out[s][xv], v)
	}
	return out
}

// byKey returns an x function reading key k.
func byKey(k string) func(result) (string, bool) {
	return func(r result) (string, bool) {
		v, ok := r.keys[k]
		return v, ok
	}
}

// numeric sorts x values that are numbers, by value.
func numeric(xs map[string][]float64) (vals []float64, keys []string) {
	for k := range xs {
		if _, err := strconv.ParseFloat(k, 64); err == nil {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := strconv.ParseFloat(keys[i], 64)
		b, _ := strconv.ParseFloat(keys[j], 64)
		return a < b
	})
	for _, k := range keys {
		v, _ := strconv.ParseFloat(k, 64)
		vals = append(vals, v)
	}
	return vals, keys
}

// waits reads the contention benchmark's raw samples: a CSV file with the
// header impl,wait_ns and one row per acquisition that had to wait.
func readWaits(name string) (map[string][]float64, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseWaits(f, name)
}

var errFormat = errors.New("bad format")

func parseWaits(r io.Reader, name string) (map[string][]float64, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 2
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: header: %w", name, err)
	}
	if strings.TrimSpace(head[0]) != "impl" || strings.TrimSpace(head[1]) != "wait_ns" {
		return nil, fmt.Errorf("%s: header %q: want impl,wait_ns: %w", name, strings.Join(head, ","), errFormat)
	}
	out := map[string][]float64{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(rec[1]), 64)
		if err != nil || ns < 0 {
			line, _ := cr.FieldPos(1)
			return nil, fmt.Errorf("%s:%d: wait_ns %q: want a non-negative number: %w", name, line, rec[1], errFormat)
		}
		impl := strings.TrimSpace(rec[0])
		out[impl] = append(out[impl], ns)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no samples: %w", name, errFormat)
	}
	return out, nil
}

package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The fixtures are a small results file of the bench/ suite's shape
// (testdata/peer.txt: three runs of each case, a log line and the PASS/ok
// trailer that benchstat skips too) and hand-over waits in the shape the
// contention benchmark writes (testdata/waits.csv).
const (
	fixture      = "testdata/peer.txt"
	waitsFixture = "testdata/waits.csv"
)

func TestParseResults(t *testing.T) {
	rs, err := readResults(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 171 {
		t.Errorf("%d results, want 171 (the log and trailer lines are not results)", len(rs))
	}
	r := rs[0]
	if r.base != "Uncontended" || r.keys["N"] != "1" || r.keys["impl"] != "floor" || r.pkg != "github.com/quorumlock/redlock/bench" {
		t.Errorf("first result %+v", r)
	}
	// ns/op is tidied to sec/op, as benchstat shows it; custom units stay.
	if r.values["sec/op"] != 100e-6 || r.values["p50-µs"] != 90 {
		t.Errorf("values %v: want sec/op 1e-4 and p50-µs 90", r.values)
	}
	// A positional part ("serial") is a key of its own.
	for _, r := range rs {
		if r.base == "Drivers" {
			if _, ok := r.keys["serial"]; !ok {
				t.Errorf("first Drivers result lacks its serial part: %v", r.keys)
			}
			break
		}
	}
}

// Points and bars are benchstat's median and 95% interval: for six runs,
// the interval is the smallest and largest run; for ten, the 2nd and 9th.
func TestSummaryIsBenchstats(t *testing.T) {
	s := summarize([]float64{6, 1, 5, 2, 4, 3})
	if s.center != 3.5 || s.lo != 1 || s.hi != 6 {
		t.Errorf("six runs: %+v, want median 3.5 in [1, 6]", s)
	}
	s = summarize([]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1})
	if s.center != 5.5 || s.lo != 2 || s.hi != 9 {
		t.Errorf("ten runs: %+v, want median 5.5 in [2, 9]", s)
	}
	// Three runs are too few for a 95% interval: no bar, not an infinite one.
	s = summarize([]float64{3, 1, 2})
	if s.center != 2 || s.lo != 2 || s.hi != 2 {
		t.Errorf("three runs: %+v, want median 2 and no interval", s)
	}
}

// Every figure the fixtures have data for is written, parses as XML, and
// names what it plots: its title, each panel's title, and each series in
// the legend.
func TestPlotAll(t *testing.T) {
	dir := t.TempDir()
	written, err := plotAll(fixture, "", waitsFixture, "commit abc1234", dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range written {
		names = append(names, filepath.Base(w))
	}
	want := []string{"latency-n.svg", "throughput.svg", "faults.svg", "contention.svg", "adapters.svg", "handover-cdf.svg"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("wrote %v, want %v", names, want)
	}
	in := loadFixture(t)
	for _, f := range figures(in) {
		b, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		texts := svgTexts(t, f.file, b)
		expect := append([]string{f.title}, strings.Split(f.source, "\n")...)
		for _, p := range f.panels {
			expect = append(expect, p.title)
			for _, s := range p.series {
				name := s.name
				if s.steps {
					name += " (n="
				}
				expect = append(expect, name)
			}
		}
		for _, e := range expect {
			if !containsPrefix(texts, e) {
				t.Errorf("%s: no text %q among %q", f.file, e, texts)
			}
		}
		if !strings.Contains(f.source, "commit abc1234") {
			t.Errorf("%s: source line %q lacks the note", f.file, f.source)
		}
	}
}

// The plotted numbers are the fixture's: each point is the median of the
// runs of its case, scaled to the axis's unit.
func TestFigureData(t *testing.T) {
	in := loadFixture(t)
	figs := map[string]figure{}
	for _, f := range figures(in) {
		figs[f.file] = f
	}
	// Medians straight from the results, by (base, keys, unit).
	median := func(base string, keys map[string]string, unit string) float64 {
		var v []float64
		for _, r := range in.peer {
			if selection.matches(selection{base: base, keys: keys}, r) {
				v = append(v, r.values[unit])
			}
		}
		sort.Float64s(v)
		if len(v) == 0 {
			t.Fatalf("no %s %v in the fixture", base, keys)
		}
		return v[len(v)/2] // three runs each
	}
	lat := figs["latency-n.svg"].panels[0]
	for _, s := range lat.series {
		for i, x := range s.x {
			want := median("Uncontended", map[string]string{"N": ftoa(x), "impl": s.name}, "sec/op") * 1e6
			if !near(s.y[i], want) {
				t.Errorf("latency %s N=%v: %v µs, want %v", s.name, x, s.y[i], want)
			}
		}
	}
	if got := seriesNames(lat); got != "redlock redsync floor" {
		t.Errorf("latency series %q, want this library first, then redsync and the floor", got)
	}
	tp := figs["throughput.svg"]
	if len(tp.panels) != 2 || tp.panels[0].title != "N=1" || tp.panels[1].title != "N=5" {
		t.Fatalf("throughput panels: want N=1 and N=5, got %d", len(tp.panels))
	}
	for _, s := range tp.panels[1].series {
		for i, x := range s.x {
			want := median("Parallel", map[string]string{"N": "5", "p": ftoa(x), "impl": s.name}, "ops/s")
			if !near(s.y[i], want) {
				t.Errorf("throughput %s p=%v: %v, want %v", s.name, x, s.y[i], want)
			}
		}
	}
	// Faults: categories in order, the frozen node from its own benchmark,
	// in milliseconds; the floor has no frozen case.
	fp := figs["faults.svg"].panels[1]
	if strings.Join(fp.nominal, ",") != "none,+10 ms,frozen" {
		t.Errorf("fault categories %v", fp.nominal)
	}
	for _, s := range fp.series {
		switch s.name {
		case "redsync":
			if len(s.x) != 3 || !near(s.y[2], median("FrozenNode", map[string]string{"impl": "redsync"}, "p50-µs")/1e3) {
				t.Errorf("redsync fault series x %v y %v", s.x, s.y)
			}
		case "floor":
			if len(s.x) != 2 {
				t.Errorf("floor has %d fault categories, want 2 (no frozen case)", len(s.x))
			}
		}
	}
	// Adapters: a panel per driver in the documented order, then redislock.
	var titles []string
	for _, p := range figs["adapters.svg"].panels {
		titles = append(titles, p.title)
	}
	if got := strings.Join(titles, "|"); got != "redigo, N=5: p50 latency|goredis, N=5: p50 latency|go-redis, N=1, against redislock: p50" {
		t.Errorf("adapter panels %q", got)
	}
	if got := strings.Join(figs["adapters.svg"].panels[0].nominal, ","); got != "serial,p=1,p=64" {
		t.Errorf("adapter modes %q", got)
	}
	// The CDF ends at 1, climbs, and counts every sample of each impl.
	waits, err := readWaits(waitsFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range figs["handover-cdf.svg"].panels[0].series {
		if s.sampleLen != len(waits[s.name]) || s.y[len(s.y)-1] != 1 || !sort.Float64sAreSorted(s.x) || s.x[0] <= 0 {
			t.Errorf("CDF %s: n=%d (want %d), last y %v, x from %v", s.name, s.sampleLen, len(waits[s.name]), s.y[len(s.y)-1], s.x[0])
		}
	}
}

func TestCDF(t *testing.T) {
	s := cdf("x", []float64{3, 0, 2, 1}, 0.5)
	if got, want := s.x, []float64{0.5, 1, 2, 3}; !equal(got, want) {
		t.Errorf("x %v, want %v (sorted, 0 clamped to the floor)", got, want)
	}
	if got, want := s.y, []float64{0.25, 0.5, 0.75, 1}; !equal(got, want) {
		t.Errorf("y %v, want %v", got, want)
	}
	for q, want := range map[float64]float64{0.5: 1, 0.75: 2, 0.99: 3, 0: 0.5} {
		if got := quantile(s.x, q); got != want {
			t.Errorf("quantile %v = %v, want %v", q, got, want)
		}
	}
}

// A run of a subset plots that subset; no data at all is an error.
func TestSubsets(t *testing.T) {
	dir := t.TempDir()
	only := filepath.Join(dir, "parallel.txt")
	var lines []string
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "Benchmark") || strings.HasPrefix(l, "BenchmarkParallel/") {
			lines = append(lines, l)
		}
	}
	if err := os.WriteFile(only, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := plotAll(only, "", filepath.Join(dir, "absent.csv"), "", dir)
	if err != nil || len(written) != 1 || filepath.Base(written[0]) != "throughput.svg" {
		t.Errorf("Parallel only, no waits file: wrote %v, %v; want throughput.svg alone", written, err)
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, []byte("PASS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := plotAll(empty, "", "", "", dir); err == nil {
		t.Error("no results: no error")
	}
	if _, err := plotAll(filepath.Join(dir, "missing.txt"), "", "", "", dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing results file: %v", err)
	}
}

func TestWaitsFormat(t *testing.T) {
	for _, bad := range []string{
		"",
		"impl,ns\nredlock,1\n",
		"impl,wait_ns\nredlock,-1\n",
		"impl,wait_ns\nredlock,soon\n",
		"impl,wait_ns\nredlock\n",
		"impl,wait_ns\n",
	} {
		if _, err := parseWaits(strings.NewReader(bad), "w.csv"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	w, err := parseWaits(strings.NewReader("impl,wait_ns\nredlock,1500\nredsync,2\nredlock,7\n"), "w.csv")
	if err != nil || !equal(w["redlock"], []float64{1500, 7}) || !equal(w["redsync"], []float64{2}) {
		t.Errorf("parsed %v, %v", w, err)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-out", "x"}, {"-peer", fixture}, {"-bogus"}} {
		if code := run(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func loadFixture(t *testing.T) inputs {
	t.Helper()
	rs, err := readResults(fixture)
	if err != nil {
		t.Fatal(err)
	}
	w, err := readWaits(waitsFixture)
	if err != nil {
		t.Fatal(err)
	}
	return inputs{peer: rs, adapters: rs, peerName: fixture, adaptersName: fixture, waits: w, waitsName: waitsFixture, note: "commit abc1234"}
}

// svgTexts parses an SVG document and returns the content of its text
// elements; it fails the test if the document is not well-formed XML.
func svgTexts(t *testing.T, name string, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	var texts []string
	var inText bool
	var root string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tk.Name.Local
			}
			inText = tk.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tk))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", name, root)
	}
	return texts
}

func containsPrefix(texts []string, p string) bool {
	for _, s := range texts {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func seriesNames(p panel) string {
	var n []string
	for _, s := range p.series {
		n = append(n, s.name)
	}
	return strings.Join(n, " ")
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

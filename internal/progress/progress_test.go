package progress

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }
func newClock() *fakeClock                   { return &fakeClock{now: time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)} }
func lines(s string) []string                { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }
func count(s, sub string) int                { return strings.Count(s, sub) }
func reporter(term bool, o Options) (*Reporter, *strings.Builder) {
	var b strings.Builder
	return New(&b, term, o), &b
}

// Off a terminal: one plain line per interval, whatever the number of
// updates, each line ending in a newline and free of control characters.
func TestPlainLines(t *testing.T) {
	clk := newClock()
	r, out := reporter(false, Options{Name: "sim", Unit: "schedules", Total: 4000, Every: 10 * time.Second, Now: clk.Now})
	for i := 1; i <= 999; i++ {
		clk.advance(10 * time.Millisecond) // 9.99s in all: not yet due
		r.Set(int64(i), "violations 0")
	}
	if out.Len() != 0 {
		t.Fatalf("wrote before the first interval had passed: %q", out.String())
	}
	clk.advance(10 * time.Millisecond)
	r.Set(1000, "violations 0") // 1000 in 10s: 100/s, 3000 left: 30s
	want := "sim: 1,000/4,000 schedules (25%), 100/s, ETA 30s, 10s elapsed, violations 0\n"
	if out.String() != want {
		t.Fatalf("first line\n got %q\nwant %q", out.String(), want)
	}
	clk.advance(9 * time.Second)
	r.Set(1900, "violations 1")
	if got := len(lines(out.String())); got != 1 {
		t.Fatalf("%d lines 19s into the run, want 1:\n%s", got, out)
	}
	clk.advance(time.Second)
	r.Add(100) // 2000 in 20s: 100/s, 2000 left: 20s; the note stays
	clk.advance(5 * time.Second)
	r.Finish()          // 2000 in 25s: 80/s, 2000 left: 25s
	r.Finish()          // once only
	r.Set(4000, "late") // after Finish: nothing
	got := lines(out.String())
	wantLines := []string{
		"sim: 1,000/4,000 schedules (25%), 100/s, ETA 30s, 10s elapsed, violations 0",
		"sim: 2,000/4,000 schedules (50%), 100/s, ETA 20s, 20s elapsed, violations 1",
		"sim: 2,000/4,000 schedules (50%), 80.0/s, ETA 25s, 25s elapsed, violations 1",
	}
	if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Fatalf("lines\n got %q\nwant %q", got, wantLines)
	}
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Errorf("control characters in plain output: %q", out.String())
	}
}

// On a terminal: the line is redrawn in place, at most every 200ms, and
// only Finish ends it with a newline.
func TestTerminalRewritesOneLine(t *testing.T) {
	clk := newClock()
	r, out := reporter(true, Options{Name: "soak", Unit: "cycles", Every: time.Hour, Now: clk.Now})
	for i := 1; i <= 100; i++ {
		clk.advance(50 * time.Millisecond) // 5s: 25 redraws, not 100
		r.Set(int64(10*i), "")
	}
	s := out.String()
	if n := count(s, "\r"); n != 25 {
		t.Errorf("%d redraws in 5s at a 200ms interval, want 25", n)
	}
	if n := count(s, "\x1b[K"); n != 25 {
		t.Errorf("%d erasures, want one per redraw (25)", n)
	}
	if strings.Contains(s, "\n") {
		t.Fatalf("newline before Finish: %q", s)
	}
	r.Finish()
	s = out.String()
	if !strings.HasSuffix(s, "\r"+"soak: 1,000 cycles, 200/s, 5s elapsed"+"\x1b[K\n") {
		t.Errorf("last redraw: %q", s[strings.LastIndex(s, "\r"):])
	}
}

// A run bounded by time takes its ETA from the clock, not from the rate.
func TestUntil(t *testing.T) {
	clk := newClock()
	r, _ := reporter(false, Options{Unit: "cycles", Until: clk.Now().Add(30 * time.Minute), Now: clk.Now})
	clk.advance(10 * time.Minute)
	r.Set(12345, "faults 3, violations 0")
	if got, want := r.Line(), "12,345 cycles, 20.6/s, ETA 20m0s, 10m0s elapsed, faults 3, violations 0"; got != want {
		t.Errorf("line\n got %q\nwant %q", got, want)
	}
	clk.advance(25 * time.Minute) // past the end: 0, not negative
	if got := r.Line(); !strings.Contains(got, "ETA 0s") {
		t.Errorf("line past the end: %q", got)
	}
}

func TestRateAndETA(t *testing.T) {
	for _, c := range []struct {
		done    int64
		elapsed time.Duration
		rate    float64
	}{
		{0, time.Second, 0},
		{10, 0, 0}, // no time yet: no rate, not a division by zero
		{10, -time.Second, 0},
		{500, 2 * time.Second, 250},
		{1, 4 * time.Second, 0.25},
	} {
		if got := Rate(c.done, c.elapsed); got != c.rate {
			t.Errorf("Rate(%d, %v) = %v, want %v", c.done, c.elapsed, got, c.rate)
		}
	}
	for _, c := range []struct {
		left int64
		rate float64
		eta  time.Duration
		ok   bool
	}{
		{100, 10, 10 * time.Second, true},
		{1, 3, 0, true}, // 333ms rounds to 0s
		{2, 3, time.Second, true},
		{0, 0, 0, true}, // nothing left: done, whatever the rate
		{-5, 1, 0, true},
		{100, 0, 0, false}, // no progress yet: unknown
		{100, -1, 0, false},
		{90000, 25, time.Hour, true},
	} {
		eta, ok := ETA(c.left, c.rate)
		if eta != c.eta || ok != c.ok {
			t.Errorf("ETA(%d, %v) = %v, %v; want %v, %v", c.left, c.rate, eta, ok, c.eta, c.ok)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 100000: "100,000"} {
		if got := Group(n); got != want {
			t.Errorf("Group(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNilReporterDoesNothing(t *testing.T) {
	var r *Reporter
	r.Set(1, "x")
	r.Add(1)
	r.Note("x")
	r.Watch(time.Second, func() (int64, string) { t.Error("sampled"); return 0, "" })()
	r.Finish()
	if r.Line() != "" {
		t.Error("nil reporter has a line")
	}
}

// Watch samples on its own ticker; in a synctest bubble its time is fake,
// so 35 seconds of it take none.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b strings.Builder
		r := New(&b, false, Options{Unit: "cycles", Every: 10 * time.Second})
		var n atomic.Int64
		stop := r.Watch(time.Second, func() (int64, string) {
			v := n.Add(7) // 7 cycles a second
			return v, fmt.Sprintf("faults %d", v/7)
		})
		time.Sleep(35*time.Second + time.Millisecond)
		stop()
		stop() // twice is fine
		r.Finish()
		got := lines(b.String())
		want := []string{
			"70 cycles, 7.00/s, 10s elapsed, faults 10",
			"140 cycles, 7.00/s, 20s elapsed, faults 20",
			"210 cycles, 7.00/s, 30s elapsed, faults 30",
			"245 cycles, 7.00/s, 35s elapsed, faults 35",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("lines\n got %q\nwant %q", got, want)
		}
	})
}

// Open honours REDLOCK_PROGRESS=off.
func TestOpenOff(t *testing.T) {
	t.Setenv(Env, "off")
	if r := Open(Options{}); r != nil {
		t.Fatal("Open with REDLOCK_PROGRESS=off returned a reporter")
	}
	t.Setenv(Env, "plain")
	if r := Open(Options{}); r == nil || r.terminal || r.w != os.Stderr {
		t.Fatal("Open with REDLOCK_PROGRESS=plain: want plain lines on stderr")
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("/dev/null taken for a terminal")
	}
}

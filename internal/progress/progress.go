// Package progress reports how far a long run has got: on a terminal, one
// line rewritten in place; anywhere else (a CI log, a file), a plain line
// every so often, so that the log stays readable.
//
// A line reads
//
//	sim: 12,345/100,000 schedules (12%), 281/s, ETA 5m7s, violations 0
//
// The rate is the average since the start, which is what the ETA of a run
// of similar steps needs; a run bounded by time (Options.Until) takes its
// ETA from the clock instead.
//
// A nil *Reporter is valid and does nothing, so that a caller can switch
// reporting off by passing nil around. A Reporter is safe for concurrent use.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Default intervals between two outputs.
const (
	// DefaultEvery is the interval between plain lines: often enough to see
	// a CI job move, rarely enough not to bury its log.
	DefaultEvery = 10 * time.Second
	// redraw is the interval between redraws on a terminal: a rate a reader
	// sees as live without the terminal doing much.
	redraw = 200 * time.Millisecond
)

// Options describe the run.
type Options struct {
	Name  string    // prefix of every line, e.g. "sim"
	Unit  string    // what is counted, plural, e.g. "schedules"
	Total int64     // how many are planned; 0 if unknown or bounded by time
	Until time.Time // when a run bounded by time ends; zero if none
	// Every is the interval between plain lines off a terminal; zero means
	// DefaultEvery.
	Every time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// A Reporter writes the progress of one run.
type Reporter struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	o        Options
	start    time.Time
	last     time.Time // of the last output; zero before the first
	done     int64
	note     string
	finished bool
	closer   io.Closer // the terminal Open opened, closed by Finish
}

// New returns a Reporter that writes to w, which is a terminal if terminal
// is true. The run starts now, on o.Now.
func New(w io.Writer, terminal bool, o Options) *Reporter {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reporter{w: w, terminal: terminal, o: o, start: o.Now()}
}

// Env names the environment variable that overrides where Open writes:
// "off" for nothing, "plain" for plain lines on stderr even with a
// terminal at hand.
const Env = "REDLOCK_PROGRESS"

// Open returns a Reporter for a test binary or a command: on the
// controlling terminal if the process has one, since go test hands its
// test binaries pipes rather than the terminal, and otherwise plain lines
// on stderr (go test -v streams them as they come). It returns nil, a
// Reporter that does nothing, if $REDLOCK_PROGRESS is "off".
func Open(o Options) *Reporter {
	switch os.Getenv(Env) {
	case "off":
		return nil
	case "plain":
		return New(os.Stderr, false, o)
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		r := New(tty, true, o)
		r.closer = tty // until Finish
		return r
	}
	return New(os.Stderr, false, o)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return isTerminal(f) }

// Set records that done units are complete, with a note such as
// "violations 0" for the end of the line, and writes a line if one is due.
func (r *Reporter) Set(done int64, note string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.note = done, note
	r.maybeWrite()
}

// Add adds n to the units done and writes a line if one is due; the note
// stays as last set.
func (r *Reporter) Add(n int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	r.maybeWrite()
}

// Note replaces the note without counting anything.
func (r *Reporter) Note(note string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.note = note
	r.maybeWrite()
}

// Watch calls sample every interval, on a goroutine of its own, and
// records what it returns as by Set, until the returned stop is called.
// stop waits for the goroutine to end. For runs whose counters live
// elsewhere, such as atomics updated by workers.
func (r *Reporter) Watch(interval time.Duration, sample func() (done int64, note string)) (stop func()) {
	if r == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.Set(sample())
			case <-quit:
				return
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
		})
	}
}

// Finish writes the last line, ending it with a newline on a terminal.
// Later calls do nothing.
func (r *Reporter) Finish() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	r.finished = true
	r.write(r.o.Now())
	if r.terminal {
		io.WriteString(r.w, "\n")
	}
	if r.closer != nil {
		r.closer.Close()
	}
}

// maybeWrite writes a line if the interval since the last one has passed.
// The first line waits one interval too: a run that ends quickly says
// nothing until Finish.
func (r *Reporter) maybeWrite() {
	if r.finished {
		return
	}
	now := r.o.Now()
	every := r.o.Every
	if r.terminal {
		every = redraw
	}
	since := r.last
	if since.IsZero() {
		since = r.start
	}
	if now.Sub(since) < every {
		return
	}
	r.write(now)
}

func (r *Reporter) write(now time.Time) {
	r.last = now
	line := r.line(now)
	if r.terminal {
		// Back to the start of the line, the new text, then erase what
		// a longer previous line left to its right.
		io.WriteString(r.w, "\r"+line+"\x1b[K")
		return
	}
	io.WriteString(r.w, line+"\n")
}

// Line returns the line that would be written now, for tests and callers
// that print it themselves.
func (r *Reporter) Line() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.line(r.o.Now())
}

func (r *Reporter) line(now time.Time) string {
	elapsed := now.Sub(r.start)
	var b strings.Builder
	if r.o.Name != "" {
		b.WriteString(r.o.Name + ": ")
	}
	b.WriteString(Group(r.done))
	if r.o.Total > 0 {
		b.WriteString("/" + Group(r.o.Total))
	}
	if r.o.Unit != "" {
		b.WriteString(" " + r.o.Unit)
	}
	if r.o.Total > 0 {
		fmt.Fprintf(&b, " (%d%%)", r.done*100/r.o.Total)
	}
	rate := Rate(r.done, elapsed)
	fmt.Fprintf(&b, ", %s/s", formatRate(rate))
	if r.o.Total > 0 || !r.o.Until.IsZero() {
		if eta, ok := r.eta(now, rate); ok {
			b.WriteString(", ETA " + eta.String())
		} else {
			b.WriteString(", ETA ?") // no progress yet
		}
	}
	fmt.Fprintf(&b, ", %s elapsed", elapsed.Round(time.Second))
	if r.note != "" {
		b.WriteString(", " + r.note)
	}
	return b.String()
}

// eta is the time left: to Until for a run bounded by time, else the units
// left at the average rate so far. ok is false when it cannot be told yet.
func (r *Reporter) eta(now time.Time, rate float64) (time.Duration, bool) {
	if !r.o.Until.IsZero() {
		return max(0, r.o.Until.Sub(now)).Round(time.Second), true
	}
	return ETA(r.o.Total-r.done, rate)
}

// Rate is units per second over elapsed; 0 if no time has passed.
func Rate(done int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(done) / elapsed.Seconds()
}

// ETA is the time left for left units at rate units per second, rounded to
// the second; ok is false if the rate is not positive.
func ETA(left int64, rate float64) (d time.Duration, ok bool) {
	if left <= 0 {
		return 0, true
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second), true
}

// formatRate shows a rate with three significant figures at most.
func formatRate(r float64) string {
	switch {
	case r >= 100:
		return Group(int64(r + 0.5))
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// Group writes n with commas between groups of three digits.
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

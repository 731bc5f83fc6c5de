package main

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// A timeline records what the demo did, for redlock demo --svg and --html:
// when nodes were down, each worker's holds with their fencing tokens and
// validity, each write, and each freeze. Times are offsets from the start.
// It is safe for concurrent use; a nil *timeline records nothing.
type timeline struct {
	mu       sync.Mutex
	start    time.Time
	nodes    int
	quorum   int
	workers  []string
	downs    []span // per node, see nodeDown
	holds    []hold
	writes   []write
	freezes  []freeze
	losses   []mark
	duration time.Duration
	summary  string
}

// A span is a node's time down; end is 0 while it is still down.
type span struct {
	node       int
	start, end time.Duration
}

// A hold is one lock held by a worker: from acquisition to leaving the
// critical section, with the validity the lock had when it left (extensions
// included). valid is the instant exclusion stopped being proven: the
// earlier of leaving and the validity's end.
type hold struct {
	worker      string
	token       uint64
	start, left time.Duration
	until       time.Duration // end of validity at leaving; 0 if still inside
	open        bool
}

func (h hold) valid() time.Duration {
	if h.open {
		return h.until
	}
	return min(h.left, h.until)
}

type write struct {
	worker   string
	at       time.Duration
	accepted bool
}

type freeze struct {
	worker     string
	start, end time.Duration
}

type mark struct {
	worker string
	at     time.Duration
}

func newTimeline(start time.Time, nodes, workers int) *timeline {
	t := &timeline{start: start, nodes: nodes, quorum: nodes/2 + 1}
	for i := range workers {
		t.workers = append(t.workers, fmt.Sprintf("w%d", i+1))
	}
	return t
}

func (t *timeline) since(at time.Time) time.Duration { return at.Sub(t.start) }

func (t *timeline) nodeDown(i int, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.downs = append(t.downs, span{node: i, start: t.since(at)})
}

func (t *timeline) nodeUp(i int, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for j := range t.downs {
		if d := &t.downs[j]; d.node == i && d.end == 0 {
			d.end = t.since(at)
		}
	}
}

// enter opens a hold and returns its index for leave.
func (t *timeline) enter(worker string, token uint64, at, until time.Time) int {
	if t == nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.holds = append(t.holds, hold{worker: worker, token: token, start: t.since(at), until: t.since(until), open: true})
	return len(t.holds) - 1
}

func (t *timeline) leave(i int, at, until time.Time) {
	if t == nil || i < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := &t.holds[i]
	h.left, h.open = t.since(at), false
	if !until.IsZero() {
		h.until = t.since(until)
	}
}

func (t *timeline) write(worker string, at time.Time, accepted bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes = append(t.writes, write{worker: worker, at: t.since(at), accepted: accepted})
}

func (t *timeline) freeze(worker string, start, end time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.freezes = append(t.freezes, freeze{worker: worker, start: t.since(start), end: t.since(end)})
}

func (t *timeline) lost(worker string, at time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.losses = append(t.losses, mark{worker: worker, at: t.since(at)})
}

func (t *timeline) finish(at time.Time, summary string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.duration = t.since(at)
	t.summary = summary
	for i := range t.downs {
		if t.downs[i].end == 0 {
			t.downs[i].end = t.duration
		}
	}
	for i := range t.holds {
		if h := &t.holds[i]; h.open {
			h.left, h.open = t.duration, false
		}
	}
}

// noQuorum returns the intervals in which fewer than a quorum of nodes
// were up: no lock could be granted or extended.
func (t *timeline) noQuorum() []span {
	type edge struct {
		at    time.Duration
		delta int
	}
	var es []edge
	for _, d := range t.downs {
		es = append(es, edge{d.start, +1}, edge{d.end, -1})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].at < es[j].at || es[i].at == es[j].at && es[i].delta < es[j].delta })
	var out []span
	down := 0
	for _, e := range es {
		before := t.nodes-down < t.quorum
		down += e.delta
		after := t.nodes-down < t.quorum
		switch {
		case !before && after:
			out = append(out, span{node: -1, start: e.at})
		case before && !after:
			out[len(out)-1].end = e.at
		}
	}
	if len(out) > 0 && out[len(out)-1].end == 0 {
		out[len(out)-1].end = t.duration
	}
	return out
}

// Layout of the picture, in SVG user units (pixels).
const (
	svgWidth   = 1100
	svgLeft    = 70 // lane names
	svgRight   = 20
	svgTop     = 70 // title and legend
	nodeLaneH  = 16
	workerLane = 34
	laneGap    = 6
	axisH      = 40
)

// SVG writes the timeline as a standalone SVG document. Elements carry
// class and data- attributes (hold, write accepted, write rejected, freeze,
// down, lost) so that a test or a script can read the picture back.
func (t *timeline) SVG(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b bytes.Buffer
	dur := max(t.duration, time.Second)
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(d time.Duration) float64 { return svgLeft + plotW*float64(d)/float64(dur) }
	nodesH := t.nodes * (nodeLaneH + laneGap)
	workersTop := svgTop + nodesH + 14
	workersH := len(t.workers) * (workerLane + laneGap)
	height := workersTop + workersH + axisH + 30
	nodeY := func(i int) int { return svgTop + i*(nodeLaneH+laneGap) }
	lane := map[string]int{}
	for i, name := range t.workers {
		lane[name] = workersTop + i*(workerLane+laneGap)
	}
	esc := html.EscapeString
	f := func(v float64) string { return fmt.Sprintf("%.1f", v) }

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">
<title>redlock demo: %d nodes, %d workers, %v</title>
<rect class="page" x="0" y="0" width="%d" height="%d" fill="#ffffff"/>
<text x="%d" y="20" font-size="15" font-weight="bold">redlock demo: %d in-process nodes (quorum %d), %d workers contending for one lock</text>
`, svgWidth, height, svgWidth, height, t.nodes, len(t.workers), t.duration.Round(100*time.Millisecond),
		svgWidth, height, svgLeft, t.nodes, t.quorum, len(t.workers))

	// Legend.
	lx, ly := svgLeft, 42
	legend := []struct{ svg, text string }{
		{`<rect x="0" y="-9" width="22" height="10" fill="#3b6fc4"/>`, "lock held and valid, #token"},
		{`<rect x="0" y="-9" width="22" height="10" fill="none" stroke="#c0392b" stroke-dasharray="3,2"/>`, "held past its validity"},
		{`<line x1="11" y1="-11" x2="11" y2="3" stroke="#1e8449" stroke-width="2"/>`, "write accepted"},
		{`<path d="M6,-8 L16,2 M16,-8 L6,2" stroke="#c0392b" stroke-width="2.2"/>`, "write rejected (stale)"},
		{`<rect x="0" y="-9" width="22" height="10" fill="url(#frozen)"/>`, "worker frozen"},
		{`<rect x="0" y="-9" width="22" height="10" fill="#9a9a9a"/>`, "node down"},
		{`<rect x="0" y="-9" width="22" height="10" fill="#f5d5d0"/>`, "no quorum"},
	}
	b.WriteString(`<defs><pattern id="frozen" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fdebd0"/><line x1="0" y1="0" x2="0" y2="6" stroke="#e67e22" stroke-width="3"/></pattern></defs>` + "\n")
	for _, l := range legend {
		fmt.Fprintf(&b, `<g transform="translate(%d,%d)">%s<text x="27" y="0">%s</text></g>`+"\n", lx, ly, l.svg, esc(l.text))
		lx += 34 + 6*len(l.text)
	}

	// No-quorum bands behind every lane.
	for _, s := range t.noQuorum() {
		fmt.Fprintf(&b, `<rect class="noquorum" data-start-ms="%d" data-end-ms="%d" x="%s" y="%d" width="%s" height="%d" fill="#f5d5d0"/>`+"\n",
			s.start.Milliseconds(), s.end.Milliseconds(), f(x(s.start)), svgTop-4, f(x(s.end)-x(s.start)), height-svgTop-axisH-26)
	}

	// Node lanes.
	for i := range t.nodes {
		y := nodeY(i)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">n%d</text>`+"\n", svgLeft-8, y+12, i+1)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%s" height="%d" fill="#d5ecd4"/>`+"\n", svgLeft, y, f(plotW), nodeLaneH)
	}
	for _, d := range t.downs {
		fmt.Fprintf(&b, `<rect class="down" data-node="n%d" data-start-ms="%d" data-end-ms="%d" x="%s" y="%d" width="%s" height="%d" fill="#9a9a9a"><title>n%d down %v to %v</title></rect>`+"\n",
			d.node+1, d.start.Milliseconds(), d.end.Milliseconds(), f(x(d.start)), nodeY(d.node), f(x(d.end)-x(d.start)), nodeLaneH,
			d.node+1, d.start.Round(100*time.Millisecond), d.end.Round(100*time.Millisecond))
	}

	// Worker lanes.
	for _, name := range t.workers {
		y := lane[name]
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", svgLeft-8, y+workerLane/2+4, name)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%s" y2="%d" stroke="#dddddd"/>`+"\n", svgLeft, y+workerLane/2, f(svgLeft+plotW), y+workerLane/2)
	}
	for _, fr := range t.freezes {
		y, ok := lane[fr.worker]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, `<rect class="freeze" data-worker="%s" data-start-ms="%d" data-end-ms="%d" x="%s" y="%d" width="%s" height="%d" fill="url(#frozen)" opacity="0.8"><title>%s frozen %v to %v</title></rect>`+"\n",
			fr.worker, fr.start.Milliseconds(), fr.end.Milliseconds(), f(x(fr.start)), y+5, f(x(fr.end)-x(fr.start)), workerLane-5,
			fr.worker, fr.start.Round(10*time.Millisecond), fr.end.Round(10*time.Millisecond))
		fmt.Fprintf(&b, `<text x="%s" y="%d" font-size="9" fill="#a04000">frozen</text>`+"\n", f(x(fr.start)+2), y+workerLane-2)
	}
	for _, h := range t.holds {
		y, ok := lane[h.worker]
		if !ok {
			continue
		}
		v := h.valid()
		fmt.Fprintf(&b, `<rect class="hold" data-worker="%s" data-token="%d" data-start-ms="%d" data-valid-ms="%d" data-left-ms="%d" x="%s" y="%d" width="%s" height="%d" fill="#3b6fc4"><title>%s holds token %d from %v; valid until %v; left at %v</title></rect>`+"\n",
			h.worker, h.token, h.start.Milliseconds(), v.Milliseconds(), h.left.Milliseconds(),
			f(x(h.start)), y+6, f(max(x(v)-x(h.start), 0.5)), workerLane-12,
			h.worker, h.token, h.start.Round(time.Millisecond), h.until.Round(time.Millisecond), h.left.Round(time.Millisecond))
		if h.left > h.until {
			// Still inside its critical section after its validity ended.
			fmt.Fprintf(&b, `<rect class="overrun" data-worker="%s" data-token="%d" x="%s" y="%d" width="%s" height="%d" fill="none" stroke="#c0392b" stroke-dasharray="3,2"/>`+"\n",
				h.worker, h.token, f(x(h.until)), y+6, f(x(h.left)-x(h.until)), workerLane-12)
		}
		fmt.Fprintf(&b, `<text class="token" x="%s" y="%d" font-size="9" fill="#1a3d73">#%d</text>`+"\n", f(x(h.start)+1), y+4, h.token)
	}
	for _, wr := range t.writes {
		y, ok := lane[wr.worker]
		if !ok {
			continue
		}
		cx := x(wr.at)
		if wr.accepted {
			fmt.Fprintf(&b, `<line class="write accepted" data-worker="%s" data-at-ms="%d" x1="%s" y1="%d" x2="%s" y2="%d" stroke="#1e8449" stroke-width="1.5"/>`+"\n",
				wr.worker, wr.at.Milliseconds(), f(cx), y+workerLane-6, f(cx), y+workerLane)
			continue
		}
		fmt.Fprintf(&b, `<path class="write rejected" data-worker="%s" data-at-ms="%d" d="M%s,%d L%s,%d M%s,%d L%s,%d" stroke="#c0392b" stroke-width="2.2"><title>%s's write at %v rejected: stale</title></path>`+"\n",
			wr.worker, wr.at.Milliseconds(), f(cx-5), y+workerLane/2-5, f(cx+5), y+workerLane/2+5, f(cx+5), y+workerLane/2-5, f(cx-5), y+workerLane/2+5,
			wr.worker, wr.at.Round(time.Millisecond))
	}
	for _, l := range t.losses {
		y, ok := lane[l.worker]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, `<text class="lost" data-worker="%s" data-at-ms="%d" x="%s" y="%d" font-size="9" fill="#c0392b">lost</text>`+"\n",
			l.worker, l.at.Milliseconds(), f(x(l.at)+2), y+workerLane-1)
	}

	// Time axis.
	ay := workersTop + workersH + 4
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%s" y2="%d" stroke="#333333"/>`+"\n", svgLeft, ay, f(svgLeft+plotW), ay)
	step := time.Second
	if dur > 30*time.Second {
		step = 5 * time.Second
	}
	for s := time.Duration(0); s <= dur; s += step {
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333333"/><text x="%s" y="%d" text-anchor="middle">%gs</text>`+"\n",
			f(x(s)), ay, f(x(s)), ay+5, f(x(s)), ay+17, s.Seconds())
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#444444">%s</text>`+"\n", svgLeft, ay+38, esc(t.summary))
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// HTML writes a page with the picture and the text timeline under it.
func (t *timeline) HTML(w io.Writer, text string) error {
	var svg bytes.Buffer
	if err := t.SVG(&svg); err != nil {
		return err
	}
	body := strings.TrimPrefix(svg.String(), `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	_, err := fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>redlock demo</title></head>\n<body style=\"font-family: sans-serif\">\n%s<pre>%s</pre>\n</body></html>\n",
		body, html.EscapeString(text))
	return err
}

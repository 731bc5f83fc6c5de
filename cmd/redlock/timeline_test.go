package main

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An svgElem is one element of a picture, read back.
type svgElem struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG reads an SVG document back, failing the test if it is not
// well-formed XML with an svg root.
func parseSVG(t *testing.T, doc string) []svgElem {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var out []svgElem
	var stack []int
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := svgElem{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tk)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if len(out) == 0 || out[0].name != "svg" {
		t.Fatal("no svg root element")
	}
	return out
}

// byClass returns the elements whose class is c.
func byClass(es []svgElem, c string) []svgElem {
	var out []svgElem
	for _, e := range es {
		if e.attrs["class"] == c {
			out = append(out, e)
		}
	}
	return out
}

func num(t *testing.T, e svgElem, attr string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[attr], 64)
	if err != nil {
		t.Fatalf("%s %q: %v", attr, e.attrs[attr], err)
	}
	return v
}

// A hand-made timeline: every element is where its times put it.
func TestTimelineSVG(t *testing.T) {
	start := time.Date(2026, 11, 21, 15, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	tl := newTimeline(start, 5, 2)
	tl.nodeDown(0, at(2000))
	tl.nodeDown(1, at(4000))
	tl.nodeDown(2, at(6000)) // 2 of 5 up: no quorum from 6s
	h1 := tl.enter("w1", 7, at(1000), at(1900))
	tl.write("w1", at(1200), true)
	tl.freeze("w1", at(1300), at(2800))
	tl.write("w1", at(2900), false)
	tl.leave(h1, at(3000), at(1900)) // left long after its validity
	h2 := tl.enter("w2", 8, at(3000), at(3900))
	tl.write("w2", at(3100), true)
	tl.leave(h2, at(3500), at(4400)) // extended, then released early
	tl.lost("w1", at(3000))
	for i := range 3 {
		tl.nodeUp(i, at(10000))
	}
	tl.finish(at(12000), "summary <line> & more")

	var b strings.Builder
	if err := tl.SVG(&b); err != nil {
		t.Fatal(err)
	}
	es := parseSVG(t, b.String())
	plotW := float64(svgWidth - svgLeft - svgRight)
	xOf := func(ms float64) float64 { return svgLeft + plotW*ms/12000 }
	near := func(a, b float64) bool { return math.Abs(a-b) <= 0.1+1e-9 } // two values rounded to 0.1

	holds := byClass(es, "hold")
	if len(holds) != 2 {
		t.Fatalf("%d holds drawn, want 2", len(holds))
	}
	for i, want := range []struct {
		token         string
		start, validE float64
	}{{"7", 1000, 1900}, {"8", 3000, 3500}} {
		h := holds[i]
		if h.attrs["data-token"] != want.token || !near(num(t, h, "x"), xOf(want.start)) ||
			!near(num(t, h, "x")+num(t, h, "width"), xOf(want.validE)) {
			t.Errorf("hold %d: %v; want token %s from x=%.1f to %.1f", i, h.attrs, want.token, xOf(want.start), xOf(want.validE))
		}
	}
	if o := byClass(es, "overrun"); len(o) != 1 || o[0].attrs["data-token"] != "7" || !near(num(t, o[0], "x"), xOf(1900)) || !near(num(t, o[0], "width"), xOf(3000)-xOf(1900)) {
		t.Errorf("overrun: %v; want one, token 7, from 1.9s to 3s", o)
	}
	if n := len(byClass(es, "write accepted")); n != 2 {
		t.Errorf("%d accepted writes drawn, want 2", n)
	}
	if r := byClass(es, "write rejected"); len(r) != 1 || r[0].attrs["data-at-ms"] != "2900" || r[0].attrs["data-worker"] != "w1" {
		t.Errorf("rejected writes: %v", r)
	}
	if f := byClass(es, "freeze"); len(f) != 1 || !near(num(t, f[0], "x"), xOf(1300)) || !near(num(t, f[0], "width"), xOf(2800)-xOf(1300)) {
		t.Errorf("freezes: %v", f)
	}
	downs := byClass(es, "down")
	if len(downs) != 3 {
		t.Fatalf("%d down spans, want 3", len(downs))
	}
	for i, d := range downs {
		from := []float64{2000, 4000, 6000}[i]
		if d.attrs["data-node"] != "n"+strconv.Itoa(i+1) || !near(num(t, d, "x"), xOf(from)) || !near(num(t, d, "x")+num(t, d, "width"), xOf(10000)) {
			t.Errorf("down %d: %v", i, d.attrs)
		}
	}
	if q := byClass(es, "noquorum"); len(q) != 1 || q[0].attrs["data-start-ms"] != "6000" || q[0].attrs["data-end-ms"] != "10000" {
		t.Errorf("no-quorum bands: %v; want one from 6s to 10s", q)
	}
	if l := byClass(es, "lost"); len(l) != 1 {
		t.Errorf("lost marks: %v", l)
	}
	var tokens []string
	for _, e := range byClass(es, "token") {
		tokens = append(tokens, e.text)
	}
	if strings.Join(tokens, " ") != "#7 #8" {
		t.Errorf("token labels %q", tokens)
	}
	if !strings.Contains(b.String(), "summary &lt;line&gt; &amp; more") {
		t.Error("summary not escaped")
	}
}

// checkDemoPicture draws the timeline TestDemo recorded and checks the
// picture against the run: one bar per acquisition, with tokens that grow
// in the order of the holds; valid holds that never overlap; one mark per
// accepted and per rejected write, as many as the summary counted; a
// shaded span per killed node.
func checkDemoPicture(t *testing.T, cfg demoConfig, sum demoSummary) {
	t.Helper()
	if sum.timeline == nil {
		t.Fatal("no timeline recorded")
	}
	var b strings.Builder
	if err := sum.timeline.SVG(&b); err != nil {
		t.Fatal(err)
	}
	es := parseSVG(t, b.String())
	holds := byClass(es, "hold")
	if int64(len(holds)) != sum.acquisitions {
		t.Errorf("%d holds drawn, %d acquisitions", len(holds), sum.acquisitions)
	}
	type iv struct {
		start, valid float64
		token        uint64
		worker       string
	}
	var ivs []iv
	for _, h := range holds {
		tok, err := strconv.ParseUint(h.attrs["data-token"], 10, 64)
		if err != nil || tok == 0 {
			t.Errorf("hold without a fencing token: %v", h.attrs)
		}
		ivs = append(ivs, iv{num(t, h, "data-start-ms"), num(t, h, "data-valid-ms"), tok, h.attrs["data-worker"]})
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		if cur.token <= prev.token {
			t.Errorf("token %d (%s at %vms) after token %d (%s at %vms): tokens must grow", cur.token, cur.worker, cur.start, prev.token, prev.worker, prev.start)
		}
		// Millisecond resolution: a hold may start in the millisecond
		// the previous one stopped being valid.
		if cur.start+1 < prev.valid {
			t.Errorf("%s's hold from %vms overlaps %s's, valid until %vms", cur.worker, cur.start, prev.worker, prev.valid)
		}
	}
	if n := int64(len(byClass(es, "write accepted"))); n != sum.writes {
		t.Errorf("%d accepted writes drawn, %d counted", n, sum.writes)
	}
	if n := int64(len(byClass(es, "write rejected"))); n != sum.stale {
		t.Errorf("%d rejected writes drawn, %d counted", n, sum.stale)
	}
	if n := len(byClass(es, "down")); n != len(cfg.script().kills) {
		t.Errorf("%d down spans drawn, %d nodes killed", n, len(cfg.script().kills))
	}
	if n := len(byClass(es, "noquorum")); n != 1 {
		t.Errorf("%d no-quorum spans, want 1: the last kill loses the quorum, the restore regains it", n)
	}
	if n := int64(len(byClass(es, "lost"))); n != sum.lost {
		t.Errorf("%d lost marks, %d locks lost", n, sum.lost)
	}
}

// --svg and --html write their files; the page holds the picture and the
// text timeline, escaped.
func TestWritePictures(t *testing.T) {
	start := time.Now()
	tl := newTimeline(start, 3, 2)
	h := tl.enter("w2", 3, start.Add(time.Second), start.Add(2*time.Second))
	tl.leave(h, start.Add(1500*time.Millisecond), start.Add(2*time.Second))
	tl.finish(start.Add(4*time.Second), "done")
	dir := t.TempDir()
	svgName, htmlName := dir+"/t.svg", dir+"/t.html"
	if err := writePictures(tl, svgName, htmlName, "a <b> line\n"); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(svgName)
	if err != nil {
		t.Fatal(err)
	}
	if holds := byClass(parseSVG(t, string(svg)), "hold"); len(holds) != 1 || holds[0].attrs["data-token"] != "3" {
		t.Errorf("holds in the SVG file: %v", holds)
	}
	page, err := os.ReadFile(htmlName)
	if err != nil {
		t.Fatal(err)
	}
	p := string(page)
	if !strings.HasPrefix(p, "<!DOCTYPE html>") || !strings.Contains(p, `<svg xmlns="http://www.w3.org/2000/svg"`) ||
		!strings.Contains(p, `class="hold"`) || !strings.Contains(p, "<pre>a &lt;b&gt; line\n</pre>") {
		t.Errorf("page:\n%s", p)
	}
	if err := writePictures(tl, dir+"/missing/t.svg", "", ""); err == nil {
		t.Error("unwritable path: no error")
	}
	if err := writePictures(nil, "", "", ""); err != nil {
		t.Errorf("nothing asked: %v", err)
	}
}

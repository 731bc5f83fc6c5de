package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	cfg := demoConfig{nodes: 5, workers: 3, duration: 6 * time.Second, ttl: 500 * time.Millisecond, tick: 250 * time.Millisecond, record: true}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	start := time.Now()
	sum, err := runDemo(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > cfg.duration+3*time.Second {
		t.Errorf("demo took %v for -duration %v", took, cfg.duration)
	}
	text := out.String()
	if sum.violations != 0 || sum.acquisitions == 0 || sum.writes == 0 || sum.counter != sum.writes {
		t.Errorf("summary %v: want no violations, some acquisitions and writes, counter = writes\n%s", sum, text)
	}
	for _, want := range []string{
		"kill n1: 4 of 5 up, quorum 3: locks still granted",
		"kill n2: 3 of 5 up, quorum 3: locks still granted",
		"kill n3: 2 of 5 up, quorum 3: QUORUM LOST",
		"none   no quorum",
		"restore n1-n3",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("timeline lacks %q:\n%s", want, text)
		}
	}
	last := text[strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n")+1:]
	if !regexp.MustCompile(`^redlock demo: violations=0 acquisitions=\d+ writes=\d+ stale_rejected=\d+ locks_lost=\d+ counter=\d+ nodes=5 workers=3 `).MatchString(last) {
		t.Errorf("last line %q is not the summary", last)
	}
	// While the quorum is lost nobody may write: the writes column is flat
	// from the first "no quorum" line to the last.
	var during []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "no quorum") {
			f := strings.Fields(line)
			during = append(during, f[len(f)-2])
		}
	}
	if len(during) < 2 || during[0] != during[len(during)-1] {
		t.Errorf("writes while the quorum was lost: %v\n%s", during, text)
	}
	checkDemoPicture(t, cfg, sum)
}

// fixedLease is a lock valid until a fixed instant.
type fixedLease struct{ until time.Time }

func (l *fixedLease) Until() time.Time { return l.until }

func TestGuard(t *testing.T) {
	p := &printer{out: io.Discard, start: time.Now()}
	g := &guard{}
	a := &fixedLease{time.Now().Add(time.Minute)}
	b := &fixedLease{time.Now().Add(time.Minute)}
	expired := &fixedLease{time.Now().Add(-time.Millisecond)}

	g.enter("a", a, p)
	if !g.write("a", a, p) {
		t.Fatal("valid holder's write rejected")
	}
	if g.write("x", expired, p) {
		t.Fatal("expired lock's write accepted")
	}
	g.enter("b", b, p) // while a is inside and valid: two valid holders
	if g.write("a", a, p) {
		t.Fatal("write from a replaced holder accepted")
	}
	g.leave(a) // not the holder any more: no effect
	if name, _ := g.holder(); name != "b" {
		t.Fatalf("holder %q after a stale leave, want b", name)
	}
	g.leave(b)
	g.enter("a", a, p) // b left first: no violation
	g.leave(a)
	g.enter("e", expired, p) // a holder whose lock ran out while it paused
	if g.write("e", expired, p) {
		t.Fatal("holder's write accepted after its lock expired")
	}
	writes, stale, violations := g.counts()
	if writes != 1 || stale != 3 || violations != 1 || g.value() != 1 {
		t.Fatalf("writes %d, stale %d, violations %d, counter %d; want 1, 3, 1, 1", writes, stale, violations, g.value())
	}
}

func TestDemoFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-nodes", "2"},
		{"-workers", "1"},
		{"-duration", "2s"}, // too short for nodes to stay down over two ttls
		{"-ttl", "10ms"},
		{"-bogus"},
		// A stray argument, and the flags after it that flag parsing would
		// drop, is an error, not a demo without its --svg (as for doctor
		// and status). The run it would start is short.
		{"-ttl", "100ms", "-duration", "2s", "out.svg", "-svg", "out.svg"},
	} {
		var stderr strings.Builder
		if code := dispatch(append([]string{"demo"}, args...), nil, io.Discard, &stderr); code != exitUsage {
			t.Errorf("demo %v: exit %d, want %d\n%s", args, code, exitUsage, stderr.String())
		}
	}
}

package redlock

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"github.com/quorumlock/redlock/internal/progress"
)

// A simProgress reports a long simulation as it runs: schedules done,
// rate, ETA and the schedules that found a violation so far. It is on only
// in the long mode (REDLOCK_SIM_SCHEDULES set, as make sim does), so that
// go test stays quiet; a nil *simProgress does nothing.
//
// forSchedules reports through one already. A simulation with a loop of
// its own needs one call to start and one per schedule:
//
//	rep := newSimProgress(t.Name(), n)
//	defer rep.finish()
//	...
//	rep.schedule(len(run.violations))
type simProgress struct {
	r                   *progress.Reporter
	done, violated, all atomic.Int64
}

func newSimProgress(name string, n int) *simProgress {
	if os.Getenv("REDLOCK_SIM_SCHEDULES") == "" {
		return nil
	}
	return &simProgress{r: progress.Open(progress.Options{
		Name: strings.TrimPrefix(name, "Test"), Unit: "schedules", Total: int64(n),
	})}
}

// schedule counts one schedule and the violations it found. Safe for
// concurrent use.
func (p *simProgress) schedule(violations int) {
	if p == nil {
		return
	}
	done := p.done.Add(1)
	if violations > 0 {
		p.violated.Add(1)
		p.all.Add(int64(violations))
	}
	p.r.Set(done, fmt.Sprintf("violations %d (in %d schedules)", p.all.Load(), p.violated.Load()))
}

// finish writes the last line.
func (p *simProgress) finish() {
	if p != nil {
		p.r.Finish()
	}
}

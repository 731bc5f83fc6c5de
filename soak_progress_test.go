package redlock_test

import (
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/progress"
)

// A soakProgress reports the soak as it runs: lock cycles, their rate, the
// time left, fault episodes and violations so far. The epochs' counters live
// in their loads, schedule and checker, so it samples them once a second.
type soakProgress struct {
	r *progress.Reporter

	mu         sync.Mutex
	cycles     int64 // of the epochs that have ended
	episodes   int64
	violations int
}

func newSoakProgress(total time.Duration) *soakProgress {
	return &soakProgress{r: progress.Open(progress.Options{
		Name: "soak", Unit: "lock cycles", Until: time.Now().Add(total),
	})}
}

// watch reports one epoch's counters, on top of the earlier epochs', until
// the returned func is called.
func (p *soakProgress) watch(loads []*chaosLoad, sched *chaosSchedule, check *chaosChecker) (stop func()) {
	return p.r.Watch(time.Second, func() (int64, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		cycles := p.cycles
		for _, ld := range loads {
			cycles += ld.cycles.Load()
		}
		return cycles, fmt.Sprintf("fault episodes %d, violations %d",
			p.episodes+sched.episodes.Load(), p.violations+check.violationCount())
	})
}

// epochDone adds an ended epoch's totals, which include the violations its
// checker's interval check found at the end.
func (p *soakProgress) epochDone(got soakTotals) {
	p.mu.Lock()
	p.cycles += got.cycles
	p.episodes += got.episodes
	p.violations += len(got.violations)
	cycles, note := p.cycles, fmt.Sprintf("fault episodes %d, violations %d", p.episodes, p.violations)
	p.mu.Unlock()
	p.r.Set(cycles, note)
}

func (p *soakProgress) finish() { p.r.Finish() }

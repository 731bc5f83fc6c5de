package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// chaosTerm shows a leadership to the chaosChecker as a held lock whose
// fencing token is its term.
type chaosTerm struct{ *redlock.Leadership }

func (t chaosTerm) Token() uint64 { return t.Term() }

// An electLoad is a set of candidates, each on a Client of its own,
// campaigning for one election on real nodes: each leads for a while,
// writing to the checker's guarded resource with its term while it has
// validity left, then resigns. Readers ask Leader throughout. It checks
// every call's error and time bound, and that Leader only ever names a
// leader that Campaign elected.
type electLoad struct {
	clients                    []*redlock.Client
	name                       string
	ttl                        time.Duration
	campaignBudget, callBudget time.Duration
	check                      *chaosChecker
	terms, campaignFails, lost atomic.Int64
	reads, named, noLeader     atomic.Int64
	maxCampaign, maxResign     atomic.Int64 // nanoseconds
	resignFails                atomic.Int64

	mu         sync.Mutex
	elected    map[uint64]string // term: value
	reported   map[redlock.Leader]int
	unexpected []string
}

func (ld *electLoad) start(ctx context.Context, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for i, c := range ld.clients {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { ld.candidate(ctx, i, c, rng) })
		wg.Go(func() { ld.reader(ctx, c) })
	}
	return wg.Wait
}

func (ld *electLoad) candidate(ctx context.Context, id int, c *redlock.Client, rng *rand.Rand) {
	e := c.Election(ld.name, redlock.WithElectionTTL(ld.ttl))
	for cycle := 0; ctx.Err() == nil; cycle++ {
		value := fmt.Sprintf("candidate-%d.%d", id, cycle)
		var lead *redlock.Leadership
		var err error
		d := realTimed(func() {
			cctx, cancel := context.WithTimeout(ctx, ld.campaignBudget-chaosSlack)
			defer cancel()
			lead, err = e.Campaign(cctx, value)
		})
		chaosRaise(&ld.maxCampaign, d)
		if d > ld.campaignBudget {
			ld.unexpectedf("Campaign took %v, more than its bound %v", d, ld.campaignBudget)
		}
		if err != nil {
			ld.campaignFails.Add(1)
			if !errors.Is(err, redlock.ErrNotObtained) {
				ld.unexpectedf("Campaign: %v", err)
			}
			continue
		}
		ld.terms.Add(1)
		ld.mu.Lock()
		ld.elected[lead.Term()] = value
		ld.mu.Unlock()

		// Lead for up to two ttls, so that the leadership lives on its
		// extensions through the faults, writing every 20ms while it has
		// half a ttl of validity left.
		h := ld.check.enter(id, chaosTerm{lead})
		end := time.Now().Add(time.Duration(rng.Int64N(int64(2 * ld.ttl))))
		for time.Now().Before(end) && lead.Err() == nil {
			if time.Until(lead.Until()) >= ld.ttl/2 {
				ld.check.write(h)
			}
			sleepCtx(lead.Context(), 20*time.Millisecond)
		}
		if lead.Err() != nil {
			// Lost: a leader that goes by Until rather than Done thinks it
			// leads until then, and the checker holds the library to that.
			time.Sleep(time.Until(lead.Until()))
		}
		ld.check.exit(h)
		if errors.Is(lead.Err(), redlock.ErrLockLost) {
			// A deposed leader that writes late, as one that was paused
			// would: once a newer leader has written, the resource must
			// refuse it by term.
			ld.lost.Add(1)
			sleepCtx(ctx, ld.ttl)
			ld.check.write(h)
		}

		// Resign even when ctx has ended, so that the next run starts clean.
		d = realTimed(func() { err = lead.Resign(context.WithoutCancel(ctx)) })
		chaosRaise(&ld.maxResign, d)
		if d > ld.callBudget {
			ld.unexpectedf("Resign took %v, more than its bound %v", d, ld.callBudget)
		}
		if err != nil {
			ld.resignFails.Add(1)
			if !errors.Is(err, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrExpired) && len(realNodeErrors(err)) == 0 {
				ld.unexpectedf("Resign: %v", err)
			}
		}
	}
}

func (ld *electLoad) reader(ctx context.Context, c *redlock.Client) {
	e := c.Election(ld.name)
	for ctx.Err() == nil {
		var got redlock.Leader
		var err error
		d := realTimed(func() { got, err = e.Leader(ctx) })
		if d > ld.callBudget {
			ld.unexpectedf("Leader took %v, more than its bound %v", d, ld.callBudget)
		}
		ld.reads.Add(1)
		switch {
		case err == nil:
			ld.named.Add(1)
			ld.mu.Lock()
			ld.reported[got]++
			ld.mu.Unlock()
		case errors.Is(err, redlock.ErrNoLeader):
			ld.noLeader.Add(1)
		case ctx.Err() == nil:
			ld.unexpectedf("Leader: %v", err)
		}
		sleepCtx(ctx, 25*time.Millisecond)
	}
}

func (ld *electLoad) unexpectedf(format string, args ...any) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.unexpected = append(ld.unexpected, fmt.Sprintf(format, args...))
}

// verdict fails t on any violation or unexpected result, and logs the figures.
func (ld *electLoad) verdict(t *testing.T) {
	t.Helper()
	violations := ld.check.finish()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	// Leader names only leaders that Campaign elected.
	for l, n := range ld.reported {
		if ld.elected[l.Term] != l.Value {
			violations = append(violations, fmt.Sprintf("Leader named %q at term %d (%d times), which no Campaign was granted",
				l.Value, l.Term, n))
		}
	}
	t.Logf("%d leaderships (%d lost while leading), %d failed campaigns, %d failed resigns; max Campaign %v, Resign %v; "+
		"%d Leader reads: %d named a leader, %d no leader; checker: %s",
		ld.terms.Load(), ld.lost.Load(), ld.campaignFails.Load(), ld.resignFails.Load(),
		time.Duration(ld.maxCampaign.Load()).Round(time.Millisecond), time.Duration(ld.maxResign.Load()).Round(time.Millisecond),
		ld.reads.Load(), ld.named.Load(), ld.noLeader.Load(), ld.check.summary())
	if len(violations) > 0 {
		t.Errorf("%d election violations:\n%s", len(violations), chaosReport(violations))
	}
	if len(ld.unexpected) > 0 {
		t.Errorf("%d unexpected results:\n%s", len(ld.unexpected), chaosReport(ld.unexpected))
	}
}

// Leader election on five real, durable nodes while a random schedule
// kills, freezes, partitions and restarts them (one episode in seven takes
// down a majority for a while). Four candidates campaign, lead on
// their extensions and resign; readers ask Leader. The checker finds no
// two leaders valid at once, terms that grow in the order leaderships were
// granted, no stale write accepted from a leader still valid, and Leader
// naming only elected leaders. REDLOCK_CHAOS_SEED replays a schedule.
func TestChaosElection(t *testing.T) {
	t.Parallel() // chaosStart says why
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(chaosSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", chaosSeedEnv, err)
		}
	}
	const (
		nodeTimeout = 150 * time.Millisecond
		ttl         = time.Second
		run         = 30 * time.Second
		minTerms    = 10
		minEpisodes = 5
	)
	// Terms are fencing tokens, whose counters must survive restarts.
	c := chaosStart(t, redistest.ClusterOptions{Durable: func(int) bool { return true }})
	ld := &electLoad{
		name: "chaos:election",
		ttl:  ttl,
		// A campaign gives up after 3s; each try takes at most three node
		// timeouts (two rounds and an undo) and a retry pause, and the
		// publish one more node timeout.
		campaignBudget: 3*time.Second + 4*nodeTimeout + chaosSlack,
		callBudget:     2*nodeTimeout + chaosSlack,
		check:          newChaosChecker(),
		elected:        map[uint64]string{},
		reported:       map[redlock.Leader]int{},
	}
	for range 4 {
		ld.clients = append(ld.clients, realClient(t, c.Addrs(), redlock.WithNodeTimeout(nodeTimeout),
			redlock.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	waitLoad := ld.start(ctx, seed)
	defer waitLoad()
	defer cancel()

	sched := &chaosSchedule{cluster: c, rng: rand.New(rand.NewPCG(seed, 0)), ttl: ttl, log: t.Logf}
	schedErr := sched.run(ctx) // until ctx ends, then heals everything
	waitLoad()
	elapsed := time.Since(start)

	t.Logf("seed %d: %v, %d fault episodes, faults injected: %s", seed, elapsed.Round(time.Second),
		sched.episodes.Load(), sched.counts())
	ld.verdict(t)
	if schedErr != nil {
		t.Errorf("fault schedule: %v", schedErr)
	}
	if ld.terms.Load() < minTerms || sched.episodes.Load() < minEpisodes || ld.named.Load() == 0 {
		t.Errorf("liveness: %d leaderships, %d episodes and %d reads naming a leader in %v; want %d, %d and some",
			ld.terms.Load(), sched.episodes.Load(), ld.named.Load(), elapsed, minTerms, minEpisodes)
	}
	if t.Failed() {
		t.Logf("replay with %s=%d", chaosSeedEnv, seed)
	}
}

package redlock

// Leader election in the one runner (sim_runner_test.go; docs/election.md).
// Candidates on several Clients campaign for one election, lead for a while
// (their leadership extended in the background), write to a resource
// guarded by their term, and resign; some stall, and on a faulty network
// their whole process pauses, so that their leadership runs out and a newer
// leader writes before their late write. Readers ask Leader throughout, a
// candidate that lost asks it too, and one observer follows Observe. In
// half the schedules a restarting node loses the leader records (the last
// writes before its crash), which a leader publishes again (issue 21).
//
// Beside the common checks (occupancy: one leader at a time; terms growing
// in the order leadership was granted; no stale write accepted), the
// checker holds what the readers saw to:
//
//   - Leader never reported a value and term that no Campaign was granted,
//     never another leader while one was valid for the whole read, and
//     never that no one leads while one was valid for the whole read;
//   - Observe's leaders were all granted, with terms that never go back.
//
//	go test -run 'TestSimulationElection' .                    # fast subset
//	REDLOCK_SIM_SCHEDULES=20000 go test -run 'TestSimulationElection$' -timeout 60m .

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Go equivalents of the election's scripts. The record is kept as one
// string, token, term and value joined by NULs; only these two read it.
func init() {
	simScripts[electPublishScript.hash] = func(n *simNode, ka []any) (any, error) {
		key, record, token := str(ka[0]), str(ka[1]), str(ka[2])
		if v, ok := n.get(key); !ok || v != token {
			return int64(0), nil
		}
		rec := token + "\x00" + str(ka[3]) + "\x00" + str(ka[4])
		if v, ok := n.get(record); ok && v == rec {
			return int64(1), nil // already there: no write
		}
		if err := n.grow(); err != nil {
			return nil, err // HSET is the script's first write
		}
		n.data[record] = simValue{v: rec}
		return int64(1), nil
	}
	simScripts[electReadScript.hash] = func(n *simNode, ka []any) (any, error) {
		token, ok := n.get(str(ka[0]))
		if !ok {
			return nil, nil
		}
		rec, ok := n.get(str(ka[1]))
		fields := strings.SplitN(rec, "\x00", 3)
		if !ok || len(fields) != 3 || fields[0] != token {
			if n.world != nil && n.world.cfg.unsafe.recordlessNone {
				return nil, nil // the unsafe variant: "no leader", as before issue 21
			}
			return int64(0), nil // a key, and no record naming its token
		}
		return []any{fields[1], fields[2]}, nil
	}
}

// A leaderReport is one Leader call that named a leader.
type leaderReport struct {
	worker     int
	start, end time.Time
	got        Leader
}

var simElection = &simPrimitive{
	name: "election", fast: 40, short: 20,
	draw: func(cfg *simConfig, r *rand.Rand) {
		cfg.recordLoss = r.IntN(2) == 0
		cfg.fencing = true // an election is fenced anyway
		if cfg.recordLoss && !cfg.clean && r.IntN(2) == 0 {
			// Restarts that lose records, and nothing else that keeps a
			// leader from publishing again: checkRecords holds them to it.
			cfg.lossless = true
			cfg.dropRate, cfg.full, cfg.closeOne = 0, 0, false
			cfg.crashes = max(cfg.crashes, cfg.nodes)
		}
	},
	capacity: func(simConfig) int { return 1 },
	open: func(e *simEnv, c *Client, id int) simActor {
		el := c.Election(simKey, simElectionOptions(e.cfg)...)
		return simActor{op: "Campaign",
			acquire: func(ctx context.Context, _ *rand.Rand, cycle int) (*simHold, error) {
				name := fmt.Sprintf("w%d.%d", id, cycle)
				e.mu.Lock()
				e.run.campaigns++
				e.mu.Unlock()
				ld, err := el.Campaign(ctx, name)
				if err != nil {
					if errors.Is(err, ErrClosed) && strings.Contains(err.Error(), "as the leadership was won") {
						e.mu.Lock()
						if e.run.closedWins == nil {
							e.run.closedWins = map[string]bool{}
						}
						e.run.closedWins[name] = true
						e.mu.Unlock()
					}
					return nil, err
				}
				return &simHold{kind: "leader", weight: 1, fenced: true, value: ld.lock.token, token: ld.Term(), name: name,
					until: ld.Until, done: ld.Done(), release: ld.Resign, op: "Resign", closeEnds: true,
					// ErrNotLeader: Close resigned it first (closeOne).
					errs: []error{ErrLockLost, ErrExpired, errNotReleased, ErrReleased, ErrNotLeader}}, nil
			},
			lost: func(rng *rand.Rand) { simReadLeader(e, rng, id, el) },
		}
	},
	start: simElectionWatch,
	stop: func(e *simEnv) {
		e.stopWatching()
	},
	left: func(cfg simConfig, n *simNode, run *simRun) []string {
		return leftKey(n, cfg.prefix+simKey, run)
	},
	check: func(cfg simConfig, run *simRun) []string {
		v := checkLeaders(run.grants, run.reports, run.observed, run.closedWins)
		v = append(v, checkNoneWhileValid(run.grants, run.none)...)
		if cfg.lossless {
			v = append(v, checkRecords(cfg, run)...)
		}
		return v
	},
}

func simElectionOptions(cfg simConfig) []ElectionOption {
	return []ElectionOption{WithElectionTTL(cfg.ttl), WithObserveInterval(cfg.ttl / 4)}
}

// simReadLeader asks el who leads, and records the answer.
func simReadLeader(e *simEnv, rng *rand.Rand, id int, el *Election) {
	var got Leader
	start := time.Now()
	_, err := e.call(rng, id, "Leader", false, func(ctx context.Context) (err error) {
		got, err = el.Leader(ctx)
		return err
	}, ErrNoLeader)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.run.noLeader++
		if strings.Contains(err.Error(), "a majority of nodes sees no leader") {
			e.run.none = append(e.run.none, leaderReport{worker: id, start: start, end: time.Now()})
		}
		return
	}
	e.run.reports = append(e.run.reports, leaderReport{worker: id, start: start, end: time.Now(), got: got})
}

// simElectionWatch starts a reader on each Client, which asks who leads
// every ttl/2, and one observer. With simUnsafe.readQuorum, readers and
// observer run on Clients of their own with that quorum, and read every
// ttl/8.
func simElectionWatch(e *simEnv) {
	cfg := e.cfg
	readers, every := e.clients, cfg.ttl/2
	if q := cfg.unsafe.readQuorum; q > 0 {
		every = cfg.ttl / 8 // more reads, so that fewer schedules show the variant
		readers = nil
		for range e.clients {
			c := e.newClient(q)
			readers = append(readers, c)
			e.extra = append(e.extra, c)
		}
	}
	for i, c := range readers {
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(50+i)))
		el := c.Election(simKey, simElectionOptions(cfg)...)
		e.wg.Go(func() {
			for e.running.Load() > 0 {
				simReadLeader(e, rng, -1-i, el)
				time.Sleep(every)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	observed, err := readers[0].Election(simKey, simElectionOptions(cfg)...).Observe(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var done sync.WaitGroup
	done.Go(func() {
		for l := range observed {
			e.mu.Lock()
			e.run.observed = append(e.run.observed, l)
			e.mu.Unlock()
		}
	})
	e.stopWatching = func() {
		cancel()
		done.Wait() // Observe's channel is closed: its goroutine has returned
	}
}

// checkLeaders is the independent check of what Leader and Observe
// reported, against the leaderships that Campaign granted.
func checkLeaders(elected []grant, reports []leaderReport, observed []Leader, closedWins map[string]bool) []string {
	var v []string
	byTerm := map[uint64]grant{}
	for _, g := range elected {
		byTerm[g.token] = g
	}
	closedTerm := map[string]uint64{} // the term each closed win was first read at
	granted := func(l Leader) bool {
		if g, ok := byTerm[l.Term]; ok {
			return g.name == l.Value
		}
		// A Campaign that won the lock as Close began held it, and
		// published, until Close resigned it; it returned ErrClosed, so its
		// term is unknown here, but its value names it alone, and it had
		// one term: every read that names it must give the same one.
		if !closedWins[l.Value] {
			return false
		}
		if t, ok := closedTerm[l.Value]; ok {
			return t == l.Term
		}
		closedTerm[l.Value] = l.Term
		return true
	}
	for _, r := range reports {
		if !granted(r.got) {
			v = append(v, fmt.Sprintf("Leader: reader %d was told %q at term %d, which no Campaign was granted",
				r.worker, r.got.Value, r.got.Term))
			continue
		}
		for _, g := range elected {
			if g.token != r.got.Term && !g.granted.After(r.start) && !g.end.Before(r.end) {
				v = append(v, fmt.Sprintf("Leader: reader %d was told %q (term %d) while %q (term %d) was valid for the whole read",
					r.worker, r.got.Value, r.got.Term, g.name, g.token))
			}
		}
	}
	var highest uint64
	for _, l := range observed {
		if l.Term == 0 {
			continue
		}
		if !granted(l) {
			v = append(v, fmt.Sprintf("Observe: sent %q at term %d, which no Campaign was granted", l.Value, l.Term))
		}
		if l.Term < highest {
			v = append(v, fmt.Sprintf("Observe: term %d after term %d", l.Term, highest))
		}
		highest = max(highest, l.Term)
	}
	return v
}

// checkNoneWhileValid holds the reads on which a majority saw no leader to
// the rule of docs/election.md: a node sees no leader only without the key,
// and a valid leader's key is on a majority, so no such read falls wholly
// within a leadership's validity.
func checkNoneWhileValid(elected []grant, none []leaderReport) []string {
	var v []string
	for _, r := range none {
		for _, g := range elected {
			if !g.granted.After(r.start) && !g.end.Before(r.end) {
				v = append(v, fmt.Sprintf("Leader: reader %d was told no leader while %q (term %d) was valid for the whole read",
					r.worker, g.name, g.token))
				break
			}
		}
	}
	return v
}

// checkRecords is the liveness check of the leader record (issue 21: a
// restart that lost it left a valid leader reading as "no leader" for its
// whole term). On a network that loses no message, with no node full and
// no process frozen, a leader publishes its record again within ttl/3,
// and an extension re-seeds its key on a node that missed one while down
// within ttl/3 more: so a read that begins that long (and a few node
// timeouts) after both the leader's grant and the last restart, and ends
// while the leader is still valid, never finds a majority that sees no
// leader.
func checkRecords(cfg simConfig, run *simRun) []string {
	margin := 2*cfg.ttl/3 + 4*simNodeTimeout
	var v []string
	for _, r := range run.none {
		recent := false
		for _, at := range run.restarts {
			recent = recent || (at.Before(r.end) && r.start.Sub(at) < margin)
		}
		if recent {
			continue
		}
		for _, g := range run.grants {
			if r.start.Sub(g.granted) >= margin && !r.end.After(g.end) {
				v = append(v, fmt.Sprintf("records: reader %d was told no leader in [%s, %s) while %q (term %d) was valid, granted at %s",
					r.worker, r.start.Format(time.StampMicro), r.end.Format(time.StampMicro), g.name, g.token, g.granted.Format(time.StampMicro)))
				break
			}
		}
	}
	return v
}

// Under the stated assumptions, no election schedule violates any property.
func TestSimulationElection(t *testing.T) {
	s := simulate(t, simElection)
	t.Logf("%d campaigns, %d leaderships, %d writes accepted, %d stale writes rejected; Leader named a leader %d times and no leader %d times; Observe sent %d changes",
		s.campaigns, s.grants, s.writes, s.grants-s.writes, s.reports, s.noLeader, s.observed)
	t.Logf("%d of the no-leader answers were decided (a majority without the key), held to checkNoneWhileValid", s.decidedNone)
	t.Logf("%d schedules with lost records and nothing else in a leader's way: %d no-leader reads held to checkRecords", s.lossless, s.noneChecked)
	if s.reports == 0 || s.observed == 0 {
		t.Fatalf("%d leaderships, %d reports, %d observed changes: the simulation exercised too little", s.grants, s.reports, s.observed)
	}
	if testing.Short() || s.schedules < simElection.fast {
		return
	}
	if s.grants < 2*s.schedules {
		t.Errorf("%d leaderships in %d schedules: fewer than 2 a schedule", s.grants, s.schedules)
	}
	if s.grants == s.writes {
		t.Errorf("no stale write in %d schedules: no deposed leader was ever fenced off", s.schedules)
	}
}

// The checker must fail on unsafe variants. With a quorum of one node, a
// candidate is elected, and a reader believes, on a single node's word: the
// checker finds overlapping leaders or repeated terms.
func TestSimulationElectionCatchesQuorumOfOne(t *testing.T) {
	simCatches(t, simElection, 40, func(cfg *simConfig) { cfg.unsafe.quorum = 1 }, nil)
}

// A node that holds a key without the record naming it answers "no leader",
// as elect_read.lua did before issue 21 (the unsafe variant lives in the
// simulation's copy of the script): the checker finds a reader told that
// no one leads while a leader was valid for the whole read (a publish that
// reached too few nodes, records lost in a restart).
func TestSimulationElectionCatchesRecordlessNone(t *testing.T) {
	simCatches(t, simElection, 40, func(cfg *simConfig) { cfg.unsafe.recordlessNone = true }, func(_ simConfig, run simRun) bool {
		for _, v := range run.violations {
			if strings.Contains(v, "was told no leader while") {
				return true
			}
		}
		return false
	})
}

// With a safe election but readers that believe one node, the checker finds
// Leader naming a deposed leader while a newer one was valid, or Observe
// going back to an older term.
func TestSimulationElectionCatchesReadFromOneNode(t *testing.T) {
	simCatches(t, simElection, 30, func(cfg *simConfig) { cfg.unsafe.readQuorum = 1 }, nil)
}

// A Campaign that returned ErrClosed as it won is known to the checker by
// its value alone, not by its term: the checker holds every read that names
// it to one term, not yet granted to anyone else, so that a value seen at
// two terms (a record published with another leadership's term, a value
// reused) is still a violation.
func TestCheckLeadersClosedWinHasOneTerm(t *testing.T) {
	now := time.Now()
	elected := []grant{{name: "w1.0", token: 2, granted: now, end: now.Add(time.Second)}}
	closed := map[string]bool{"w3.0": true}
	read := func(term uint64) leaderReport {
		return leaderReport{worker: -1, start: now.Add(2 * time.Second), end: now.Add(3 * time.Second), got: Leader{Value: "w3.0", Term: term}}
	}
	if v := checkLeaders(elected, []leaderReport{read(3), read(3)}, []Leader{{Value: "w3.0", Term: 3}}, closed); len(v) != 0 {
		t.Fatalf("one closed win read at one term: %q; want no violation", v)
	}
	if v := checkLeaders(elected, []leaderReport{read(3), read(7)}, nil, closed); len(v) == 0 {
		t.Fatal("a closed win read at terms 3 and 7 passed the checker")
	}
	if v := checkLeaders(elected, []leaderReport{read(3)}, []Leader{{Value: "w3.0", Term: 5}}, closed); len(v) == 0 {
		t.Fatal("a closed win read at term 3 and observed at term 5 passed the checker")
	}
	if v := checkLeaders(elected, []leaderReport{read(2)}, nil, closed); len(v) == 0 {
		t.Fatal("a closed win named at a term granted to another passed the checker")
	}
}

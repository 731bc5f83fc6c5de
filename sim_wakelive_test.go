package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// Wake-up on release, its liveness (wake.go, "Channels per key"). On a clean
// network (nothing lost, no crash), a waiting Lock must not miss the release
// it waits for: Clients whose timed retry is an hour away contend for one key
// with short holds, so that releases often fall between a waiter's failed
// attempt and its subscription to the key's channel reaching the nodes, and
// every acquisition must come from a wake-up, never from the timed attempt.
// Virtual time (synctest) makes the hour cost nothing: a missed release shows
// as a wait of an hour.

// simWakeStall is how long a wait may last before it counts as one that
// only the timed attempt, an hour after the first, ended.
const simWakeStall = 30 * time.Minute

// simUnconfirmedPool is the unsafe variant: a simPool whose subscriptions
// report the confirmation of the connection's first channel only, so that
// a key's confirmation is never taken for its announcement.
type simUnconfirmedPool struct{ simPool }

func (p simUnconfirmedPool) Subscribe(ctx context.Context, sub *driver.Subscription) error {
	anchor := sub.Channels()[0]
	inner := *sub
	inner.Ready = func(channel string) {
		if channel == anchor {
			sub.Ready(channel)
		}
	}
	return p.simPool.Subscribe(ctx, &inner)
}

// simWakeLiveness runs n schedules and returns how many had a stalled wait,
// with an example.
func simWakeLiveness(t *testing.T, n int, unconfirmed bool) (stalled int, example string) {
	var mu sync.Mutex
	var locks int
	var fastest time.Duration
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 0x11fe))
		cfg := simConfig{
			seed:      seed,
			nodes:     []int{3, 5}[r.IntN(2)],
			clients:   2 + r.IntN(3),
			workers:   1 + r.IntN(3),
			cycles:    3 + r.IntN(6),
			ttl:       time.Second,
			maxDelay:  time.Duration(1+r.IntN(3)) * time.Millisecond,
			clockRate: 1,
			noticeDup: r.Float64() * 0.3,
			clean:     true,
		}
		var waits []time.Duration
		synctest.Test(t, func(t *testing.T) {
			w := &simWorld{cfg: cfg, rng: rand.New(rand.NewPCG(seed, 1)), start: time.Now()}
			for range cfg.nodes {
				node := newSimNode(1)
				node.world = w
				w.nodes = append(w.nodes, node)
			}
			var clients []*Client
			var wg sync.WaitGroup
			for c := range cfg.clients {
				proc := &simProcess{announced: make([]atomic.Bool, cfg.nodes)}
				clock := &simClock{}
				pools := make([]Pool, cfg.nodes)
				for i := range pools {
					sp := simPool{w: w, node: i, link: &simLink{}, proc: proc, clock: clock}
					if unconfirmed {
						pools[i] = simUnconfirmedPool{sp}
					} else {
						pools[i] = sp
					}
				}
				client, err := New(pools, WithNodeTimeout(simNodeTimeout), WithClock(clock),
					WithTries(2), WithRetryDelay(time.Hour, time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				clients = append(clients, client)
				for k := range cfg.workers {
					rng := rand.New(rand.NewPCG(seed, uint64(100+c*cfg.workers+k)))
					wg.Go(func() {
						for range cfg.cycles {
							began := time.Now()
							l, err := client.Lock(context.Background(), simKey, cfg.ttl)
							wait := time.Since(began)
							mu.Lock()
							waits = append(waits, wait)
							mu.Unlock()
							if err != nil {
								return // both attempts failed, an hour apart: a stall, counted by its wait
							}
							time.Sleep(time.Duration(rng.IntN(6)) * time.Millisecond)
							if err := l.Unlock(context.Background()); err != nil {
								t.Errorf("seed %d: Unlock: %v", seed, err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			for _, c := range clients {
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}
			w.wires.Wait()
		})
		longest := time.Duration(0)
		for _, d := range waits {
			longest = max(longest, d)
			if d < simWakeStall {
				fastest = max(fastest, d)
			}
		}
		locks += len(waits)
		if longest >= simWakeStall {
			stalled++
			if example == "" {
				example = fmt.Sprintf("seed %d (%d nodes, %d Clients of %d workers, delays up to %v): a Lock waited %v",
					seed, cfg.nodes, cfg.clients, cfg.workers, cfg.maxDelay, longest.Round(time.Millisecond))
			}
		}
	}
	t.Logf("%d schedules, %d Lock calls; the longest wait that was not a stall: %v", n, locks, fastest)
	return stalled, example
}

// With the confirmations of a key's subscription counted as announcements,
// no release is missed.
func TestSimulationWakeUpMissesNoRelease(t *testing.T) {
	n := 200
	if testing.Short() {
		n = 40
	}
	if s := os.Getenv("REDLOCK_SIM_SCHEDULES"); s != "" {
		fmt.Sscan(s, &n)
	}
	if stalled, example := simWakeLiveness(t, n, false); stalled > 0 {
		t.Errorf("%d of %d schedules had a Lock that waited for its timed attempt; e.g. %s", stalled, n, example)
	}
}

// Without them (the unsafe variant), releases that come before a key's
// subscription reach no one, and the checker must say so.
func TestSimulationWakeUpCatchesUnconfirmed(t *testing.T) {
	const n = 100 // 8 of 100 stalled when it was written
	stalled, example := simWakeLiveness(t, n, true)
	t.Logf("%d of %d schedules of the unsafe variant stalled; e.g. %s", stalled, n, example)
	if stalled == 0 {
		t.Fatalf("no stall in %d schedules of the unsafe variant: the checker cannot fail", n)
	}
}

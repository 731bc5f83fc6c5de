package rueidis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	redlockrueidis "github.com/quorumlock/redlock/rueidis"
)

// A batch with WAIT (redlock.WithReplicaAcks) blocks its connection until
// the replicas answer or WAIT's timeout passes: it must not go out on the
// multiplexed connection that other callers' commands share, or they all
// wait behind it.
func TestWaitDoesNotHoldUpOthers(t *testing.T) {
	requireRedis(t, false)
	_, client := startClient(t) // no replicas: WAIT 1 runs out its timeout
	p := redlockrueidis.NewPool(client)
	exec(t, p, cmd("PING")) // connected

	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cmds := []driver.Command{
			{Name: "SET", Args: []any{"k", "v"}, NumKeys: 1},
			{Name: "WAIT", Args: []any{int64(1), int64(1500)}},
		}
		waited <- p.Exec(ctx, cmds, make([]driver.Reply, 2))
	}()
	time.Sleep(100 * time.Millisecond) // let the WAIT reach the server
	var wg sync.WaitGroup
	// The same key: a client that spreads commands over connections by
	// slot sends these where the batch went.
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			exec(t, p, driver.Command{Name: "GET", Args: []any{"k"}, NumKeys: 1})
			if took := time.Since(began); took > 700*time.Millisecond {
				t.Errorf("a GET of the key waited %v behind another caller's WAIT", took)
			}
		}()
	}
	wg.Wait()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

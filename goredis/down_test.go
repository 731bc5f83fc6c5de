package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
)

// lineLog records what reaches it: go-redis's logger, before the filter.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) printf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *lineLog) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// testLog is the suite's go-redis logger, installed once by TestMain:
// go-redis's own until a test sets a tee, which sends every line to all,
// and through QuietLogger to printed.
var testLog = &switchLogger{}

type printer interface {
	Printf(ctx context.Context, format string, v ...any)
}

type switchLogger struct {
	mu           sync.Mutex
	all, printed *lineLog
}

func (s *switchLogger) tee(all, printed *lineLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all, s.printed = all, printed
}

func (s *switchLogger) Printf(ctx context.Context, format string, v ...any) {
	s.mu.Lock()
	all, printed := s.all, s.printed
	s.mu.Unlock()
	if all == nil {
		log.New(os.Stderr, "redis: ", log.LstdFlags).Printf(format, v...)
		return
	}
	all.printf(format, v...)
	goredis.QuietLogger(printed.printf).Printf(ctx, format, v...)
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// pools makes three members with the package Example's options, the first
// dead ones down.
func examplePools(t *testing.T, dead int) []redlock.Pool {
	t.Helper()
	var pools []redlock.Pool
	for i := range 3 {
		addr := deadAddr(t)
		if i >= dead {
			addr = miniredis.RunT(t).Addr()
		}
		client := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			DialerRetries:         1,
			DialTimeout:           250 * time.Millisecond,
			PoolTimeout:           250 * time.Millisecond,
		})
		t.Cleanup(func() { client.Close() })
		pools = append(pools, goredis.NewPool(client))
	}
	return pools
}

// A member that is down, with the Example's settings: go-redis's dial
// lines are dropped (and there were some to drop), locks go on at the speed
// of the others, and with a majority down Lock fails within its bound.
func TestDownMemberQuietAndBounded(t *testing.T) {
	all, printed := &lineLog{}, &lineLog{}
	testLog.tee(all, printed)
	defer testLog.tee(nil, nil)
	ctx := context.Background()

	// A node timeout above the default 50 ms: the machine that runs the
	// suites is shared and often loaded, and a live in-process member must
	// answer within it.
	const nodeTimeout = 250 * time.Millisecond
	client, err := redlock.New(examplePools(t, 1), redlock.WithTries(5), redlock.WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for i := range 20 {
		start := time.Now()
		l, err := client.Lock(ctx, fmt.Sprintf("k%d", i), 10*time.Second)
		if err != nil {
			t.Fatalf("Lock %d with one of three down: %v", i, err)
		}
		// Generous: a Lock is one round, bounded by the node timeout.
		if d := time.Since(start); d > 4*nodeTimeout {
			t.Errorf("Lock %d took %v with one of three down", i, d)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
	}
	client.Close() // waits for the stragglers to the dead member
	if all.count("failed to dial") == 0 {
		t.Fatal("go-redis logged no failed dial: the test does not exercise QuietLogger")
	}
	if n := printed.count("failed to dial"); n != 0 {
		t.Errorf("%d failed-dial lines got through QuietLogger", n)
	}
	t.Logf("one member down, 20 Lock+Unlock: %d failed-dial lines from go-redis, none printed", all.count("failed to dial"))

	// A majority down: ErrNotObtained within 5 × (node timeout + 250 ms).
	client2, err := redlock.New(examplePools(t, 2), redlock.WithTries(5), redlock.WithNodeTimeout(nodeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	start := time.Now()
	_, err = client2.Lock(ctx, "k", 10*time.Second)
	elapsed := time.Since(start)
	if !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("Lock with two of three down = %v, want ErrNotObtained", err)
	}
	const bound = 5 * (nodeTimeout + 250*time.Millisecond)
	if elapsed > 2*bound {
		t.Errorf("Lock gave up after %v, want within %v (bound %v, with slack)", elapsed, 2*bound, bound)
	}
	t.Logf("two of three down, WithTries(5): ErrNotObtained after %v (bound %v)", elapsed, bound)
}

func TestQuietLogger(t *testing.T) {
	got := &lineLog{}
	q := goredis.QuietLogger(got.printf)
	q.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
	q.Printf(context.Background(), "redis: discarding bad PubSub connection: %v", "EOF")
	if got.count("") != 1 || got.count("PubSub") != 1 {
		t.Errorf("QuietLogger passed %q, want only the PubSub line", got.lines)
	}
	goredis.QuietLogger(nil).Printf(context.Background(), "anything") // drops, does not panic
}

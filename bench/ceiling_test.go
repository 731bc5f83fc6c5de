package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/benchkit"
)

// ceilingRequests is how many SETs redis-benchmark sends each node.
const ceilingRequests = 300000

// BenchmarkCeiling: the servers' pipelined ceiling, then 512 callers on the
// same five nodes (issue 22). redis-benchmark -P 16 -t set runs on every
// node at once, since the nodes share the machine's cores with each other
// as they do under a lock load; a Lock+Unlock at N=5 costs ten commands, so
// the ceiling in locks/s is the sum of the nodes' SET rates divided by 10.
// Each implementation then runs 512 callers over distinct keys on those
// nodes, and reports its successful Lock+Unlocks per second (okops/s) and
// their fraction of the ceiling (of-ceiling). It skips, saying why, without
// redis-benchmark (Debian's redis-tools).
func BenchmarkCeiling(b *testing.B) {
	tool, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("no redis-benchmark on PATH (Debian's redis-tools): ", err)
	}
	addrs := startNodes(b, 5)
	pools := newPools(b, addrs)
	var ceiling float64
	b.Run("N=5/impl=servers", func(b *testing.B) {
		// b.N is ignored: one pass of ceilingRequests per node is the
		// measurement; more would only warm the servers' caches further.
		rates, err := pipelinedSETRates(tool, addrs)
		if err != nil {
			b.Fatal(err)
		}
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		ceiling = sum / 10
		b.ReportMetric(sum, "sets/s")
		b.ReportMetric(ceiling, "ceiling-locks/s")
	})
	if ceiling == 0 {
		return
	}
	for _, im := range impls {
		l := im.new(pools)
		b.Run(fmt.Sprintf("N=5/callers=512/impl=%s", im.name), func(b *testing.B) {
			var ok atomic.Int64
			start := time.Now()
			benchkit.Callers(b, func(ctx context.Context, key string) error {
				err := l.lockUnlock(ctx, key)
				if err == nil {
					ok.Add(1)
				}
				return err
			}, 512)
			rate := float64(ok.Load()) / time.Since(start).Seconds()
			b.ReportMetric(rate, "okops/s")
			b.ReportMetric(rate/ceiling, "of-ceiling")
		})
	}
}

var setRate = regexp.MustCompile(`SET: ([0-9.]+) requests per second`)

// pipelinedSETRates runs redis-benchmark -P 16 -t set -q on every address
// at once and returns each node's SET rate.
func pipelinedSETRates(tool string, addrs []string) ([]float64, error) {
	rates := make([]float64, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, tool, "-h", host, "-p", port, "-P", "16", "-t", "set",
				"-q", "-n", strconv.Itoa(ceilingRequests), "-r", "100000").CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("redis-benchmark on %s: %v: %s", a, err, out)
				return
			}
			// -q redraws a progress line with carriage returns; the last
			// rate printed is the result.
			ms := setRate.FindAllSubmatch(bytes.ReplaceAll(out, []byte("\r"), []byte("\n")), -1)
			if len(ms) == 0 {
				errs[i] = fmt.Errorf("redis-benchmark on %s: no SET rate in %q", a, out)
				return
			}
			rates[i], errs[i] = strconv.ParseFloat(string(ms[len(ms)-1][1]), 64)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rates, nil
}

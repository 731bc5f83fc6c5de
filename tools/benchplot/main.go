// Command benchplot draws the benchmark results as SVG plots: the files
// that benchstat reads (go test -bench output), and the raw hand-over
// waits of the contention benchmark.
//
//	benchplot -peer peer.bench.txt [-adapters adapters.txt] [-waits waits.csv] -out docs/benchmarks
//
// It writes, for whatever the inputs hold:
//
//	latency-n.svg     one Lock+Unlock against N: redlock, redsync, the floor
//	throughput.svg    Lock+Unlock per second against parallelism, per N
//	faults.svg        one slow node and one frozen node, against none
//	contention.svg    hand-overs per second among k goroutines on one key
//	adapters.svg      one panel per driver adapter, and redislock at N=1
//	handover-cdf.svg  the distribution of hand-over waits (from -waits)
//
// Each point is the median of a case's runs and its bar the 95% confidence
// interval, computed as benchstat computes them, so that the plots and the
// tables agree. make bench runs it after benchstat; make plots redraws the
// committed results in docs/benchmarks/. It lives in a module of its own so
// that the library's go.mod does not grow by a plotting library.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fl.SetOutput(stderr)
	peer := fl.String("peer", "", "results of the bench/ suite (go test -bench output), for every plot but adapters' and the CDF")
	adapters := fl.String("adapters", "", "results holding BenchmarkDrivers and BenchmarkRedislock (default: -peer)")
	waits := fl.String("waits", "", "CSV of hand-over waits, header impl,wait_ns; skipped if the file does not exist")
	out := fl.String("out", "", "directory to write the SVG files into (required)")
	note := fl.String("note", "", "text added to each figure's source line, e.g. the commit and date of the run")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" || fl.NArg() > 0 || (*peer == "" && *adapters == "" && *waits == "") {
		fmt.Fprintln(stderr, "usage: benchplot -peer FILE [-adapters FILE] [-waits FILE] [-note TEXT] -out DIR")
		return 2
	}
	written, err := plotAll(*peer, *adapters, *waits, *note, *out)
	for _, w := range written {
		fmt.Fprintln(stdout, "benchplot: wrote", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, "benchplot:", err)
		return 1
	}
	return 0
}

// plotAll reads the inputs and writes every figure they have data for. It
// fails if an input cannot be read or nothing could be plotted.
func plotAll(peer, adapters, waits, note, out string) ([]string, error) {
	in := inputs{peerName: peer, adaptersName: adapters, waitsName: waits, note: note}
	if in.adaptersName == "" {
		in.adaptersName = peer
	}
	var err error
	if peer != "" {
		if in.peer, err = readResults(peer); err != nil {
			return nil, err
		}
	}
	if in.adaptersName != "" {
		if in.adapters, err = readResults(in.adaptersName); err != nil {
			return nil, err
		}
	}
	if waits != "" {
		in.waits, err = readWaits(waits)
		if errors.Is(err, fs.ErrNotExist) {
			in.waits, err = nil, nil // the contention benchmark has not written it (yet)
		}
		if err != nil {
			return nil, err
		}
	}
	figs := figures(in)
	if len(figs) == 0 {
		return nil, errors.New("no results to plot in the inputs")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, f := range figs {
		for _, p := range f.panels {
			if err := p.check(); err != nil {
				return written, fmt.Errorf("%s: %w", f.file, err)
			}
		}
		var b bytes.Buffer
		if err := render(f, &b); err != nil {
			return written, fmt.Errorf("%s: %w", f.file, err)
		}
		name := filepath.Join(out, f.file)
		if err := os.WriteFile(name, b.Bytes(), 0o644); err != nil {
			return written, err
		}
		written = append(written, name)
	}
	return written, nil
}

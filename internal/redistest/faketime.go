package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Nodes whose clocks run at another rate than the test's.
//
// Redis stores a key's expiry as an absolute Unix time in milliseconds and
// compares it with gettimeofday, so a node whose wall clock runs fast drops
// its keys early. libfaketime, preloaded, makes that clock run at a chosen
// rate ("+0 x2": no offset, twice as fast). The monotonic clock is left
// alone (FAKETIME_DONT_FAKE_MONOTONIC): Redis uses it for its event loop and
// timeouts, not for expiry, so only the clock under test changes.
//
// Debian's redis-server allocates with jemalloc, which reads the monotonic
// clock while it initialises, and libfaketime's own start-up allocates:
// preloaded alone, libfaketime deadlocks redis-server before it listens
// (libfaketime issues #130 and #478). Preloading glibc's
// libc_malloc_debug.so.0 first sends malloc and free to glibc's allocator,
// which breaks the cycle; Redis still counts its memory through
// malloc_usable_size. This is for clock tests only: memory figures of such
// a node are glibc's, not jemalloc's.

// libfaketimePaths and mallocDebugPaths are where Debian and others install
// the two preload libraries.
var (
	libfaketimePaths = []string{
		"/usr/lib/*/faketime/libfaketime.so.1",
		"/usr/lib/faketime/libfaketime.so.1",
		"/usr/local/lib/faketime/libfaketime.so.1",
		"/usr/lib64/faketime/libfaketime.so.1",
	}
	mallocDebugPaths = []string{
		"/lib/*/libc_malloc_debug.so.0",
		"/usr/lib/*/libc_malloc_debug.so.0",
		"/lib64/libc_malloc_debug.so.0",
		"/usr/lib64/libc_malloc_debug.so.0",
	}
)

// findLib returns the first existing file matching one of patterns.
func findLib(patterns []string) string {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// ClockRateAvailable reports whether StartClockRate can run, and if not,
// why: it needs redis-server, libfaketime and glibc's libc_malloc_debug.
func ClockRateAvailable() (ok bool, why string) {
	if ok, why := Available(); !ok {
		return false, why
	}
	if findLib(libfaketimePaths) == "" {
		return false, "libfaketime is not installed (make test installs Debian's faketime, which brings libfaketime)"
	}
	if findLib(mallocDebugPaths) == "" {
		return false, "glibc's libc_malloc_debug.so.0 (glibc 2.34 or later) was not found; without it libfaketime deadlocks a jemalloc redis-server"
	}
	return true, ""
}

// StartClockRate starts redis-server like Start, with its wall clock, the
// clock it expires keys by, running at rate times real time: 2 expires a
// PX 1000 key after 500 ms, 0.5 after 2 s. The test is skipped, with the
// reason, if ClockRateAvailable says no.
func StartClockRate(t testing.TB, rate float64, extra ...string) *Server {
	t.Helper()
	if ok, why := ClockRateAvailable(); !ok {
		t.Skip(why)
	}
	if !(rate > 0) {
		t.Fatalf("clock rate %v must be positive", rate)
	}
	return startFree(t, fmt.Sprintf("redis-server under libfaketime (FAKETIME=%q)", FaketimeSpec(rate)), nil, func(port int) *Server {
		args := append(localArgs(port), extra...)
		// Debian's redis-server always, not Binary(): libfaketime and the
		// malloc shim are bookworm's, and must match the server's C library.
		cmd := exec.Command("redis-server", args...)
		cmd.Env = append(os.Environ(),
			"LD_PRELOAD="+findLib(mallocDebugPaths)+":"+findLib(libfaketimePaths),
			"FAKETIME="+FaketimeSpec(rate),
			"FAKETIME_DONT_FAKE_MONOTONIC=1",
		)
		return spawn(t, cmd, port)
	})
}

// FaketimeSpec is the FAKETIME value for a clock running at rate from the
// moment the process starts: no offset, then rate seconds per second.
func FaketimeSpec(rate float64) string {
	return fmt.Sprintf("+0 x%s", strconv.FormatFloat(rate, 'f', -1, 64))
}

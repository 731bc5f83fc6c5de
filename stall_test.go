//go:build linux

package redlock_test

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The stall watcher takes a real pause of the whole process out of a timed
// call, and nothing else: the process stops itself (SIGSTOP) and a child
// wakes it 300ms later.
//
// It must never call t.Parallel: it stops every goroutine of the test
// binary, so it runs in the sequential phase, with no other test running.
func TestStallWatch(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc to see this process stopped: %v", err)
	}
	stalls.watch(t)
	const pause = 300 * time.Millisecond
	stopped := false
	stop := func() {
		// The child waits until this process has stopped (a CONT sent
		// before the STOP would leave it stopped for good), then pauses
		// and wakes it. After 5 s of looking it wakes it anyway and exits
		// with 3: a process under ptrace shows another state, and PID 1
		// ignores SIGSTOP.
		pid := strconv.Itoa(os.Getpid())
		wake := exec.Command("sh", "-c", "i=0; until grep -q '^State:[[:space:]]*T' /proc/"+pid+"/status; do "+
			"[ $i -ge 500 ] && { kill -CONT "+pid+"; exit 3; }; sleep 0.01; i=$((i+1)); done; "+
			"sleep "+strconv.FormatFloat(pause.Seconds(), 'f', 3, 64)+"; kill -CONT "+pid)
		if err := wake.Start(); err != nil {
			t.Fatalf("starting the process that wakes this one: %v", err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP: %v", err)
		}
		var exit *exec.ExitError
		switch err := wake.Wait(); {
		case err == nil:
			stopped = true
		case !errors.As(err, &exit) || exit.ExitCode() != 3:
			t.Fatalf("the process that wakes this one: %v", err)
		}
	}
	d := realTimed(stop)
	if !stopped {
		t.Skip("SIGSTOP did not stop this process (PID 1 in a container, or traced)")
	}
	if d > pause/2 {
		t.Errorf("realTimed counted %v of a %v stop of the process; want at most %v", d, pause, pause/2)
	}
	// Time the process spent running counts in full.
	if d := realTimed(func() { time.Sleep(pause) }); d < pause {
		t.Errorf("realTimed counted %v of a %v sleep", d, pause)
	}
}

package redlock_test

import (
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
func TestStallWatch(t *testing.T) {
	stalls.watch(t)
	const pause = 300 * time.Millisecond
	stop := func() {
		// The child waits until this process has stopped (a CONT sent
		// before the STOP would leave it stopped for good), then pauses.
		pid := strconv.Itoa(os.Getpid())
		wake := exec.Command("sh", "-c", "until grep -q '^State:[[:space:]]*T' /proc/"+pid+"/status; do sleep 0.01; done; "+
			"sleep "+strconv.FormatFloat(pause.Seconds(), 'f', 3, 64)+"; kill -CONT "+pid)
		if err := wake.Start(); err != nil {
			t.Fatalf("starting the process that wakes this one: %v", err)
		}
		defer func() { _ = wake.Wait() }()
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP: %v", err)
		}
	}
	start := time.Now()
	d := realTimed(stop)
	if wall := time.Since(start); wall < pause {
		t.Fatalf("the process stood still %v, less than the %v asked for", wall, pause)
	}
	if d > pause/2 {
		t.Errorf("realTimed counted %v of a %v stop of the process; want at most %v", d, pause, pause/2)
	}
	// Time the process spent running counts in full.
	if d := realTimed(func() { time.Sleep(pause) }); d < pause {
		t.Errorf("realTimed counted %v of a %v sleep", d, pause)
	}
}

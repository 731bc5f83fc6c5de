package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"
)

// envChild makes the test binary act as the CMD that redlock run starts,
// with the mode and its arguments in os.Args[1:].
const envChild = "REDLOCK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(child(os.Args[1:]))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// child is the test's CMD. Modes:
//
//	interval LOG MARK HOLD  take MARK exclusively (O_EXCL), hold it HOLD, and
//	                        append "start end" in Unix nanoseconds to LOG;
//	                        exit 99 if MARK already existed: an overlap
//	exit N                  exit with code N
//	sleep PIDFILE           write the pid, then sleep up to a minute; exit 0
//	                        on SIGTERM
//	stubborn PIDFILE        like sleep, but ignore SIGTERM
//	env NAME                exit 9 if NAME is set, else 0
//	dumpenv FILE ADDR       write the REDLOCK_* variables to FILE, then
//	                        held=, the value of the key they name on ADDR
//	slot DIR LOG HOLD       join DIR for HOLD, and append to LOG how many
//	                        were in DIR at once, this one included
func child(args []string) int {
	if len(args) < 2 {
		return 98
	}
	switch args[0] {
	case "interval":
		hold, err := time.ParseDuration(args[3])
		if err != nil {
			return 98
		}
		start := time.Now()
		mark, err := os.OpenFile(args[2], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return 99
		}
		mark.Close()
		time.Sleep(hold)
		end := time.Now()
		if err := os.Remove(args[2]); err != nil {
			return 97
		}
		f, err := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 97
		}
		defer f.Close()
		fmt.Fprintf(f, "%d %d\n", start.UnixNano(), end.UnixNano())
		return 0
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "sleep", "stubborn":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		if err := os.WriteFile(args[1], []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return 97
		}
		deadline := time.After(time.Minute)
		for {
			select {
			case <-sigs:
				if args[0] == "sleep" {
					return 0
				}
			case <-deadline:
				return 96
			}
		}
	case "env":
		if _, ok := os.LookupEnv(args[1]); ok {
			return 9
		}
		return 0
	case "dumpenv":
		var b strings.Builder
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "REDLOCK_") && !strings.HasPrefix(kv, "REDLOCK_TEST_") && !strings.HasPrefix(kv, "REDLOCK_REQUIRE_") {
				fmt.Fprintln(&b, kv)
			}
		}
		c, err := redis.Dial("tcp", args[2], redis.DialConnectTimeout(5*time.Second), redis.DialReadTimeout(5*time.Second))
		if err != nil {
			return 97
		}
		defer c.Close()
		held, _ := redis.String(c.Do("GET", os.Getenv("REDLOCK_KEY_PREFIX")+os.Getenv("REDLOCK_KEY")))
		fmt.Fprintf(&b, "held=%s\n", held)
		if err := os.WriteFile(args[1], []byte(b.String()), 0o600); err != nil {
			return 97
		}
		return 0
	case "slot":
		hold, err := time.ParseDuration(args[3])
		if err != nil {
			return 98
		}
		me := filepath.Join(args[1], strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(me, nil, 0o600); err != nil {
			return 97
		}
		in, _ := os.ReadDir(args[1])
		time.Sleep(hold)
		in2, _ := os.ReadDir(args[1])
		if err := os.Remove(me); err != nil {
			return 97
		}
		f, err := os.OpenFile(args[2], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 97
		}
		defer f.Close()
		fmt.Fprintf(f, "%d\n", max(len(in), len(in2)))
		return 0
	}
	return 98
}

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

// redlockBin builds the command once per test binary and returns its path.
func redlockBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "redlock-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "redlock")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// A runResult is how one redlock process ended.
type runResult struct {
	code    int
	stderr  string
	elapsed time.Duration
	err     error // a failure to run it at all
}

// redlockCmd prepares the binary with args, and env added to the test's
// environment. CMD is this test binary in child mode: pass its arguments
// after "--" as childArgs.
func redlockCmd(t *testing.T, env []string, args []string, childArgs ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if len(childArgs) > 0 {
		args = append(append(args, "--", self), childArgs...)
	}
	cmd := exec.Command(redlockBin(t), args...)
	cmd.Env = append(append(os.Environ(), envChild+"=1"), env...)
	var stderr bytes.Buffer
	cmd.Stdout = os.Stdout
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// runRedlock runs the binary to completion, at most limit.
func runRedlock(t *testing.T, limit time.Duration, env []string, args []string, childArgs ...string) runResult {
	t.Helper()
	cmd, stderr := redlockCmd(t, env, args, childArgs...)
	return wait(cmd, stderr, limit)
}

// wait starts cmd if needed and waits for it at most limit, killing it then.
// It is safe to call from any goroutine.
func wait(cmd *exec.Cmd, stderr *bytes.Buffer, limit time.Duration) runResult {
	start := time.Now()
	if cmd.Process == nil {
		if err := cmd.Start(); err != nil {
			return runResult{err: err}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return runResult{err: fmt.Errorf("redlock still running after %v; killed it\n%s", limit, stderr), elapsed: time.Since(start)}
	}
	res := runResult{code: cmd.ProcessState.ExitCode(), stderr: stderr.String(), elapsed: time.Since(start)}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		res.err = err
	}
	return res
}

// Package redistest starts real Redis servers for tests: local redis-server
// processes on loopback. Each server is stopped when its test ends, pass or
// fail.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A Server is a redis-server process started by Start.
type Server struct {
	Addr   string // 127.0.0.1:port
	Port   int
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed once the process has exited and been waited for
}

// ErrPortTaken is the error of a server that could not listen on its port
// because another process had taken it: a port FreePort gave may be taken
// by another test's server before this one binds it. Start and StartWith
// try another port.
var ErrPortTaken = errors.New("redistest: the port was taken by another process")

// ServerEnv names the environment variable that selects the server binary
// the tests start: a path printed by make servers (scripts/servers.sh), a
// Valkey or newer Redis build that takes redis-server's flags. Unset, the
// tests start redis-server from PATH (Debian 12's Redis 7.0).
const ServerEnv = "REDLOCK_SERVER"

// Binary returns the server binary the tests start: $REDLOCK_SERVER, or
// redis-server.
func Binary() string {
	if b := os.Getenv(ServerEnv); b != "" {
		return b
	}
	return "redis-server"
}

// Available reports whether the server binary (Binary) can be found, and if
// not, why.
func Available() (ok bool, why string) {
	if _, err := exec.LookPath(Binary()); err != nil {
		if os.Getenv(ServerEnv) != "" {
			return false, fmt.Sprintf("%s=%s: %v (make servers installs it)", ServerEnv, Binary(), err)
		}
		return false, "redis-server is not installed (make test installs Debian's redis-server)"
	}
	return true, ""
}

// RequireServerEnv names the environment variable that, like
// RequireDockerEnv, turns a missing redis-server from a skip into a failure.
// make test sets RequireDockerEnv, which counts for both.
const RequireServerEnv = "REDLOCK_REQUIRE_REDIS"

// Require skips t, saying why, when no redis-server is on PATH (go test
// -short on a machine without one, say), or fails it instead when
// $REDLOCK_REQUIRE_REDIS or $REDLOCK_REQUIRE_DOCKER is 1, as make test sets
// it: a suite that needs real nodes never passes by skipping them there.
func Require(t testing.TB) {
	t.Helper()
	ok, why := Available()
	if ok {
		return
	}
	if os.Getenv(RequireServerEnv) == "1" || os.Getenv(RequireDockerEnv) == "1" {
		t.Fatalf("%s (%s=1 or %s=1, as make test sets, requires one)", why, RequireServerEnv, RequireDockerEnv)
	}
	t.Skipf("%s (set %s=1 to fail instead)", why, RequireServerEnv)
}

// Start launches redis-server on a free loopback port with persistence off,
// plus any extra arguments (for example "--requirepass", "x"), and waits until
// it answers PING. The process is killed when t ends. If extra configures TLS
// only (--port 0), use StartOnPort and wait for readiness yourself. Without
// a redis-server, it skips or fails t as Require does.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartWith(t, nil, extra...)
}

// StartWith is Start for a server that needs dial options (a password, an
// ACL user, TLS) to answer PING. If another process takes the port before
// the server binds it, it tries another.
func StartWith(t testing.TB, dial []redis.DialOption, extra ...string) *Server {
	t.Helper()
	Require(t)
	return startFree(t, Binary(), dial, func(port int) *Server { return StartOnPort(t, port, extra...) })
}

// StartFree starts a server with start, which StartOnPort's a server on
// port (with arguments that depend on the port: a TLS port, say), and
// waits until it answers PING with dial; if another process takes the port
// first, it tries another port.
func StartFree(t testing.TB, dial []redis.DialOption, start func(port int) *Server) *Server {
	t.Helper()
	Require(t)
	return startFree(t, Binary(), dial, start)
}

// startFree is StartFree, with what naming the server in failures.
func startFree(t testing.TB, what string, dial []redis.DialOption, start func(port int) *Server) *Server {
	t.Helper()
	for try := 1; ; try++ {
		s := start(FreePort(t))
		err := s.WaitReadyWith(5*time.Second, dial...)
		if err == nil {
			return s
		}
		if !errors.Is(err, ErrPortTaken) || try == 5 {
			t.Fatalf("%s on %s: %v\n%s", what, s.Addr, err, s.Log())
		}
	}
}

// StartOnPort launches redis-server listening on port without waiting for
// it. Without a redis-server, it skips or fails t as Require does.
func StartOnPort(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	Require(t)
	args := append(localArgs(port),
		// Its own directory: a replica's full sync writes the RDB it
		// receives there, which a server started later in the same
		// directory would load (and refuse, if a newer server wrote it).
		"--dir", t.TempDir(),
		// A replica's full sync starts at once, not after the 5 s a
		// primary waits by default for more replicas to share it.
		"--repl-diskless-sync-delay", "0")
	args = append(args, extra...)
	return spawn(t, exec.Command(Binary(), args...), port)
}

// localArgs are the arguments of a server on loopback port with
// persistence off.
func localArgs(port int) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
	}
}

// spawn starts cmd, a server that listens on port, and stops it when t
// ends.
func spawn(t testing.TB, cmd *exec.Cmd, port int) *Server {
	t.Helper()
	out := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, cmd: cmd, out: out,
		exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.Stop)
	return s
}

// WaitReady polls the server with PING until it answers or timeout passes.
func (s *Server) WaitReady(timeout time.Duration) error {
	return s.WaitReadyWith(timeout)
}

// WaitReadyWith is WaitReady for a server that needs dial options: TLS, a
// password or an ACL user. A PING answered on the port counts only once the
// port's listening socket is the process's own (where /proc tells): a
// server of another test's that took the port first would answer too. If
// the process exits first, the error says why, and wraps ErrPortTaken if
// it could not bind its port.
func (s *Server) WaitReadyWith(timeout time.Duration, opts ...redis.DialOption) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts = append([]redis.DialOption{redis.DialConnectTimeout(200 * time.Millisecond)}, opts...)
	var last error
	for ctx.Err() == nil {
		select {
		case <-s.exited:
			if strings.Contains(s.Log(), "Address already in use") {
				return fmt.Errorf("%w: %s exited", ErrPortTaken, s.cmd.Path)
			}
			return fmt.Errorf("%s exited before it answered", s.cmd.Path)
		default:
		}
		c, err := redis.DialContext(ctx, "tcp", s.Addr, opts...)
		if err == nil {
			_, err = redis.DoWithTimeout(c, 200*time.Millisecond, "PING")
			c.Close()
			if err == nil {
				if own, known := listensOn(s.cmd.Process.Pid, s.Port); own || !known {
					return nil
				}
				err = fmt.Errorf("another process answers on port %d", s.Port)
			}
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

// listensOn reports whether process pid holds a TCP socket listening on
// port, from /proc; known is false where /proc does not tell (no table, no
// listener on the port in it, a process whose descriptors cannot be read).
func listensOn(pid, port int) (own, known bool) {
	listeners := map[string]bool{} // socket inodes listening on port
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				listeners["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(listeners) == 0 {
		return false, false // a PONG came from the port, so /proc does not show it all
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return false, true // it has exited (and been waited for): the listener is another's
	}
	if err != nil {
		return false, false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && listeners[l] {
			return true, true
		}
	}
	return false, true
}

// Stop kills the process and waits for it. It is safe to call twice.
func (s *Server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Freeze stops the process with SIGSTOP: it keeps its connections and
// answers nothing, as a paused or deadlocked master does, until Thaw. Stop
// kills a frozen server too.
func (s *Server) Freeze() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Log returns what the server printed so far, for failure messages.
func (s *Server) Log() string { return s.out.String() }

// syncBuffer is a bytes.Buffer that the process's output copier may write
// while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartN starts n servers.
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, extra...)
	}
	return servers
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

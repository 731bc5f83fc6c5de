package redlocktest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// A loadingServer stands in for a Redis that is loading its dataset after a
// restart, which no real server can be made to do on demand: it speaks
// enough RESP2 for a driver to connect (HELLO is unknown, so drivers fall
// back to RESP2; AUTH, CLIENT, SELECT and PING succeed) and answers every
// other command with a LOADING error.
type loadingServer struct {
	l       net.Listener
	loading atomic.Int64 // commands answered with LOADING
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startLoading(t testing.TB) *loadingServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &loadingServer{l: l}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *loadingServer) addr() string    { return s.l.Addr().String() }
func (s *loadingServer) commands() int64 { return s.loading.Load() }

func (s *loadingServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "AUTH", "CLIENT", "SELECT", "READONLY", "READWRITE":
			reply = "+OK\r\n"
		default:
			s.loading.Add(1)
			reply = "-LOADING Redis is loading the dataset in memory\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one command: an array of bulk strings, or an inline
// command.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		if f := strings.Fields(line); len(f) > 0 {
			return f, nil
		}
		return nil, fmt.Errorf("empty inline command")
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 1 || n > 1<<16 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		head, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(head, "$"))
		if err != nil || !strings.HasPrefix(head, "$") || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad bulk header %q", head)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

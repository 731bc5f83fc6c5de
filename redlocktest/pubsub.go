package redlocktest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A pubsubServer stands in for a Redis that ends a subscription on its own
// while the client still wants it. No real server does that on demand for
// a plain channel (one whose ACL permission is revoked disconnects the
// client instead), but a driver.Subscriber must not take such an
// "unsubscribe" for the confirmation of one it asked for. The stand-in
// speaks enough RESP2 for a driver to connect and subscribe (HELLO is
// unknown, so drivers fall back to RESP2; AUTH, CLIENT, SELECT and PING
// succeed), confirms SUBSCRIBE and UNSUBSCRIBE as Redis does, and kick
// sends an "unsubscribe" that nobody asked for.
type pubsubServer struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*pubsubConn]bool
}

// A pubsubConn is one client connection of the stand-in.
type pubsubConn struct {
	c    net.Conn
	mu   sync.Mutex      // one reply or push at a time; guards subs
	subs map[string]bool // the channels it is subscribed to
}

func startPubsub(t testing.TB) *pubsubServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &pubsubServer{l: l, conns: make(map[*pubsubConn]bool)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			pc := &pubsubConn{c: c, subs: make(map[string]bool)}
			s.mu.Lock()
			s.conns[pc] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(pc)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for pc := range s.conns {
			pc.c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *pubsubServer) addr() string { return s.l.Addr().String() }

// subscribed reports whether some connection is subscribed to channel.
func (s *pubsubServer) subscribed(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pc := range s.conns {
		pc.mu.Lock()
		ok := pc.subs[channel]
		pc.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// kick ends every connection's subscription to channel, telling each with
// an "unsubscribe" it did not ask for.
func (s *pubsubServer) kick(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pc := range s.conns {
		pc.mu.Lock()
		if pc.subs[channel] {
			delete(pc.subs, channel)
			io.WriteString(pc.c, subscription("unsubscribe", channel, len(pc.subs)))
		}
		pc.mu.Unlock()
	}
}

// publish sends a message on channel to every connection subscribed to it.
func (s *pubsubServer) publish(channel, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pc := range s.conns {
		pc.mu.Lock()
		if pc.subs[channel] {
			io.WriteString(pc.c, "*3\r\n"+bulk("message")+bulk(channel)+bulk(payload))
		}
		pc.mu.Unlock()
	}
}

func (s *pubsubServer) serve(pc *pubsubConn) {
	defer func() {
		pc.c.Close()
		s.mu.Lock()
		delete(s.conns, pc)
		s.mu.Unlock()
	}()
	r := bufio.NewReader(pc.c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		pc.mu.Lock()
		reply := pc.answer(strings.ToUpper(args[0]), args[1:])
		_, err = io.WriteString(pc.c, reply)
		pc.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// answer returns the reply to one command; pc.mu is held.
func (pc *pubsubConn) answer(name string, args []string) string {
	switch name {
	case "HELLO":
		return "-ERR unknown command 'HELLO'\r\n"
	case "AUTH", "CLIENT", "SELECT", "READONLY", "READWRITE":
		return "+OK\r\n"
	case "PING":
		payload := ""
		if len(args) > 0 {
			payload = args[0]
		}
		if len(pc.subs) > 0 { // RESP2 in pub/sub mode answers with an array
			return "*2\r\n" + bulk("pong") + bulk(payload)
		}
		if len(args) > 0 {
			return bulk(payload)
		}
		return "+PONG\r\n"
	case "SUBSCRIBE":
		if len(args) == 0 {
			return "-ERR wrong number of arguments for 'subscribe' command\r\n"
		}
		var b strings.Builder
		for _, ch := range args {
			pc.subs[ch] = true
			b.WriteString(subscription("subscribe", ch, len(pc.subs)))
		}
		return b.String()
	case "UNSUBSCRIBE":
		if len(args) == 0 {
			for ch := range pc.subs {
				args = append(args, ch)
			}
			slices.Sort(args)
			if len(args) == 0 {
				return "*3\r\n" + bulk("unsubscribe") + "$-1\r\n:0\r\n"
			}
		}
		var b strings.Builder
		for _, ch := range args {
			delete(pc.subs, ch)
			b.WriteString(subscription("unsubscribe", ch, len(pc.subs)))
		}
		return b.String()
	}
	return fmt.Sprintf("-ERR unknown command '%s'\r\n", name)
}

// subscription is the server's confirmation of a subscription's start or
// end (kind), with the number of channels left.
func subscription(kind, channel string, count int) string {
	return fmt.Sprintf("*3\r\n%s%s:%d\r\n", bulk(kind), bulk(channel), count)
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

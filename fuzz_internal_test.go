package redlock

// Fuzz targets for the port's reply rules and for New's option checks. Each
// runs its seeds as an ordinary test; to fuzz one:
//
//	go test -run '^$' -fuzz '^FuzzClassify$' -fuzztime 60s .

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/driver"
)

// fuzzReply builds a Reply from fuzzed parts: every shape a driver may hand
// back, including error replies stored as values and values no Redis sends.
func fuzzReply(kind uint8, s string, n int64, errKind uint8) driver.Reply {
	var r driver.Reply
	switch kind % 14 {
	case 0: // a null reply
	case 1:
		r.Value = s
	case 2:
		r.Value = []byte(s)
	case 3:
		r.Value = int(n)
	case 4:
		r.Value = n
	case 5:
		r.Value = []any{s, n}
	case 6:
		r.Value = redis.Error(s) // redigo's error reply, as a value
	case 7:
		r.Value = driver.ReplyError(s)
	case 8:
		r.Value = errors.New(s)
	case 9:
		r.Value = float64(n)
	case 10:
		r.Value = uint64(n)
	case 11:
		r.Value = n%2 == 0
	case 12:
		r.Value = []byte(nil)
	case 13:
		r.Value = &s
	}
	switch errKind % 4 {
	case 1:
		r.Err = driver.ReplyError(s)
	case 2:
		r.Err = errors.New(s)
	case 3:
		r.Err = fmt.Errorf("wrapped: %w", driver.ReplyError(s))
	}
	return r
}

func addReplySeeds(f *testing.F) {
	for _, s := range []string{"OK", "ok", "OK ", "", "QUEUED", "NOSCRIPT No matching script", "READONLY You can't write",
		"MOVED 3999 127.0.0.1:6381", "1", " OK", "OK\r\n"} {
		for kind := range uint8(14) {
			f.Add(kind, s, int64(1), uint8(0))
		}
		f.Add(uint8(1), s, int64(0), uint8(1))
		f.Add(uint8(6), s, int64(0), uint8(3))
	}
	for _, n := range []int64{0, 1, 2, -1, math.MaxInt64, math.MinInt64, 1 << 53} {
		f.Add(uint8(4), "", n, uint8(0))
		f.Add(uint8(3), "", n, uint8(2))
	}
}

// classify turns every reply into a value or an error, never both; an error
// reply, however a driver stored it, comes out as an error whose code is its
// first word; replyCode finds that code through wrapping, and only there.
func FuzzClassify(f *testing.F) {
	addReplySeeds(f)
	f.Fuzz(func(t *testing.T, kind uint8, s string, n int64, errKind uint8) {
		in := fuzzReply(kind, s, n, errKind)
		v, err := classify(in)
		e, errValue := in.Value.(error)
		switch {
		case in.Err != nil:
			if v != nil || err != in.Err {
				t.Fatalf("classify(%#v) = %#v, %v; want nil, the reply's error", in, v, err)
			}
		case errValue:
			if v != nil || err == nil || err.Error() != e.Error() {
				t.Fatalf("classify(%#v) = %#v, %v; want nil and a driver.ReplyError %q", in, v, err, e.Error())
			}
			var rerr driver.ReplyError
			if !errors.As(err, &rerr) {
				t.Fatalf("classify(%#v): %T is not a ReplyError", in, err)
			}
		case err != nil:
			t.Fatalf("classify(%#v) = %#v, %v; want no error without driver.Reply.Err or an error value", in, v, err)
		}
		if _, isErr := v.(error); isErr {
			t.Fatalf("classify(%#v) returned the error %v as a value", in, v)
		}
		if err == nil {
			switch x := in.Value.(type) {
			case []byte:
				if v != string(x) {
					t.Fatalf("classify(%#v) = %#v, want the string %q", in, v, x)
				}
			case int:
				if v != int64(x) {
					t.Fatalf("classify(%#v) = %#v, want int64 %d", in, v, x)
				}
			default:
				if !sameValue(v, in.Value) {
					t.Fatalf("classify(%#v) = %#v, want the value unchanged", in, v)
				}
			}
		}

		// ReplyError.Code: the text up to the first space.
		code := driver.ReplyError(s).Code()
		if !strings.HasPrefix(s, code) || strings.Contains(code, " ") ||
			(len(code) < len(s)) != strings.Contains(s, " ") || (len(code) < len(s) && s[len(code)] != ' ') {
			t.Fatalf("driver.ReplyError(%q).Code() = %q", s, code)
		}
		// replyCode sees a ReplyError through any wrapping, and nothing else.
		for _, e := range []error{driver.ReplyError(s), fmt.Errorf("x: %w", driver.ReplyError(s)),
			&NodeError{Node: 1, Err: fmt.Errorf("y: %w", driver.ReplyError(s))}} {
			if got := replyCode(e); got != code {
				t.Fatalf("replyCode(%v) = %q, want %q", e, got, code)
			}
		}
		for _, e := range []error{nil, errors.New(s), redis.Error(s), &NodeError{Err: errors.New(s)}} {
			if got := replyCode(e); got != "" {
				t.Fatalf("replyCode(%#v) = %q, want none", e, got)
			}
		}
	})
}

// sameValue compares values that may not be comparable with ==.
func sameValue(a, b any) bool {
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

// fuzzPool answers every command of every batch with one reply, or fails the
// whole batch with err.
type fuzzPool struct {
	reply driver.Reply
	err   error
}

func (p *fuzzPool) Exec(_ context.Context, _ []driver.Command, replies []driver.Reply) error {
	if p.err != nil {
		return p.err
	}
	for i := range replies {
		replies[i] = p.reply
	}
	return nil
}

// Whatever a node answers, an operation counts it as agreement only on the
// one reply that means it: OK to SET NX, a counter (an integer, not below 0)
// to the fenced acquisition, 1 to the raise and the extension, and any
// answer but an error to the release. A null reply to SET NX is a refusal;
// anything else unexpected fails the node; and an error never agrees.
func FuzzNodeAgreement(f *testing.F) {
	addReplySeeds(f)
	f.Fuzz(func(t *testing.T, kind uint8, s string, n int64, errKind uint8) {
		in := fuzzReply(kind, s, n, errKind)
		// The reply as the rules read it, worked out here rather than by
		// classify: bytes are a string, an int is an int64, and an error in
		// either field fails the node.
		value := in.Value
		switch v := in.Value.(type) {
		case []byte:
			value = string(v)
		case int:
			value = int64(v)
		}
		_, errValue := in.Value.(error)
		batchErr := errors.New("connection reset")
		for _, pool := range []*fuzzPool{{reply: in}, {reply: in, err: batchErr}} {
			failed := in.Err != nil || errValue || pool.err != nil
			nd := newNode(0, pool)
			a := newCmdArgs("k", "token", time.Second, "")
			a.fenceKey = fenceKey("k")
			ctx, deadline := context.Background(), time.Now().Add(time.Minute)

			yes, err := nd.setNX(ctx, deadline, &a)
			ok := !failed && value == "OK"
			if yes != ok || yes && err != nil {
				t.Fatalf("setNX on %#v (batch error %v) = %v, %v; want agreement %v", in, pool.err, yes, err, ok)
			}
			if !yes && (err == nil) != (!failed && value == nil) {
				t.Fatalf("setNX on %#v (batch error %v) = %v, %v: only a null reply refuses without an error", in, pool.err, yes, err)
			}
			if err != nil {
				var ne *NodeError
				if !errors.As(err, &ne) {
					t.Fatalf("setNX on %#v: error %v is not a *NodeError", in, err)
				}
			}

			counter, yes, err := nd.setNXFenced(ctx, deadline, &a)
			c, isInt := value.(int64)
			ok = !failed && isInt && c >= 0
			if yes != ok || yes && (err != nil || counter != uint64(c)) {
				t.Fatalf("setNXFenced on %#v (batch error %v) = %d, %v, %v; want agreement %v", in, pool.err, counter, yes, err, ok)
			}

			for name, op := range map[string]func() (bool, error){
				"raiseFence": func() (bool, error) { return nd.raiseFence(ctx, deadline, &a, 7) },
				"extend":     func() (bool, error) { ok, _, err := nd.extend(ctx, deadline, &a); return ok, err },
			} {
				yes, err := op()
				ok := !failed && value == int64(1)
				if yes != ok || yes && err != nil {
					t.Fatalf("%s on %#v (batch error %v) = %v, %v; want agreement %v", name, in, pool.err, yes, err, ok)
				}
			}
			yes, err = nd.release(ctx, deadline, &a)
			if yes != !failed || yes != (err == nil) {
				t.Fatalf("release on %#v (batch error %v) = %v, %v; want agreement %v", in, pool.err, yes, err, !failed)
			}
		}
	})
}

// memPool is a Pool over one in-memory node (the simulation's), answering at
// once.
type memPool struct{ n *simNode }

func (p *memPool) Exec(_ context.Context, cmds []driver.Command, replies []driver.Reply) error {
	for i, c := range cmds {
		v, err := p.n.exec(c.Name, c.Args)
		replies[i] = driver.Reply{Value: v, Err: err}
	}
	return nil
}

// New accepts exactly the option values its documentation allows, and
// refuses every other with an error wrapping ErrInvalid, never a panic. A
// client it accepts works: it locks, refuses a second holder (through
// Lock's retries and its retry delays), extends and unlocks.
func FuzzNew(f *testing.F) {
	ms, s := int64(time.Millisecond), int64(10*time.Second)
	for _, seed := range []struct {
		tries                           int
		retryMin, retryMax, nodeTimeout int64
		drift                           float64
		nodes                           uint8
	}{
		{defaultTries, int64(defaultRetryDelayMin), int64(defaultRetryDelayMax), int64(defaultNodeTimeout), defaultDriftFactor, 3},
		{1, 0, 0, s, 0, 1},
		{0, 0, 0, s, 0, 5},
		{-1, ms, ms, s, 0.5, 5},
		{3, 2 * ms, ms, s, 0.01, 5},
		{3, -1, ms, s, 0.01, 5},
		{3, 0, math.MaxInt64, s, 0.01, 5},
		{3, 1, math.MaxInt64, s, 0.01, 5},
		{3, math.MaxInt64, math.MaxInt64, s, 0.01, 5},
		{3, ms, ms, 0, 0.01, 5},
		{3, ms, ms, -s, 0.01, 5},
		{3, ms, ms, 1, 0.01, 5},
		{3, ms, ms, math.MaxInt64, 0.01, 5},
		{3, ms, ms, s, 1, 5},
		{3, ms, ms, s, math.Nextafter(1, 0), 5},
		{3, ms, ms, s, 0.9, 5},
		{3, ms, ms, s, -0.01, 5},
		{3, ms, ms, s, math.NaN(), 5},
		{3, ms, ms, s, math.Inf(1), 5},
		{math.MaxInt, 0, ms, s, 0.01, 7},
	} {
		f.Add(seed.tries, seed.retryMin, seed.retryMax, seed.nodeTimeout, seed.drift, seed.nodes)
	}
	f.Fuzz(func(t *testing.T, tries int, retryMin, retryMax, nodeTimeout int64, driftFactor float64, nodes uint8) {
		pools := make([]Pool, 1+nodes%7)
		for i := range pools {
			pools[i] = &memPool{newSimNode(1)}
		}
		rmin, rmax, nt := time.Duration(retryMin), time.Duration(retryMax), time.Duration(nodeTimeout)
		client, err := New(pools, WithTries(tries), WithRetryDelay(rmin, rmax),
			WithDriftFactor(driftFactor), WithNodeTimeout(nt))

		// The documented ranges, written out again.
		valid := tries >= 1 && rmin >= 0 && rmin <= rmax && rmax-rmin < math.MaxInt64 &&
			driftFactor >= 0 && driftFactor < 1 && nt > 0
		if !valid {
			if client != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("New(tries %d, retry [%v, %v], drift %v, node timeout %v) = %v, %v; want an error wrapping ErrInvalid",
					tries, rmin, rmax, driftFactor, nt, client, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(tries %d, retry [%v, %v], drift %v, node timeout %v): %v", tries, rmin, rmax, driftFactor, nt, err)
		}

		ctx := context.Background()
		const ttl = 10 * time.Second
		held, err := client.TryLock(ctx, "k", ttl)
		if ttl <= drift(ttl, driftFactor) {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("drift %v: TryLock with a ttl inside the drift allowance = %v, want ErrInvalid", driftFactor, err)
			}
			return
		}
		// A node timeout or a validity window this short promises no answer
		// in time on a loaded machine: each call may then fail, but only as
		// documented.
		lenient := nt < 5*time.Second || ttl-drift(ttl, driftFactor) < 5*time.Second
		if lenient {
			if err != nil {
				if !errors.Is(err, ErrNotObtained) {
					t.Fatalf("TryLock with node timeout %v: %v", nt, err)
				}
				return
			}
			defer held.Unlock(ctx)
		} else if err != nil {
			t.Fatalf("TryLock: %v", err)
		}

		// A second holder is refused: with tries > 1, through retry delays
		// drawn from [min, max] until its context ends.
		short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		if l, err := client.Lock(short, "k", ttl); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("Lock of a held key = %v, %v; want ErrNotObtained", l, err)
		}
		if lenient {
			return
		}
		if err := held.Extend(ctx, ttl); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		again, err := client.TryLock(ctx, "k", ttl)
		if err != nil {
			t.Fatalf("TryLock after Unlock: %v", err)
		}
		_ = again.Unlock(ctx)
	})
}

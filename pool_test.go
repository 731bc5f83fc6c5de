package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/quorumlock/redlock/driver"
)

// Every way a driver may report an error reply comes out as an error, never
// as a value that could count as agreement.
func TestClassify(t *testing.T) {
	netErr := errors.New("connection reset")
	for _, tc := range []struct {
		name      string
		in        driver.Reply
		wantValue any
		wantCode  string
		wantErr   error
	}{
		{"status", driver.Reply{Value: "OK"}, "OK", "", nil},
		{"bulk as bytes", driver.Reply{Value: []byte("tok")}, "tok", "", nil},
		{"int", driver.Reply{Value: 7}, int64(7), "", nil},
		{"int64", driver.Reply{Value: int64(7)}, int64(7), "", nil},
		{"null", driver.Reply{}, nil, "", nil},
		{"error reply", driver.Reply{Err: driver.ReplyError("NOPERM no")}, nil, "NOPERM", nil},
		{"error reply with a value beside it", driver.Reply{Value: redis.Error("OOM full"), Err: driver.ReplyError("OOM full")}, nil, "OOM", nil},
		{"error reply stored as the value", driver.Reply{Value: redis.Error("READONLY replica")}, nil, "READONLY", nil},
		{"other error", driver.Reply{Err: netErr}, nil, "", netErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := classify(tc.in)
			if v != tc.wantValue {
				t.Errorf("value = %#v, want %#v", v, tc.wantValue)
			}
			if got := replyCode(err); got != tc.wantCode {
				t.Errorf("code = %q, want %q (err %v)", got, tc.wantCode, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantCode == "" && tc.wantErr == nil && err != nil {
				t.Errorf("err = %v, want none", err)
			}
		})
	}
}

// replyPool answers every command with one fixed reply.
type replyPool struct{ r driver.Reply }

func (p replyPool) Exec(_ context.Context, _ []driver.Command, replies []driver.Reply) error {
	for i := range replies {
		replies[i] = p.r
	}
	return nil
}

// SET NX agrees only on OK: a null reply refuses, and any other value,
// which no Redis sends, fails the node rather than counting.
func TestSetNXAgreesOnlyOnOK(t *testing.T) {
	for _, tc := range []struct {
		reply   driver.Reply
		yes     bool
		failure bool
	}{
		{driver.Reply{Value: "OK"}, true, false},
		{driver.Reply{Value: []byte("OK")}, true, false},
		{driver.Reply{}, false, false},
		{driver.Reply{Value: "QUEUED"}, false, true},
		{driver.Reply{Value: int64(1)}, false, true},
		{driver.Reply{Value: redis.Error("LOADING")}, false, true},
	} {
		n := newNode(0, replyPool{tc.reply})
		a := newCmdArgs("k", "t", time.Second, "")
		yes, err := n.setNX(context.Background(), time.Now().Add(time.Second), &a)
		if yes != tc.yes || (err != nil) != tc.failure {
			t.Errorf("reply %#v: agreed %v, err %v; want agreed %v, failure %v", tc.reply, yes, err, tc.yes, tc.failure)
		}
	}
}

// SET NX GET, a contended attempt's SET, agrees only on a null reply (the
// key was absent and is now set); a string refuses and names the holder,
// which is kept unless it is the attempt's own token (a SET the driver
// sent twice); any other value fails the node.
func TestSetNXGetAgreesOnlyOnNull(t *testing.T) {
	for _, tc := range []struct {
		reply   driver.Reply
		yes     bool
		failure bool
		holder  string
	}{
		{driver.Reply{}, true, false, ""},
		{driver.Reply{Value: "theirs"}, false, false, "theirs"},
		{driver.Reply{Value: []byte("theirs")}, false, false, "theirs"},
		{driver.Reply{Value: ""}, false, false, ""},  // an empty value is still a holder's
		{driver.Reply{Value: "t"}, false, false, ""}, // its own token: no other holder
		{driver.Reply{Value: int64(1)}, false, true, ""},
		{driver.Reply{Value: redis.Error("ERR syntax error")}, false, true, ""}, // a server before 7.0: plain SET NX, refused the same here
		{driver.Reply{Value: redis.Error("ERR max number of clients reached")}, false, true, ""},
	} {
		n := newNode(0, replyPool{tc.reply})
		a := newCmdArgs("k", "t", time.Second, "")
		a.refused = new(refusals)
		yes, err := n.setNX(context.Background(), time.Now().Add(time.Second), &a)
		if yes != tc.yes || (err != nil) != tc.failure {
			t.Errorf("reply %#v: agreed %v, err %v; want agreed %v, failure %v", tc.reply, yes, err, tc.yes, tc.failure)
		}
		// Only the syntax error of a server before 7.0 marks the node, and
		// the SET resent as plain SET NX, which a release may overtake.
		old := tc.reply.Value == redis.Error("ERR syntax error")
		if n.noGet.Load() != old || (a.fellBack.Load() != 0) != old {
			t.Errorf("reply %#v: noGet %v, fellBack %b; want %v", tc.reply, n.noGet.Load(), a.fellBack.Load(), old)
		}
		want := []string(nil)
		if tc.holder != "" || tc.reply.Value == "" {
			want = []string{tc.holder}
		}
		if !slices.Equal(a.refused.tokens, want) {
			t.Errorf("reply %#v: refusals %q, want %q", tc.reply, a.refused.tokens, want)
		}
	}
}

// recordPool answers every command with r and keeps the last batch.
type recordPool struct {
	r    driver.Reply
	last []driver.Command
}

func (p *recordPool) Exec(_ context.Context, cmds []driver.Command, replies []driver.Reply) error {
	p.last = nil
	for _, c := range cmds { // the pipe reuses the arguments afterwards
		c.Args = slices.Clone(c.Args)
		p.last = append(p.last, c)
	}
	for i := range replies {
		replies[i] = p.r
	}
	return nil
}

// A contended attempt's SET, on a goroutine (setNX) or in the pipe
// (setNXAsync), asks for the holder; a first attempt's does not.
func TestSetNXAsksForTheHolderWhenContended(t *testing.T) {
	deadline := time.Now().Add(time.Second)
	for _, contended := range []bool{false, true} {
		a := newCmdArgs("k", "t", time.Second, "")
		want := []any{"k", "t", "NX", "PX", int64(1000)}
		if contended {
			a.refused = new(refusals)
			want = append(want, "GET")
		}
		p := &recordPool{}
		n := newNode(0, p)
		if _, err := n.setNX(context.Background(), deadline, &a); err != nil {
			t.Fatal(err)
		}
		if len(p.last) != 1 || p.last[0].Name != "SET" || !slices.Equal(p.last[0].Args, want) {
			t.Errorf("contended %v: setNX sent %v, want SET %v", contended, p.last, want)
		}
		op := a.setNXAsync()
		if op.name != "SET" || !slices.Equal(op.args, want) {
			t.Errorf("contended %v: setNXAsync sends %s %v, want SET %v", contended, op.name, op.args, want)
		}
		// The async reader reads the reply as setNX does.
		yes, err, retry := op.read(n, nil, nil, deadline)
		if yes != contended || err != nil || retry {
			t.Errorf("contended %v: a null reply read as %v, %v, %v; want agreement %v", contended, yes, err, retry, contended)
		}
		if !contended {
			continue
		}
		yes, err, _ = op.read(n, "theirs", nil, deadline)
		if yes || err != nil {
			t.Errorf("a holder's token read as %v, %v; want a refusal", yes, err)
		}
		if got := a.refused.holder(1); got != "theirs" {
			t.Errorf("refusals %q, want the holder's token kept", a.refused.tokens)
		}
	}
}

// lazyPool answers no command and reports no error, against the port's
// contract.
type lazyPool struct{}

func (lazyPool) Exec(context.Context, []driver.Command, []driver.Reply) error { return nil }

// A reply slot the Pool leaves unset fails its command: it must not read as
// the null reply with which SET ... NX GET agrees.
func TestUnsetReplyIsNoAgreement(t *testing.T) {
	n := newNode(0, lazyPool{})
	a := newCmdArgs("k", "t", time.Second, "")
	a.refused = new(refusals)
	yes, err := n.setNX(context.Background(), time.Now().Add(time.Second), &a)
	if yes || err == nil {
		t.Errorf("SET ... NX GET with no reply set: agreed %v, err %v; want a failure", yes, err)
	}
}

// The holder on a quorum is a token that refused on need nodes; fewer, or
// a quorum split among tokens, name none.
func TestRefusalsHolder(t *testing.T) {
	for _, tc := range []struct {
		tokens []string
		need   int
		want   string
	}{
		{nil, 1, ""},
		{[]string{"a"}, 1, "a"},
		{[]string{"a", "a"}, 3, ""},
		{[]string{"a", "b", "a", "a"}, 3, "a"},
		{[]string{"b", "a", "a"}, 2, "a"},
		{[]string{"a", "b", "c"}, 2, ""},
		{[]string{"b", "b", "a", "a", "a"}, 3, "a"},
	} {
		r := refusals{tokens: tc.tokens}
		if got := r.holder(tc.need); got != tc.want {
			t.Errorf("holder(%d) of %q = %q, want %q", tc.need, tc.tokens, got, tc.want)
		}
	}
}

// The fencing counter shares its lock key's Redis Cluster hash slot.
func TestFenceKeySharesTheSlot(t *testing.T) {
	for key, want := range map[string]string{
		"job":           "redlock:fence:{job}",
		"user:{42}:job": "redlock:fence:user:{42}:job", // the key's own tag
		"a{b":           "redlock:fence:{a{b}",
		"{x}":           "redlock:fence:{x}",
		// No tag, and a '}' that stops the key from being one: the plain
		// prefix, which shares no slot (standalone masters only).
		"a}b":             "redlock:fence:a}b",
		"a{}b":            "redlock:fence:a{}b", // an empty tag is no tag
		"{}{x}":           "redlock:fence:{}{x}",
		"k{a}{b}":         "redlock:fence:k{a}{b}",
		"redlock:fence:x": "redlock:fence:{redlock:fence:x}",
	} {
		if got := fenceKey(key); got != want {
			t.Errorf("fenceKey(%q) = %q, want %q", key, got, want)
		}
		if !hasHashTag(key) && !strings.Contains(key, "}") && slotTag(fenceKey(key)) != key {
			t.Errorf("fenceKey(%q) = %q hashes by %q, not by the key", key, fenceKey(key), slotTag(fenceKey(key)))
		}
		if hasHashTag(key) && slotTag(fenceKey(key)) != slotTag(key) {
			t.Errorf("fenceKey(%q) = %q hashes by %q, the key by %q", key, fenceKey(key), slotTag(fenceKey(key)), slotTag(key))
		}
	}
}

// slotTag returns what Redis Cluster hashes key by, as its keyHashSlot does.
func slotTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key
					}
					return key[i+1 : j]
				}
			}
			return key
		}
	}
	return key
}

// laneOf spreads keys over every lane, and keeps one key on one lane.
func TestLaneOf(t *testing.T) {
	seen := map[int]bool{}
	for i := range 1000 {
		key := "key:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		l := laneOf(key)
		if l < 0 || l >= lanes {
			t.Fatalf("laneOf(%q) = %d, out of range", key, l)
		}
		if laneOf(key) != l {
			t.Fatalf("laneOf(%q) changed", key)
		}
		seen[l] = true
	}
	if len(seen) != lanes {
		t.Errorf("1000 keys used %d of %d lanes", len(seen), lanes)
	}
}

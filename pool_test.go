package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Every way a driver may report an error reply comes out as an error, never
// as a value that could count as agreement.
func TestClassify(t *testing.T) {
	netErr := errors.New("connection reset")
	for _, tc := range []struct {
		name      string
		in        Reply
		wantValue any
		wantCode  string
		wantErr   error
	}{
		{"status", Reply{Value: "OK"}, "OK", "", nil},
		{"bulk as bytes", Reply{Value: []byte("tok")}, "tok", "", nil},
		{"int", Reply{Value: 7}, int64(7), "", nil},
		{"int64", Reply{Value: int64(7)}, int64(7), "", nil},
		{"null", Reply{}, nil, "", nil},
		{"error reply", Reply{Err: ReplyError("NOPERM no")}, nil, "NOPERM", nil},
		{"error reply with a value beside it", Reply{Value: redis.Error("OOM full"), Err: ReplyError("OOM full")}, nil, "OOM", nil},
		{"error reply stored as the value", Reply{Value: redis.Error("READONLY replica")}, nil, "READONLY", nil},
		{"other error", Reply{Err: netErr}, nil, "", netErr},
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
type replyPool struct{ r Reply }

func (p replyPool) Exec(_ context.Context, _ []Command, replies []Reply) error {
	for i := range replies {
		replies[i] = p.r
	}
	return nil
}

// SET NX agrees only on OK: a null reply refuses, and any other value,
// which no Redis sends, fails the node rather than counting.
func TestSetNXAgreesOnlyOnOK(t *testing.T) {
	for _, tc := range []struct {
		reply   Reply
		yes     bool
		failure bool
	}{
		{Reply{Value: "OK"}, true, false},
		{Reply{Value: []byte("OK")}, true, false},
		{Reply{}, false, false},
		{Reply{Value: "QUEUED"}, false, true},
		{Reply{Value: int64(1)}, false, true},
		{Reply{Value: redis.Error("LOADING")}, false, true},
	} {
		n := newNode(0, replyPool{tc.reply})
		a := newCmdArgs("k", "t", time.Second, "")
		yes, err := n.setNX(context.Background(), time.Now().Add(time.Second), &a)
		if yes != tc.yes || (err != nil) != tc.failure {
			t.Errorf("reply %#v: agreed %v, err %v; want agreed %v, failure %v", tc.reply, yes, err, tc.yes, tc.failure)
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

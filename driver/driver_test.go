package driver

import (
	"slices"
	"testing"
)

// Diff adds the channels wanted and not had, in the order given, and
// drops the ones had and no longer wanted, sorted; have ends up as the
// set wanted.
func TestSubscriptionDiff(t *testing.T) {
	want := []string{"anchor", "b", "a"}
	s := &Subscription{Channels: func() []string { return want }}
	have := map[string]bool{}
	add, drop := s.Diff(have)
	if !slices.Equal(add, []string{"anchor", "b", "a"}) || drop != nil {
		t.Fatalf("first Diff: add %v, drop %v", add, drop)
	}
	want = []string{"anchor", "c"}
	add, drop = s.Diff(have)
	if !slices.Equal(add, []string{"c"}) || !slices.Equal(drop, []string{"a", "b"}) {
		t.Fatalf("second Diff: add %v, drop %v; want [c] and [a b]", add, drop)
	}
	if len(have) != 2 || !have["anchor"] || !have["c"] {
		t.Fatalf("have = %v, want anchor and c", have)
	}
	if add, drop = s.Diff(have); add != nil || drop != nil {
		t.Fatalf("Diff with nothing changed: add %v, drop %v", add, drop)
	}
}

// Each confirmation answers one UNSUBSCRIBE sent; one more is the
// server's own.
func TestUnsubscribes(t *testing.T) {
	var u Unsubscribes
	if u.Confirmed("a") {
		t.Fatal("a confirmation with nothing sent counted as asked for")
	}
	u.Sending([]string{"a", "b"})
	u.Sending([]string{"a"})
	for i, ch := range []string{"a", "b", "a"} {
		if !u.Confirmed(ch) {
			t.Fatalf("confirmation %d, of %s, not counted as asked for", i, ch)
		}
	}
	for _, ch := range []string{"a", "b"} {
		if u.Confirmed(ch) {
			t.Errorf("a confirmation of %s beyond those sent counted as asked for", ch)
		}
	}
	if len(u.pending) != 0 {
		t.Errorf("pending %v after every confirmation, want none", u.pending)
	}
}

package redlock

import (
	"testing"

	"github.com/quorumlock/redlock/internal/keys"
)

// The names in internal/keys, which redlock status reads, are the ones the
// primitives write.
func TestKeysAgreeWithPrimitives(t *testing.T) {
	for _, k := range []string{"job", "{app}:job", "a}b", "x{}y", ""} {
		if got, want := keys.Semaphore(k), SemaphoreKey(k); got != want {
			t.Errorf("keys.Semaphore(%q) = %q, want %q", k, got, want)
		}
		w, r, i := rwNames(k)
		if gw, gr, gi := keys.RW(k); gw != w || gr != r || gi != i {
			t.Errorf("keys.RW(%q) = %q %q %q, want %q %q %q", k, gw, gr, gi, w, r, i)
		}
		if got, want := keys.Leader(k), leaderKey(k); got != want {
			t.Errorf("keys.Leader(%q) = %q, want %q", k, got, want)
		}
	}
}

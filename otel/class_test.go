package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	redlockotel "github.com/quorumlock/redlock/otel"
)

func TestErrorTypes(t *testing.T) {
	nodeErr := func(err error) error { return &redlock.NodeError{Node: 1, Err: err} }
	notObtained := func(causes ...error) error { return errors.Join(append([]error{redlock.ErrNotObtained}, causes...)...) }
	for _, c := range []struct {
		err                 error
		class               string // as the Client sets Event.Class
		call, release, loss string
	}{
		{nil, "", "", "", "expired"},
		{notObtained(), "", "refused", "refused", "refused"},
		{notObtained(nodeErr(errors.New("connection refused"))), "io", "io", "io", "expired"},
		{notObtained(nodeErr(errors.New("connection refused")), nodeErr(redlock.ErrNodeTimeout)), "timeout", "timeout", "timeout", "expired"},
		{notObtained(nodeErr(driver.ReplyError("READONLY You can't write against a read only replica."))), "READONLY", "READONLY", "READONLY", "expired"},
		{notObtained(context.Canceled), "canceled", "canceled", "canceled", "expired"},
		{notObtained(nodeErr(redlock.ErrNodeTimeout), context.DeadlineExceeded), "timeout", "deadline", "deadline", "expired"},
		{redlock.ErrExpired, "io", "expired", "expired", "expired"},
		{fmt.Errorf("%w: bad ttl", redlock.ErrInvalid), "io", "invalid", "invalid", "expired"},
		{errors.New("redlock: release not confirmed"), "io", "other", "refused", "expired"},
		{fmt.Errorf("%w: %w: gone on 2 of 3 nodes", redlock.ErrNotObtained, redlock.ErrLockLost), "io", "lost", "lost", "refused"},
		{fmt.Errorf("%w: validity ran out before fn returned", redlock.ErrLockLost), "io", "lost", "lost", "expired"},
	} {
		if got := redlockotel.CallClass(c.err, c.class); got != c.call {
			t.Errorf("call class of %v: %q, want %q", c.err, got, c.call)
		}
		if c.err == nil {
			continue
		}
		if got := redlockotel.ReleaseClass(c.err, c.class); got != c.release {
			t.Errorf("release class of %v: %q, want %q", c.err, got, c.release)
		}
		if got := redlockotel.LossClass(c.err); got != c.loss {
			t.Errorf("loss class of %v: %q, want %q", c.err, got, c.loss)
		}
	}
}

package valkeygo_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes what it opens: clients, subscriptions, servers. The
// exceptions are the driver's own: after a cluster node dies, a closed
// cluster client's slot refresh may still be sleeping out its back-off, and
// ends by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/quorumlock/redlock/internal/redistest"
)

// A managed service refuses CONFIG (ElastiCache, Memorystore, Azure,
// Aiven), some refuse INFO: simulated with rename-command. Those checks are
// UNKNOWN with the reason; the rest is judged, and a real FAIL still fails.
func TestDoctorRenamedCommands(t *testing.T) {
	t.Parallel()
	noConfig := redistest.Start(t, append(aof(t, "always"), "--rename-command", "CONFIG", "")...)
	noInfo := redistest.Start(t, "--rename-command", "INFO", "")
	plain := redistest.Start(t, append(aof(t, "always"), "--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru")...)
	servers := []*redistest.Server{noConfig, noInfo, plain}

	r := cli(nil, doctorArgs(servers)...)
	if r.code != exitUnsound {
		t.Fatalf("exit %d, want %d for the allkeys-lru node\n%s", r.code, exitUnsound, r.stdout)
	}
	has(t, r.line(t, sevUnknown, noConfig.Addr, "persistence"), "appendfsync unknown", "refused CONFIG GET", "unknown command", "provider's settings", "appendfsync is always")
	r.line(t, sevOK, noConfig.Addr, "version")
	r.line(t, sevOK, noConfig.Addr, "eviction")
	r.line(t, sevOK, noConfig.Addr, "role")
	r.line(t, sevOK, noConfig.Addr, "clock")

	has(t, r.line(t, sevUnknown, noInfo.Addr, "info"), "refused INFO", "unknown command", "provider's settings")
	r.line(t, sevOK, noInfo.Addr, "clock") // TIME still works: judged
	has(t, r.line(t, sevFail, plain.Addr, "eviction"), "allkeys-lru")
	has(t, r.stdout, "1 FAIL, ", "2 UNKNOWN")

	// Without the FAIL, the unknowns alone do not fail the deployment.
	r = cli(nil, doctorArgs(servers[:2])...)
	if r.code != exitUnsound { // 2 nodes: the count check fails
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	r.line(t, sevFail, "all", "count")
}

// Fields missing from INFO (a service that filters it) make only the checks
// that need them UNKNOWN.
func TestDoctorPartialInfo(t *testing.T) {
	cfg := &doctorConfig{nodes: []string{"a:1", "b:1", "c:1"}, maxTTL: 30e9, driftFactor: 0.01, conn: &conn{}}
	full := map[string]string{"redis_version": "7.2.4", "aof_enabled": "0", "maxmemory": "0", "maxmemory_policy": "noeviction", "role": "master", "connected_slaves": "0"}
	facts := []nodeFacts{
		{addr: "a:1", info: map[string]string{"redis_version": "7.2.4", "role": "master", "aof_enabled": "1"}, appendfsync: "always", clock: clockRate{rate: 1, uncertainty: 0.0001}},
		{addr: "b:1", info: full, clock: clockRate{rate: 1, uncertainty: 0.0001}},
		{addr: "c:1", info: full, clock: clockRate{rate: 1, uncertainty: 0.0001}},
	}
	findings := diagnose(cfg, facts)
	sev := map[string]severity{}
	for _, f := range findings {
		if f.node == "a:1" {
			sev[f.check] = f.sev
		}
	}
	for check, want := range map[string]severity{"version": sevOK, "persistence": sevOK, "eviction": sevUnknown, "role": sevOK, "identity": sevUnknown, "clock": sevOK} {
		if sev[check] != want {
			t.Errorf("a:1 %s = %s, want %s", check, sev[check], want)
		}
	}
}

func TestDoctorJSON(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	r := cli(nil, append(doctorArgs(servers), "--json")...)
	var got doctorJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	// No persistence on test nodes: FAIL, exit 78, in the object too.
	if r.code != exitUnsound || got.Exit != exitUnsound || got.Fail != 3 || len(got.Findings) == 0 {
		t.Fatalf("exit %d, object %+v", r.code, got)
	}
	found := false
	for _, f := range got.Findings {
		found = found || f.Level == "FAIL" && f.Node == servers[0].Addr && f.Check == "persistence" && f.Fix != ""
	}
	if !found {
		t.Errorf("no FAIL persistence finding for %s with a fix in %+v", servers[0].Addr, got.Findings)
	}
}

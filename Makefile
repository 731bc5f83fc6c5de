# make test: the whole suite, every module, installing what it needs first.
# make bench: the benchmarks (see docs/benchmarks.md), their tables and plots.
# make plots: redraws docs/benchmarks/*.svg from the committed results.
# make pictures: redraws docs/demo-timeline.svg and checks it in a headless browser.
# make sim: the full deterministic simulations: the mutex's 100,000 schedules, each primitive's 20,000 (docs/fencing.md).
# make soak: random faults on Redis nodes in Docker for 30 minutes, watching for leaks (docs/chaos.md).

GO ?= go
# bash with pipefail, so that a failing command piped into tee fails the target.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Chaos and integration tests fail, rather than skip, without a Docker engine.
export REDLOCK_REQUIRE_DOCKER ?= 1

.PHONY: test deps fmt vet generated bench plots sim soak pictures servers test-servers

# Every module: the root, then each folder with a go.mod of its own (the
# driver adapters, bench/...), found rather than listed.
MODULES := . $(sort $(patsubst ./%/go.mod,%,$(shell find . -mindepth 2 -name go.mod -not -path './.git/*')))

# The root module takes most of the time (the chaos suite waits on Docker,
# the simulations use the CPU), so the other modules run beside it, one
# after another; the root's output is printed once it ends. ALSO names
# more make targets for that side lane, after the modules (CI: the server
# matrix, test-servers). Every module runs even if one fails, and make
# test fails if any did.
ALSO ?=
test: deps fmt vet generated
	@rc=0; log=$$(mktemp); \
	$(GO) test -race -count=1 -timeout 18m ./... >"$$log" 2>&1 & root=$$!; \
	for m in $(filter-out .,$(MODULES)); do \
		echo "== go test $$m"; \
		(cd $$m && $(GO) test -race -count=1 -timeout 18m ./...) || rc=1; \
	done; \
	for t in $(ALSO); do \
		echo "== make $$t"; \
		$(MAKE) --no-print-directory $$t || rc=1; \
	done; \
	wait $$root || rc=1; \
	echo "== go test ."; cat "$$log"; rm -f "$$log"; \
	exit $$rc

# Debian's redis-server provides the real Redis nodes: local processes for the
# integration tests, and the binary the container image is built from.
# redis-tools' redis-cli joins the Redis Cluster members of the adapters' tests;
# faketime's libfaketime runs nodes whose clocks run fast or slow (the chaos
# suite's clock-rate scenarios, redlock doctor's clock check).
deps:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 || ! command -v faketime >/dev/null 2>&1; then \
		echo "installing redis-server, redis-tools and faketime"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server redis-tools faketime >/dev/null; \
	fi
	@redis-server --version

# The server builds of the test matrix (scripts/servers.sh): Redis 7.0 and
# 8.0, Valkey 8.0 and 8.1, installed under .servers/; one line per build,
# NAME VERSION PATH. Fast when they are already there.
servers:
	@bash scripts/servers.sh

# The server matrix: for each build of make servers, the conformance kit
# (redigo's, and go-redis's in its advised ContextTimeout mode, with Cluster
# members), one real-node test or more per primitive, and the replica,
# Sentinel and Cluster failover tests, with REDLOCK_SERVER pointing
# internal/redistest at the build. CI (.ci/run) runs it beside the root's
# tests (make test ALSO=test-servers), skipping (SERVERS_SKIP=redis-server)
# the build whose path is the system's redis-server, on which make test
# runs everything; make test alone does not. docs/drivers.md gives the
# times.
SERVERS_RUN ?= ^(TestRealAcquireAndRefuse|TestRealExtend|TestRealScriptFlush|TestRealLostAttemptReleases|TestRealOnlyOwnToken|TestRealSemaphoreKeysApartFromMutex|TestRealRWMutexWriterFencing|TestRealRWMutexNoUpgradeOrDowngrade|TestRealElectionProclaim|TestRealElectionPublishObserved|TestRealPrimitivesRefuseOnOOM|TestRealPermitSurface|TestRealFailoverLosesUnacknowledgedVote|TestRealReplicaAcks.*)$$
SERVERS_GOREDIS_RUN ?= ^(TestConformance/ContextTimeout|TestSentinelFailoverDuringHeldLock|TestClusterReplicaAcksKeepLockAfterFailover)$$
SERVERS_SKIP ?=

test-servers: deps
	@set -e; bash scripts/servers.sh >.servers.list; \
	while read -r name version path; do \
		case "$$(basename "$$path")" in "$(or $(SERVERS_SKIP),-)") \
			[ "$$path" = "$$(command -v redis-server)" ] && { echo "== $$name $$version: run by the suite above"; continue; };; esac; \
		echo "== $$name $$version ($$path)"; \
		export REDLOCK_SERVER=$$path REDLOCK_REQUIRE_REDIS=1; \
		$(GO) test -race -count=1 -timeout 10m -run '$(SERVERS_RUN)' . ; \
		$(GO) test -race -count=1 -timeout 10m -run 'Conformance' ./redigo ; \
		(cd goredis && $(GO) test -race -count=1 -timeout 10m -run '$(SERVERS_GOREDIS_RUN)' .) ; \
	done <.servers.list; rm -f .servers.list

# valkeygo is generated from rueidis (rueidis/gen_valkeygo.go): the two
# adapters are one source. Fails if the generated copy is out of date.
generated:
	cd rueidis && $(GO) run gen_valkeygo.go -check

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# With -race, as the tests build: vet compiles every dependency to check a
# package, and the tests then find them compiled. Without it, make test
# compiled the whole tree twice before its first test.
vet:
	@set -e; for m in $(MODULES); do echo "== go vet -race $$m"; (cd $$m && $(GO) vet -race ./...); done

# The benchmarks: the root package against the floor, then bench/ (its own
# module) against redsync, on local redis-server nodes. Results go to
# *.bench.txt and through benchstat; see docs/benchmarks.md.
BENCH_COUNT ?= 6
BENCH_TIME ?= 1s
BENCH ?= .
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@latest

bench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 60m . | tee root.bench.txt
	rm -f $(WAITS_CSV) # BenchmarkHandover appends every wait of its w=8 case to it, for the CDF plot
	cd bench && REDLOCK_BENCH_WAITS=$(CURDIR)/$(WAITS_CSV) $(GO) test -run '^$$' -bench '$(BENCH)' -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 60m . | tee ../peer.bench.txt
	cd bench && $(GO) test -count 1 -v -run TestRedsyncFrozenNodeWithoutReadTimeout .
	$(BENCHSTAT) -col /impl root.bench.txt
	$(BENCHSTAT) -col /impl peer.bench.txt
	@echo "== the targets of docs/benchmarks.md, from this run"
	$(BENCHTARGETS) -root $(CURDIR)/root.bench.txt -peer $(CURDIR)/peer.bench.txt
	$(BENCHPLOT) -peer $(CURDIR)/peer.bench.txt -waits $(CURDIR)/$(WAITS_CSV) \
		-note "make bench at $$(git rev-parse --short HEAD 2>/dev/null), $$(date -u +%F)" -out $(CURDIR)/docs/benchmarks

# The plots of the results committed in docs/benchmarks/ (tools/benchplot, a
# module of its own, so that the root go.mod does not grow by gonum/plot).
BENCHPLOT ?= $(GO) -C tools/benchplot run .
# Each target's measured ratio, met or missed (tools/benchplot/targets).
BENCHTARGETS ?= $(GO) -C tools/benchplot run ./targets
WAITS_CSV ?= docs/benchmarks/contention-waits.csv

plots:
	$(BENCHPLOT) -peer $(CURDIR)/docs/benchmarks/peer.txt -adapters $(CURDIR)/docs/benchmarks/adapters.txt \
		-waits $(CURDIR)/$(WAITS_CSV) -out $(CURDIR)/docs/benchmarks

# The mutex's simulation, with wake-up and re-seeding (100,000 schedules),
# then each primitive's (20,000 each): the semaphore, the RW lock and
# election. SIM_PRIMITIVES sets the latter count.
SIM_PRIMITIVES ?= 20000

sim:
	REDLOCK_SIM_SCHEDULES=$${REDLOCK_SIM_SCHEDULES:-100000} $(GO) test -run 'TestSimulation$$' -count=1 -timeout 180m -v .
	REDLOCK_SIM_SCHEDULES=$(SIM_PRIMITIVES) $(GO) test -run 'TestSimulation(Semaphore|RWMutex|Election)$$' -count=1 -timeout 300m -v .

# The soak test (soak_test.go): REDLOCK_SOAK_DURATION long, 30 minutes by
# default; a longer one needs a SOAK_TIMEOUT of at least 10 minutes more.
SOAK_TIMEOUT ?= 3h

soak: deps
	REDLOCK_SOAK_DURATION=$${REDLOCK_SOAK_DURATION:-30m} $(GO) test -race -run 'TestSoak$$' -count=1 -timeout $(SOAK_TIMEOUT) -v .

# The demo as a picture (README.md): redraws docs/demo-timeline.svg with the
# command the README names, then opens it in a headless browser (Debian's
# chromium, installed here if missing, never by make test) and fails unless
# the screenshot shows the picture: not blank, and with the lock holds' blue.
PICTURE ?= docs/demo-timeline.svg
PICTURE_PNG ?= $(or $(TMPDIR),/tmp)/redlock-demo-timeline.png

pictures:
	$(GO) run ./cmd/redlock demo --svg $(PICTURE)
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing chromium"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; \
	fi
	rm -f $(PICTURE_PNG)
	timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1100,440 \
		--screenshot=$(PICTURE_PNG) file://$(CURDIR)/$(PICTURE) 2>/dev/null
	$(GO) -C tools/benchplot run ./pngcheck -color '#3b6fc4' -min 500 $(PICTURE_PNG)

# The Go floor (CHANGELOG.md, version policy): the root and the adapters
# declare go 1.25.0, so make test builds and vets every one of them, test
# files included, with the newest Go 1.25 release, which the go command
# fetches through the module proxy. FLOOR_TESTED names the modules whose
# -short suites also run with it (every test that -short keeps, except the
# Docker chaos scenarios and the soak, FLOOR_SKIP); by default none: the
# full suites run with the current Go, and running the root module's
# -short suite a second time under 1.25 took about 110 s (with the
# command's tests) of make test's 15 minutes, which a slower day's machine
# no longer had. make test-floor FLOOR_TESTED=. runs it. It builds with
# -trimpath, as tools/release's consumer check does with the same
# toolchain, so that the check, which make test runs later, finds the
# dependencies compiled: on a fresh machine its test took 164 s after the
# floor without -trimpath, 55 s after the floor with it.
GO_FLOOR ?= go1.25.14
FLOOR_MODULES ?= . goredis otel rueidis valkeygo
FLOOR_TESTED ?=
FLOOR_SKIP ?= ^(TestChaos|TestSoak)

.PHONY: test-floor
test: test-floor
test-floor:
	@set -e; for m in $(FLOOR_MODULES); do \
		case " $(FLOOR_TESTED) " in *" $$m "*) run='.';; *) run='^$$';; esac; \
		echo "== GOTOOLCHAIN=$(GO_FLOOR) go vet, go test -short -run '$$run' $$m"; \
		(cd $$m && export GOTOOLCHAIN=$(GO_FLOOR) GOFLAGS="$$GOFLAGS -trimpath" && \
			$(GO) vet ./... && $(GO) test -short -run "$$run" -skip '$(FLOOR_SKIP)' -count=1 -timeout 10m ./...); \
	done

# make release VERSION=vX.Y.Z: sets every module's requirement of the root
# to VERSION, checks that a fresh module outside the repository can go get
# each published module at VERSION (from a local module proxy, with Go 1.25),
# runs gorelease against the previous tag, and prints the tags to push.
# tools/release/main.go has the steps; CHANGELOG.md the version policy.
.PHONY: release
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 64; }
	$(GO) -C tools/release run . -version $(VERSION) -toolchain $(GO_FLOOR)

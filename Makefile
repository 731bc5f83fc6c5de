# make test: the whole suite, installing what it needs first.
# make bench: the benchmarks (see docs/benchmarks.md).
# make sim: the full deterministic simulation, 100,000 schedules (docs/fencing.md).

GO ?= go
# bash with pipefail, so that a failing command piped into tee fails the target.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Chaos and integration tests fail, rather than skip, without a Docker engine.
export REDLOCK_REQUIRE_DOCKER ?= 1

.PHONY: test deps fmt vet bench sim

test: deps fmt vet
	$(GO) test -race -count=1 -timeout 18m ./...

# Debian's redis-server provides the real Redis nodes: local processes for the
# integration tests, and the binary the container image is built from.
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The benchmarks: the root package against the floor, then bench/ (its own
# module) against redsync, on local redis-server nodes. Results go to
# *.bench.txt and through benchstat; see docs/benchmarks.md.
BENCH_COUNT ?= 6
BENCH_TIME ?= 1s
BENCH ?= .
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@latest

bench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 60m . | tee root.bench.txt
	cd bench && $(GO) test -run '^$$' -bench '$(BENCH)' -count $(BENCH_COUNT) -benchtime $(BENCH_TIME) -timeout 60m . | tee ../peer.bench.txt
	cd bench && $(GO) test -count 1 -v -run TestRedsyncFrozenNodeWithoutReadTimeout .
	$(BENCHSTAT) -col /impl root.bench.txt
	$(BENCHSTAT) -col /impl peer.bench.txt

sim:
	REDLOCK_SIM_SCHEDULES=$${REDLOCK_SIM_SCHEDULES:-100000} $(GO) test -run 'TestSimulation$$' -count=1 -timeout 180m -v .

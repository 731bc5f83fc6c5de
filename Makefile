# make test: the whole suite, installing what it needs first.
# make bench: the benchmarks (see docs/benchmarks.md).
# make sim: the full deterministic simulation, 100,000 schedules (docs/fencing.md).

GO ?= go
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

sim:
	REDLOCK_SIM_SCHEDULES=$${REDLOCK_SIM_SCHEDULES:-100000} $(GO) test -run 'TestSimulation$$' -count=1 -timeout 180m -v .

# shardmover: the two set-up commands are `make demo` and `make test`.
GO        ?= go
BIN       := bin/shardmover
PKGS      := ./...
TEST_TIMEOUT ?= 20m

.PHONY: all build test lint demo bench deps clean

all: build

## deps: install what a fresh machine lacks (PostgreSQL server binaries, Go modules).
deps:
	@./scripts/ensure-postgres.sh
	@./scripts/ensure-citus.sh
	@$(GO) mod download

build:
	$(GO) build -o $(BIN) ./cmd/shardmover

## test: unit, integration and end-to-end tests against real PostgreSQL.
test: deps lint
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## demo: a sandbox cluster, github data, a routed workload, the ledger verdict.
demo: deps build
	./scripts/demo.sh

## bench: benchmarks (ratios against baselines run side by side).
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m $(PKGS)

clean:
	rm -rf bin

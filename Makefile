# shardmover: the two set-up commands are `make demo` and `make test`.
GO        ?= go
BIN       := bin/shardmover
PKGS      := ./...
TEST_TIMEOUT ?= 20m

.PHONY: all build test lint demo bench deps clean reliability

all: build

## deps: install what a fresh machine lacks (PostgreSQL server binaries, Go modules).
deps:
	@./scripts/ensure-postgres.sh
	@./scripts/ensure-citus.sh
	@$(GO) mod download

build:
	$(GO) build -o $(BIN) ./cmd/shardmover

## test: unit, integration and end-to-end tests against real PostgreSQL; the fault
## tests among them record their outcomes, and RELIABILITY.md is written from those
## (see reliability below; the generator adds about a second).
test: deps lint
	@mkdir -p bin && rm -f $(RELIABILITY_OUT)
	start=$$(date +%s); st=0; \
	SHARDMOVER_RELIABILITY_OUT=$(RELIABILITY_OUT) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) || st=1; \
	if [ -s $(RELIABILITY_OUT) ]; then $(RELIABILITY_GEN) -command 'make test' -took $$(( $$(date +%s) - start ))s || st=1; fi; \
	exit $$st

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

## reliability: the fault-injection tests (process kills at every phase and cutover step,
## network faults, node stops, bad CLI input) with each outcome recorded, then
## RELIABILITY.md generated from the records (internal/reliability).
RELIABILITY_OUT  := $(CURDIR)/bin/reliability.jsonl
RELIABILITY_RUN  := ^(TestKilledAtEveryPhase|TestCutoverNetworkFaults|TestNodeFaultWorkers|TestNodeFaultCoordinator|TestCitusMoveUnderWorkload|TestCitusCutoverNetworkFaults)$$
RELIABILITY_GEN  := $(GO) run ./internal/reliability/cmd/reliability -in $(RELIABILITY_OUT) -out RELIABILITY.md
reliability: deps
	@mkdir -p bin && rm -f $(RELIABILITY_OUT)
	start=$$(date +%s); st=0; \
	SHARDMOVER_RELIABILITY_OUT=$(RELIABILITY_OUT) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(RELIABILITY_RUN)' ./mover || st=1; \
	SHARDMOVER_RELIABILITY_OUT=$(RELIABILITY_OUT) $(GO) test -count=1 -run '^TestHostileInput$$' ./cmd/shardmover || st=1; \
	$(RELIABILITY_GEN) -command 'make reliability' -took $$(( $$(date +%s) - start ))s || st=1; \
	exit $$st

clean:
	rm -rf bin

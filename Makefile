# shardmover: the two set-up commands are `make demo` and `make test`.
GO        ?= go
BIN       := bin/shardmover
PKGS      := ./...
# A package's limit: the mover package alone took 17 of make test's 22 minutes on a busy
# two-core machine (2026-12-02); a stuck test still ends well inside CI's 90 minutes.
TEST_TIMEOUT ?= 40m

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

## bench: the benchmarks BENCH_COUNT times, raw output in bin/bench.txt, then
## BENCHMARKS.md generated from it (internal/benchreport), with the machine facts and
## the load average and the CPU counters sampled every 15 s. Each run is one `go test -count=1` per package
## (one package at a time): -count=N would repeat each sub-benchmark back to back, so
## shardmover's N rebalances would all run minutes before Citus's; run by run, every side
## runs next to its baseline. About 45 minutes on 2 busy cores at these sizes.
BENCH_COUNT ?= 3
BENCH_ENV   ?= SHARDMOVER_BENCH_CITUS_MB=150 SHARDMOVER_BENCH_PGBENCH_SCALE=10 SHARDMOVER_BENCH_MB=64 SHARDMOVER_BENCH_CHANGES=100000 SHARDMOVER_BENCH_APPLY_ROWS=200000 SHARDMOVER_BENCH_EVENTS=60000
BENCH_OUT   := bin/bench.txt
BENCH_LOAD  := bin/bench-load.txt
BENCH_GO1   := $(GO) test -p 1 -count=1 -run '^$$' -bench '^(BenchmarkCitusRebalance|BenchmarkCitusPgbench|BenchmarkApply|BenchmarkCopy|BenchmarkMoveUnderWorkload|BenchmarkMoveMemory|BenchmarkMoveFixedCost)$$' -benchtime=1x -timeout 60m ./scheduler ./replication ./e2e ./mover
BENCH_GO2   := $(GO) test -count=1 -run '^$$' -bench '^BenchmarkPlan$$' -timeout 30m ./planner
bench: deps
	@mkdir -p bin && rm -f $(BENCH_OUT) $(BENCH_LOAD)
	start=$$(date +%s); st=0; \
	( while :; do echo "$$(date +%s) $$(cat /proc/loadavg) $$(head -1 /proc/stat)" >> $(BENCH_LOAD); sleep 15; done ) & sampler=$$!; \
	for i in $$(seq $(BENCH_COUNT)); do \
		env $(BENCH_ENV) $(BENCH_GO1) >> $(BENCH_OUT) 2>&1 || st=1; \
		$(BENCH_GO2) >> $(BENCH_OUT) 2>&1 || st=1; \
	done; \
	kill $$sampler; echo "$$(date +%s) $$(cat /proc/loadavg) $$(head -1 /proc/stat)" >> $(BENCH_LOAD); \
	$(GO) run ./internal/benchreport/cmd/benchreport -in $(BENCH_OUT) -load $(BENCH_LOAD) -out BENCHMARKS.md -env '$(BENCH_ENV)' \
		-command "make bench BENCH_COUNT=$(BENCH_COUNT), which runs $(BENCH_COUNT) times: env $(BENCH_ENV) $(BENCH_GO1); $(BENCH_GO2)" \
		-took $$(( $$(date +%s) - start ))s || st=1; \
	exit $$st

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

# bgjobs — `make run` serves on an embedded Redis with the example agent;
# `make test` runs the whole suite.
GO      ?= go
BIN     ?= bin
# BGJOBS_ADDR and BGJOBS_AGENT_ADDR in the environment pick the addresses.
ADDR    ?= $(or $(BGJOBS_ADDR),127.0.0.1:8080)
AGENT   ?= $(or $(BGJOBS_AGENT_ADDR),127.0.0.1:9000)
# Fuzz budgets are counts of inputs, not durations: with a duration, Go
# 1.26's fuzz coordinator can fail a target that found nothing ("context
# deadline exceeded" as the time runs out, golang/go#75804, fixed in 1.27).
# About five seconds each here; the decoders run some 2,000 inputs a second.
FUZZ_DECODE ?= 10000x
FUZZ_EVENT  ?= 150000x

.PHONY: all build run test fuzz bench lint clean

all: build

build:
	$(GO) build -o $(BIN)/bgjobs ./cmd/bgjobs
	$(GO) build -o $(BIN)/example-agent ./cmd/example-agent

# Starts the example A2A agent and bgjobs (embedded Redis unless REDIS_URL is
# set), registers the agent as "default", and runs until Ctrl-C.
run: build
	BIN=$(BIN) ADDR=$(ADDR) AGENT=$(AGENT) scripts/run-local

# The whole suite, with the race detector, then each fuzz target briefly.
# BGJOBS_TEST_REDIS_URL=redis://host:port/db runs it against real Redis.
# Browser tests keep their screenshots under $(ARTIFACTS).
ARTIFACTS ?= $(CURDIR)/test-output
test:
	mkdir -p $(ARTIFACTS)
	$(GO) test -race -count=1 -timeout 20m -artifacts -outputdir $(ARTIFACTS) ./...
	$(MAKE) fuzz

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSpawn$$' -fuzztime $(FUZZ_DECODE) ./handlers
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAgent$$' -fuzztime $(FUZZ_DECODE) ./handlers
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime $(FUZZ_DECODE) ./handlers
	$(GO) test -run '^$$' -fuzz '^FuzzEventJSON$$' -fuzztime $(FUZZ_EVENT) .

# Throughput of bgjobs end to end beside raw asynq, same Redis, same
# concurrency. BENCH_REDIS_URL picks the server (default: the local one,
# database 14; embedded when it does not answer).
# BullMQ, the batch-join peer, comes from npm (internal/bench/bullmq).
bench:
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix internal/bench/bullmq --no-audit --no-fund --silent || echo "npm ci failed: the BullMQ lines will say not measured"; fi
	$(GO) run ./cmd/bgjobs bench $(BENCH_ARGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf $(BIN)

# sluice: a rate-limit server that speaks the Redis protocol.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
# Evaluated once, so that every target of one make run sees the same values.
VERSION := $(VERSION)
COMMIT  := $(COMMIT)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build run run-memory cluster cluster-stop test lint fuzz chaos chaos-short bench bench-doc bench-durability clean image deploy-test

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sluice ./cmd/sluice

# A single persistent node on 127.0.0.1:6379 (data in ./sluice-data), ready for redis-cli.
run: build
	$(BIN)/sluice --addr 127.0.0.1:6379 --data-dir sluice-data

# The same, keeping nothing on disk.
run-memory: build
	$(BIN)/sluice --addr 127.0.0.1:6379 --in-memory

# Three local nodes in the background: RESP 6001-6003, Raft 7001-7003,
# data and logs in ./cluster-data. Stop them with make cluster-stop.
PEERS := n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003
# make cluster SHARDS=1 for one Raft group (a data dir keeps the count it was made with).
SHARDS ?= 3
cluster: build
	@mkdir -p cluster-data
	@for i in 1 2 3; do \
	  $(BIN)/sluice --id n$$i --addr 127.0.0.1:600$$i --raft-addr 127.0.0.1:700$$i \
	    --forward-addr 127.0.0.1:800$$i --data-dir cluster-data/n$$i --peers $(PEERS) --shards $(SHARDS) \
	    > cluster-data/n$$i.log 2>&1 & echo $$! > cluster-data/n$$i.pid; \
	done
	@sleep 2
	@redis-cli -p 6001 RAFT.STATUS || true
	@echo "cluster up: redis-cli -p 6001 / 6002 / 6003; logs in cluster-data/; stop with make cluster-stop"

cluster-stop:
	@for i in 1 2 3; do [ -f cluster-data/n$$i.pid ] && kill $$(cat cluster-data/n$$i.pid) 2>/dev/null; rm -f cluster-data/n$$i.pid; done; true

# Formatting, vet, then every test with the race detector. The load
# generator's tests against a real server (bench/integration_test.go) run
# the binary that build makes. middleware/ is its own Go module (so that
# its clients stay out of the server's go.mod): its tests run second.
test: lint build
	SLUICE_BIN=$(CURDIR)/$(BIN)/sluice $(GO) test -race -count=1 -timeout 12m ./...
	cd middleware && $(GO) test -race -count=1 -timeout 5m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd middleware && $(GO) vet ./...

# Each fuzz target for FUZZTIME (CI: 10s); seed corpora in testdata/fuzz/.
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParser$$' -fuzztime $(FUZZTIME) ./resp/
	$(GO) test -run '^$$' -fuzz '^FuzzGrammar$$' -fuzztime $(FUZZTIME) ./resp/
	$(GO) test -run '^$$' -fuzz '^FuzzEngineOps$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzStringOps$$' -fuzztime $(FUZZTIME) ./engine/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSnapshot$$' -fuzztime $(FUZZTIME) ./persistence/
	$(GO) test -run '^$$' -fuzz '^FuzzReadArchive$$' -fuzztime $(FUZZTIME) ./persistence/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEntry$$' -fuzztime $(FUZZTIME) ./cluster/codec/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./rls/rules/
	$(GO) test -run '^$$' -fuzz '^FuzzScript$$' -fuzztime $(FUZZTIME) ./internal/script/

# Fault injection on a real three-node cluster (cmd/sluice-chaos); output in results/chaos.
# CHAOS_SLUICE_FLAGS="--raft-log wal --fsync everysec" runs it on another log store or mode;
# CHAOS_SHARDS is every node's Raft groups (--shards), CHAOS_SHARDS=1 the single-group cluster.
CHAOS_DURATION ?= 5m
CHAOS_SLUICE_FLAGS ?=
CHAOS_SHARDS ?= 3
chaos: build
	$(GO) run ./cmd/sluice-chaos -sluice-bin $(BIN)/sluice -duration $(CHAOS_DURATION) -shards $(CHAOS_SHARDS) -sluice-flags "$(CHAOS_SLUICE_FLAGS)" -out results/chaos

# The one-minute run CI does.
chaos-short: build
	$(GO) run ./cmd/sluice-chaos -sluice-bin $(BIN)/sluice -duration 60s -shards $(CHAOS_SHARDS) -out results/chaos-short

# Engine micro-benchmarks, then sluice against redis-server + Lua, side by side
# (under 5 minutes on 2 cores; needs redis-server on PATH).
bench: build
	@mkdir -p results
	$(GO) test -run '^$$' -bench . -benchmem ./engine/ | tee results/engine-bench.txt
	$(GO) run ./cmd/sluice-bench -sluice-bin $(BIN)/sluice -out results -engine-bench results/engine-bench.txt

# The run committed as docs/benchmarks.md: 5 rounds, up to 10M keys, every
# section including the log store and fsync mode rows (about 11 minutes).
bench-doc: build
	@mkdir -p results
	$(GO) test -run '^$$' -bench . -benchmem ./engine/ | tee results/engine-bench.txt
	$(GO) run ./cmd/sluice-bench -sluice-bin $(BIN)/sluice -sections all -max-keys 10000000 -rounds 5 -out results -engine-bench results/engine-bench.txt -doc docs/benchmarks.md

# Only the log store and fsync mode rows of the durable cluster, P1 and P16
# (about 2 minutes): results/report.md.
bench-durability: build
	@mkdir -p results
	$(GO) run ./cmd/sluice-bench -sluice-bin $(BIN)/sluice -sections durability -out results

# The container image (deploy/Dockerfile): a static binary on an empty base,
# with the user sluice and the build machine's CA certificates; offline.
# IMAGE_BUILD=docker build works too (without --format).
IMAGE       ?= sluice:$(subst +,-,$(VERSION))
IMAGE_BUILD ?= podman build --format docker
CA_BUNDLE   ?= /etc/ssl/certs/ca-certificates.crt
image:
	rm -rf $(BIN)/image && mkdir -p $(BIN)/image/data
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/image/sluice ./cmd/sluice
	cp deploy/image/passwd deploy/image/group $(BIN)/image/
	cp $(CA_BUNDLE) $(BIN)/image/ca-certificates.crt
	$(IMAGE_BUILD) -f deploy/Dockerfile -t $(IMAGE) $(BIN)/image

# The deployment tests that need podman, systemd-analyze and helm (built
# once from its Go module into the user cache dir; -update on the test
# command line regenerates the chart's golden files). make test runs the
# quick ones of ./deploy too, skipping what is missing.
deploy-test: build image
	SLUICE_BIN=$(CURDIR)/$(BIN)/sluice SLUICE_IMAGE=$(IMAGE) SLUICE_DEPLOY_TESTS=1 $(GO) test -count=1 -timeout 15m ./deploy/

# Everything builds and test runs leave: binaries, results, data dirs.
clean:
	rm -rf $(BIN) results cluster-data sluice-data
	rm -f sluice sluice-chaos sluice-bench cmd/sluice/sluice cmd/sluice-chaos/sluice-chaos cmd/sluice-bench/sluice-bench

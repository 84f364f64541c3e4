# Thin wrapper over CMake. `make run` and `make test` work on a fresh Debian 12 machine.
BUILD_DIR    ?= build
SAN_DIR      ?= build-sanitize
CONFIG       ?= etc/kvlane.toml
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=
BENCH_DIR    ?= bench-results
BENCH_TRACE  ?= ../shared/traces/azure-llm-2023-conv.csv
BENCH_FLAGS  ?=
BENCH_CONV_TRACE ?= ../shared/traces/mooncake-conversation.jsonl
SOAK_SECONDS ?= 600
# The qbruntime backend: the development and test builds use the stand-in SDK so that the
# adapter's tests run anywhere; installs and packages are built without it unless set to sdk.
QBRUNTIME         ?= fake
PACKAGE_QBRUNTIME ?= off
# The llamacpp backend (GGUF models): scripts/llama-cpp builds llama.cpp once into a cache
# shared by every build directory; on = the configure fails without it, auto = optional.
LLAMACPP ?= on
# make run MODEL=/path/model.gguf serves that GGUF instead of the simulated NPU.
MODEL    ?=

.PHONY: all bootstrap build run test soak sanitize clean bench bench-load bench-sweep bench-reuse \
        bench-two-models bench-realsize bench-shapes bench-restart bench-build

all: build

bootstrap:
	@./scripts/bootstrap
	@./scripts/llama-cpp >/dev/null

$(BUILD_DIR)/CMakeCache.txt: | bootstrap
	cmake -S . -B $(BUILD_DIR) -DKVLANE_QBRUNTIME=$(QBRUNTIME) -DKVLANE_LLAMACPP=$(LLAMACPP) $(CMAKE_FLAGS)

build: bootstrap $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/kvlaned --config $(CONFIG) $(if $(MODEL),--gguf $(abspath $(MODEL)))

test: bootstrap $(BUILD_DIR)/CMakeCache.txt
	cmake -S . -B $(BUILD_DIR) -DKVLANE_QBRUNTIME=$(QBRUNTIME) -DKVLANE_LLAMACPP=$(LLAMACPP)
	cmake --build $(BUILD_DIR) -j $(JOBS)
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Chaos soak (docs/reliability.md): apps connect, stream, cancel, disconnect and get killed;
# 1% injected device faults, SIGHUP reloads, the store at its limit. One summary line; exit 1
# on any loss, duplicate, mismatch or leak. `make test` runs 60 seconds of it.
soak: build
	./$(BUILD_DIR)/kvlane-soak --seconds $(SOAK_SECONDS)

# Benchmarks (docs/benchmarks.md): figures and ratios, not pass/fail tests.
# The default comparison: conv trace, 100 requests, load 1.5, 20% interactive, all six modes,
# side by side under the three device overlap assumptions (none, shared, full).
bench-build: bootstrap $(BUILD_DIR)/CMakeCache.txt
	@./scripts/bootstrap --bench
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kvlane-bench kvlaned

bench: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_TRACE) --requests 100 --load 1.5 \
	  --interactive-share 0.2 --devices none,shared,full --path inproc \
	  --json $(BENCH_DIR)/latest.json --plot $(BENCH_DIR)/latest.png $(BENCH_FLAGS)

# SLO attainment against offered load (0.5-2.0), every mode, the profile's device (full overlap).
bench-load: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_TRACE) --requests 100 --load 1.5 \
	  --interactive-share 0.2 --sweep 0.5,1.0,1.5,2.0 --path inproc \
	  --json $(BENCH_DIR)/load.json --plot $(BENCH_DIR)/load.png $(BENCH_FLAGS)

# The quantum sweep on a decode-heavy synthetic mix (many steps per second, so the
# quantum drives the preemption rate): sync, overlap and free-transfer at each quantum.
bench-sweep: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --synthetic --requests 100 --prompt-mean 256 --output-mean 256 \
	  --load 1.5 --interactive-share 0.2 --sweep-quantum --path inproc \
	  --json $(BENCH_DIR)/sweep.json --plot $(BENCH_DIR)/sweep.png $(BENCH_FLAGS)

# The grid (docs/benchmarks.md, "Workload shapes"): the conv trace, a Mooncake sample, a
# prefill-heavy and a decode-heavy synthetic mix, each at loads 0.5-2.0 under the three device
# models, every mode in each cell on the same requests; targets per cell and over the grid.
bench-shapes: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --shapes conv,mooncake,prefill-heavy,decode-heavy \
	  --azure-trace $(BENCH_TRACE) --mooncake-trace $(BENCH_CONV_TRACE) --requests 100 \
	  --interactive-share 0.2 --sweep 0.5,1.0,1.5,2.0 --devices none,shared,full --path inproc \
	  --json $(BENCH_DIR)/shapes.json --plot $(BENCH_DIR)/shapes.png $(BENCH_FLAGS)

# Conversation reuse on the Mooncake trace: 10% of its conversations, whole, at the trace's
# own pace, prompts scaled 1/8 for the 4,096-token model; reuse off, slot and store, mode overlap.
bench-reuse: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_CONV_TRACE) --requests 0 --input-scale 0.125 \
	  --sample-conversations 0.1 --rate-scale 1 --reuse off,slot,store --path inproc \
	  --json $(BENCH_DIR)/reuse.json $(BENCH_FLAGS)

# Two models on one store: the profile's model twice (<model>-a, -b), the same 10% of the
# Mooncake conversations given to them in alternating 300 s bursts; the shared elastic store
# against static halves (store_floor_bytes = store_cap_bytes = half the store each).
bench-two-models: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_CONV_TRACE) --requests 0 --input-scale 0.125 \
	  --sample-conversations 0.1 --rate-scale 1 --store-split shared,static --burst-s 300 \
	  --path inproc --json $(BENCH_DIR)/two-models.json $(BENCH_FLAGS)

# KV across a restart and a model swap: 5% of the Mooncake conversations through kvlaned
# children, drained half way, then restarted keeping the store in the fd store (the bench plays
# systemd), restarted with the disk tier only, or swapped out by a second model (max_loaded = 1);
# each against the same replay without the event: reused tokens, reusable TTFT, failures.
bench-restart: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_CONV_TRACE) --requests 0 --input-scale 0.125 \
	  --sample-conversations 0.05 --rate-scale 1 --restart fdstore,disk,swap \
	  --json $(BENCH_DIR)/restart.json $(BENCH_FLAGS)

# Real-size check: the retained-KV path with the device's real 64 MiB snapshots (a 4 GiB store
# whose warm pool covers all of it, at most ~5 GiB of RAM with the sim's slots), time_scale 4 so
# the host copies show; prints the host time per transfer against the modeled time.
bench-realsize: bench-build
	@mkdir -p $(BENCH_DIR)
	./$(BUILD_DIR)/kvlane-bench --trace $(BENCH_CONV_TRACE) --requests 1200 --input-scale 0.125 \
	  --sample-conversations 0.1 --rate-scale 1 --reuse store --snapshot-bytes 64MiB \
	  --store-bytes 4GiB --warm-pool-bytes 4GiB --prefault-warm-pool --time-scale 4 --path inproc \
	  --json $(BENCH_DIR)/realsize.json $(BENCH_FLAGS)

# kvlane against llama.cpp's llama-server over HTTP (docs/benchmarks.md, "Raced against
# llama-server"): kvlane-bench starts each server in turn on the same GGUF (the bench model
# kvlane-make-gguf writes, made once) with the same threads, slots, context, batch, KV type
# and host cache, and races them on one-stream decode and prefill, the Azure trace and a
# Mooncake sample with causal turns; side by side with the targets -> $(BENCH_DIR)/llama.json.
.PHONY: bench-llama
bench-llama: bench-build
	@mkdir -p $(BENCH_DIR)
	@test -f $(BENCH_DIR)/bench-llama.gguf || { set -e; prefix=$$(./scripts/llama-cpp); \
	  cmake --build $(BUILD_DIR) -j $(JOBS) --target kvlane-make-gguf; \
	  ./$(BUILD_DIR)/kvlane-make-gguf --vocab $$prefix/src/models/ggml-vocab-llama-bpe.gguf \
	    --size bench --out $(BENCH_DIR)/bench-llama.gguf; }
	./$(BUILD_DIR)/kvlane-bench --race-llama --gguf $(BENCH_DIR)/bench-llama.gguf \
	  --llama-server "$$(./scripts/llama-cpp)/build/bin/llama-server" --threads $(JOBS) \
	  --parallel 4 --ctx-per-seq 2048 --azure-trace $(BENCH_TRACE) \
	  --mooncake-trace $(BENCH_CONV_TRACE) --interactive-share 0.2 \
	  --json $(BENCH_DIR)/llama.json $(BENCH_FLAGS)

# Structured output's cost to decoding: one stream with a JSON Schema against the same stream
# without one, on the sim at real-time speed, then on a bench GGUF carrying Llama 3.1's chat
# template against llama-server's own json_schema on the same file (docs/benchmarks.md).
.PHONY: bench-schema
bench-schema: bench-build
	@mkdir -p $(BENCH_DIR)
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kvlane-schemabench kvlane-make-gguf
	@test -f $(BENCH_DIR)/bench-llama-chat.gguf || { set -e; prefix=$$(./scripts/llama-cpp); \
	  ./$(BUILD_DIR)/kvlane-make-gguf --vocab $$prefix/src/models/ggml-vocab-llama-bpe.gguf \
	    --size bench --chat-template $$prefix/src/models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja \
	    --out $(BENCH_DIR)/bench-llama-chat.gguf; }
	./$(BUILD_DIR)/kvlane-schemabench --sim
	./$(BUILD_DIR)/kvlane-schemabench --gguf $(BENCH_DIR)/bench-llama-chat.gguf --threads $(JOBS) \
	  --llama-server "$$(./scripts/llama-cpp)/build/bin/llama-server"

sanitize: bootstrap
	cmake -S . -B $(SAN_DIR) -DKVLANE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
	  -DKVLANE_QBRUNTIME=$(QBRUNTIME) -DKVLANE_LLAMACPP=$(LLAMACPP) $(CMAKE_FLAGS)
	cmake --build $(SAN_DIR) -j $(JOBS)
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR)

# Installation and the .deb (README: "Run it as a service"). The tree is configured for the
# prefix it installs to, because the installed systemd unit names the daemon's path.
# `make install PREFIX=/usr/local DESTDIR=/tmp/stage` stages elsewhere.
PREFIX       ?= /usr

.PHONY: install deb

install: bootstrap $(BUILD_DIR)/CMakeCache.txt
	cmake -S . -B $(BUILD_DIR) -DCMAKE_INSTALL_PREFIX=$(PREFIX) -DKVLANE_QBRUNTIME=$(PACKAGE_QBRUNTIME)
	cmake --build $(BUILD_DIR) -j $(JOBS)
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD_DIR)

# $(BUILD_DIR)/kvlane_<version>_<arch>.deb; install it with `apt install ./$(BUILD_DIR)/kvlane_*.deb`.
deb: bootstrap $(BUILD_DIR)/CMakeCache.txt
	cmake -S . -B $(BUILD_DIR) -DCMAKE_INSTALL_PREFIX=/usr -DKVLANE_QBRUNTIME=$(PACKAGE_QBRUNTIME)
	cmake --build $(BUILD_DIR) -j $(JOBS)
	cd $(BUILD_DIR) && cpack -G DEB

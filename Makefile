# Strata developer entry points. `make run` and `make test` work on a fresh Debian machine:
# both install missing dependencies first (scripts/install-deps.sh).
SHELL := /bin/bash
BUILD ?= build/release
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
FUZZ_SECONDS ?= 600
SOAK_SECONDS ?= 1800
FUZZ_TARGETS := peer_messages_fuzz disk_record_fuzz engine_request_fuzz connector_metadata_fuzz \
  config_fuzz control_lookup_fuzz
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run demo test test-release test-asan test-fuzz fuzz fuzz-build soak bench \
  check-format format clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# Runs the main job: stratad with its embedded default configuration (Ctrl-C drains and stops).
run: build
	@$(BUILD)/daemon/stratad $(ARGS)

# A guided tour of the host tier, no daemon needed.
demo: build
	@$(BUILD)/daemon/strata_demo

# Release build + every test (GPU tests skip themselves without a device), then the unit tests
# again under AddressSanitizer and UndefinedBehaviorSanitizer. Each run ends with what it skipped
# and why (scripts/test_summary.py): a skip is never counted as a pass.
test: test-release test-asan test-fuzz

test-release: build
	@ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE soak
	@python3 scripts/test_summary.py $(BUILD)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address,undefined \
	  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF \
	  -DSTRATA_BUILD_INTEGRATION_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS) -L unit
	@python3 scripts/test_summary.py $(ASAN_BUILD)

# libFuzzer targets (tests/fuzz, clang + ASan + UBSan): built alone in $(FUZZ_BUILD).
fuzz-build: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" -DSTRATA_BUILD_FUZZ=ON \
	  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_TESTS=OFF \
	  -DSTRATA_BUILD_INTEGRATION_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) --target $(FUZZ_TARGETS) -j$(JOBS)

# Each fuzz target for $(1) seconds (more libFuzzer flags: $(2)) over a scratch copy of its corpus
# (tests/fuzz/corpus/<t>);
# any crash, sanitizer report, leak, timeout or out-of-memory fails, its input left in
# $(FUZZ_BUILD)/findings/<t>/.
define run_fuzz
	@set -e; for t in $(FUZZ_TARGETS); do \
	  work=$(FUZZ_BUILD)/fuzz-corpus/$$t; found=$(FUZZ_BUILD)/findings/$$t; \
	  rm -rf $$work; mkdir -p $$work $$found; cp tests/fuzz/corpus/$$t/* $$work/; \
	  echo "== $$t ($(1)s)"; \
	  $(FUZZ_BUILD)/tests/fuzz/$$t -max_total_time=$(1) $(2) -rss_limit_mb=2048 -timeout=10 \
	    -print_final_stats=1 -artifact_prefix=$$found/ $$work > $$found/log.txt 2>&1 \
	    || { tail -60 $$found/log.txt; echo "FAIL: $$t (input in $$found/)"; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $$found/log.txt; \
	done
endef

# A fixed seed: the same mutations on every run, so a run of `make test` that passed here does
# not fail later for an input no one has seen; `make fuzz` explores with fresh seeds.
test-fuzz: fuzz-build
	$(call run_fuzz,15,-seed=1)

fuzz: fuzz-build
	$(call run_fuzz,$(FUZZ_SECONDS))

# The soak (tests/soak): engines and a daemon with a disk tier under random SIGKILLs, disk fills
# and tenant clears for $(SOAK_SECONDS) seconds, every invariant checked all along; prints its
# report and fails on any violation. Runs as root for its loop-mounted disk (else it says that
# disk fills were skipped).
soak: build
	@$(BUILD)/tests/soak/strata_soak --seconds $(SOAK_SECONDS) $(ARGS)

# Micro-benchmarks (Release); each prints its figures and same-run baselines. disk_tier_bench
# takes its own flags (it runs fio beside the tier in the same run), and so does remote_bench (it
# runs its peer, ucx_perftest and redis-server as child processes).
bench: build
	@for b in $(BUILD)/bench/micro/*_bench $(BUILD)/kernels/kernels_bench; do \
	  echo "== $$b"; case $$b in \
	    *disk_tier_bench) $$b ;; \
	    *remote_bench) $$b ;; \
	    *) $$b --benchmark_min_time=0.2 ;; \
	  esac; done

check-format:
	@bash scripts/check-format.sh

format:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf build

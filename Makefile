# The two commands a newcomer needs: `make demo` (the main job) and
# `make test` (the whole suite). Each installs what is missing, configures,
# builds and runs. One build directory, built incrementally.
BUILD ?= build
JOBS ?= $(shell nproc)
PY ?= python3
CMAKE = $(shell $(PY) -c 'import cmake; print(cmake.CMAKE_BIN_DIR)' 2>/dev/null)/cmake
CTEST = $(shell $(PY) -c 'import cmake; print(cmake.CMAKE_BIN_DIR)' 2>/dev/null)/ctest
NINJA = $(shell $(PY) -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null)

.PHONY: all setup configure build demo test bench figure8 figure-decode sanitize tsan fuzz clean gpu-check

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja: CMakeLists.txt | setup
	@$(CMAKE) -S . -B $(BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(NINJA) \
	  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=clang-scan-deps-19 \
	  -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

configure: $(BUILD)/build.ninja

build: setup configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

demo: build
	@$(BUILD)/bin/slicesched simulate configs/experiments/colocation.toml --out out/colocation

test: build
	@cd $(BUILD) && $(CTEST) --output-on-failure -j $(JOBS)

# The GPU check (scripts/gpu-check.sh): devices, the CUDA and NCCL tests,
# calibrate + serve + bench accuracy + bench overhead on one GPU; one line
# and exit 0 where no GPU is visible.
gpu-check: build
	@BUILD=$(BUILD) scripts/gpu-check.sh

# The paper's co-location figure (section 6.2) over offline load, all five
# policies, equal offered load: out/figure8/sweep.csv and its four panels.
FIGURE8_RATES ?= 1,2,4,8,16,32,64,128
figure8: build
	@$(BUILD)/bin/slicesched sweep configs/experiments/colocation.toml \
	  --set offline_rps:tenants.offline0.stream.constant_rate=$(FIGURE8_RATES) --out out/figure8

# The same sweep on a decode-heavy online load (chat-like replies of 200
# tokens; online alone keeps the GPUs busy): out/figure-decode/sweep.csv.
FIGURE_DECODE_RATES ?= 1,2,4,8,16,32,64,128
figure-decode: build
	@$(BUILD)/bin/slicesched sweep configs/experiments/colocation-decode.toml \
	  --set offline_rps:tenants.offline0.stream.constant_rate=$(FIGURE_DECODE_RATES) --out out/figure-decode

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (RelWithDebInfo, undefined behaviour is fatal) in its own build directory,
# less what adds no memory or UB coverage there: the CUDA test binary (it
# only skips without a GPU) and the `figures` tests (whole experiments run
# to check their printed figures, which a sanitizer cannot change; the same
# engine paths run in the golden tests).
SANITIZE_BUILD ?= build-sanitize
SANITIZE_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# -O1 and line tables only (file:line in reports, no full debug info): the
# usual ASan build, and on 2 cores it compiles and links much faster.
SANITIZE_OPT = -O1 -gline-tables-only -DNDEBUG
sanitize: setup
	@$(CMAKE) -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(NINJA) \
	  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=clang-scan-deps-19 \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLICESCHED_GPU_TESTS=OFF "-DCMAKE_CXX_FLAGS=$(SANITIZE_FLAGS)" \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(SANITIZE_FLAGS)" "-DCMAKE_SHARED_LINKER_FLAGS=$(SANITIZE_FLAGS)" \
	  "-DCMAKE_MODULE_LINKER_FLAGS=$(SANITIZE_FLAGS)" > $(SANITIZE_BUILD).configure.log 2>&1 \
	  || (cat $(SANITIZE_BUILD).configure.log; exit 1)
	@$(CMAKE) --build $(SANITIZE_BUILD) -j $(JOBS)
	@cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST) --output-on-failure -j $(JOBS) -LE '^figures$$'

# The threaded parts (engine and scheduler with their parallel what-ifs, the
# live executor with and without LibTorch) under ThreadSanitizer, against a
# oneTBB instrumented the same way: scripts/tsan-tbb.sh builds Debian's own
# onetbb source package into build-tsan-deps/ once (see docs/reliability.md).
TSAN_BUILD ?= build-tsan
TSAN_TBB = $(CURDIR)/build-tsan-deps/tbb
TSAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
TSAN_TESTS ?= [engine],[executor],[scheduler],[parallel]
tsan: setup
	@scripts/tsan-tbb.sh $(TSAN_TBB)
	@$(CMAKE) -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(NINJA) \
	  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=clang-scan-deps-19 \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS=$(TSAN_FLAGS)" -DTBB_DIR=$(TSAN_TBB)/lib/cmake/TBB \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(TSAN_FLAGS)" "-DCMAKE_SHARED_LINKER_FLAGS=$(TSAN_FLAGS)" \
	  "-DCMAKE_MODULE_LINKER_FLAGS=$(TSAN_FLAGS)" > $(TSAN_BUILD).configure.log 2>&1 \
	  || (cat $(TSAN_BUILD).configure.log; exit 1)
	@$(CMAKE) --build $(TSAN_BUILD) -j $(JOBS) --target slicesched_tests
	@LD_LIBRARY_PATH=$(TSAN_TBB)/lib TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  $(TSAN_BUILD)/bin/slicesched_tests "$(TSAN_TESTS)"

# Every parser under libFuzzer (+ ASan, UBSan) for SECONDS each, from seed
# corpora of the project's own inputs; see docs/reliability.md.
FUZZ_BUILD ?= build-fuzz
SECONDS ?= 60
FUZZ_FLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz: setup
	@$(CMAKE) -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(NINJA) \
	  -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=clang-scan-deps-19 \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLICESCHED_FUZZ=ON -DSLICESCHED_BUILD_TESTS=OFF \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" \
	  "-DCMAKE_CXX_FLAGS=$(FUZZ_FLAGS)" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
	  > $(FUZZ_BUILD).configure.log 2>&1 || (cat $(FUZZ_BUILD).configure.log; exit 1)
	@$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers
	@scripts/fuzz.sh $(FUZZ_BUILD) $(SECONDS)

bench: build
	@$(BUILD)/bin/slicesched bench simulator

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(SANITIZE_BUILD) $(SANITIZE_BUILD).configure.log \
	  $(FUZZ_BUILD) $(FUZZ_BUILD).configure.log $(TSAN_BUILD) $(TSAN_BUILD).configure.log build-tsan-deps

#!/usr/bin/env bash
# Builds the CPU library and its tests with AddressSanitizer + UndefinedBehavior-
# Sanitizer (every report fatal) in their own build folder, and runs the CPU
# test suite under them: the Catch2 tests, the C99 check, the reliability
# tests (concurrency, 64-bit offsets) and the fuzz corpus replay.
#
#   scripts/sanitize.sh [BUILD_DIR]      (default: build-rel-sanitize)
#
# Lean on purpose (CI has 2 cores): CPU only (no CUDA/HIP objects: the
# sanitizers do not see device code), and only the CPU test executables
# below are built and run, no example, no benchmark, no packaging checks,
# no HIP-kernel emulations. A new CPU test executable goes in `targets` and
# its ctest prefix in `tests`. Uses the default C/C++ compiler (g++ on
# Debian 12); CC/CXX override it.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-rel-sanitize}"
jobs="${GDN_JOBS:-2}"

flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  `# tests/c99_api.c calls exp() but links no libm (at -O2 it is folded away)` \
  -DCMAKE_C_STANDARD_LIBRARIES=-lm \
  -DGDN_ENABLE_CUDA=OFF -DGDN_ENABLE_HIP=OFF \
  -DGDN_BUILD_TESTS=ON -DGDN_BUILD_EXAMPLES=OFF -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_HIP_EMU=OFF
targets=(gdn_tests gdn_c99_test gdn_tests_reliability gdn_fuzz_replay)
tests='^(cpu|c99|reliability):'
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

# Every report stops the test with a non-zero status; leaks count.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir "$build" --output-on-failure -j"$jobs" -R "$tests"
echo "sanitize.sh: every CPU test passed under ASan + UBSan ($build)"

#!/usr/bin/env bash
# Builds the CPU library and its tests with ThreadSanitizer (clang 19, every
# report fatal) in their own build folder, and runs the CPU test suite and the
# reliability tests under it: the CPU backend's helper threads
# (src/common/cpu_pool.cpp), host threads calling at once, a forked child.
#
#   scripts/tsan.sh [BUILD_DIR]      (default: build-rel-tsan)
#
# clang-19 and its runtime come with `scripts/install-deps.sh --all`; clang is
# used so that the CPU code also meets a second compiler in CI (scripts/
# sanitize.sh uses g++ 12); CC/CXX override it. CPU only, like
# scripts/sanitize.sh: the sanitizer does not see device code.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-rel-tsan}"
jobs="${GDN_JOBS:-2}"
cc="${CC:-clang-19}"
cxx="${CXX:-clang++-19}"

flags="-fsanitize=thread -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$build" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" \
  -DGDN_ENABLE_CUDA=OFF -DGDN_ENABLE_HIP=OFF \
  -DGDN_BUILD_TESTS=ON -DGDN_BUILD_EXAMPLES=OFF -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_HIP_EMU=OFF
targets=(gdn_tests gdn_tests_reliability gdn_fuzz_replay)
tests='^(cpu|reliability):'
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

# Every report stops the test with a non-zero status. die_after_fork=0: the
# fork test's child starts threads of its own (TSan's default refuses that).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 -R "$tests"
echo "tsan.sh: every CPU and reliability test passed under ThreadSanitizer ($build)"

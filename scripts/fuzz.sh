#!/usr/bin/env bash
# Builds the libFuzzer target of the C ABI (tests/reliability/fuzz_abi.cpp)
# with clang, AddressSanitizer and UndefinedBehaviorSanitizer, and runs it for
# a bounded time from the committed seed corpus and regression inputs. Exits
# non-zero on any crash, sanitizer report, violated invariant, timeout (an
# input running > 10 s) or memory blow-up; the input that did it is left in
# BUILD_DIR/fuzz-artifacts/ (add it to tests/reliability/regressions/).
#
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]   (defaults: 60, build-rel-fuzz)
#
# GDN_FUZZ_SEED=N fixes libFuzzer's random seed, so that runs make the same
# random choices (a slower machine fewer of them; equal-size corpus files are
# read in directory order): CI gates on a fixed seed; a developer's long runs
# leave it unset (a new seed each run) to look further.
#
# Compiler: clang-19 (Debian: clang-19 + libclang-rt-19-dev for the fuzzer
# runtime) when it links a fuzzer, else clang-14 (clang-14 +
# libclang-rt-14-dev); CXX=... overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-${GDN_FUZZ_SECONDS:-60}}"
build="${2:-build-rel-fuzz}"
jobs="${GDN_JOBS:-2}"

# A compiler counts only if it links a fuzzer with both sanitizers.
links_fuzzer() {
  local cxx="$1" dir
  command -v "$cxx" >/dev/null 2>&1 || return 1
  dir="$(mktemp -d)"
  printf '#include <cstdint>\n#include <cstddef>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$dir/t.cpp"
  "$cxx" -fsanitize=fuzzer,address,undefined "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}
if [[ -n "${CXX:-}" ]]; then
  cxx="$CXX"
  cc="${CC:-${CXX/clang++/clang}}"
elif links_fuzzer clang++-19; then
  cxx=clang++-19 cc=clang-19
elif links_fuzzer clang++-14; then
  cxx=clang++-14 cc=clang-14
else
  echo "fuzz.sh: no clang that links -fsanitize=fuzzer (install clang-19 libclang-rt-19-dev)" >&2
  exit 2
fi
links_fuzzer "$cxx" || { echo "fuzz.sh: $cxx does not link -fsanitize=fuzzer,address,undefined" >&2; exit 2; }
echo "fuzz.sh: $("$cxx" --version | head -1), ${seconds} s"

# The library is instrumented for coverage (fuzzer-no-link) and both
# sanitizers; static, since a clang-sanitized shared library does not link
# with --no-undefined.
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link -fno-omit-frame-pointer -g -O1"
cmake -S . -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DGDN_ENABLE_CUDA=OFF -DGDN_ENABLE_HIP=OFF -DGDN_BUILD_SHARED=OFF \
  -DGDN_BUILD_TESTS=ON -DGDN_BUILD_EXAMPLES=OFF -DGDN_BUILD_BENCH=OFF \
  -DGDN_BUILD_FUZZER=ON >/dev/null
cmake --build "$build" -j"$jobs" --target gdn_fuzz_abi

# New inputs go to the first (scratch) folder; the committed ones are read.
mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
seed_arg=()
[[ -n "${GDN_FUZZ_SEED:-}" ]] && seed_arg=(-seed="$GDN_FUZZ_SEED")
set +e
"$build/tests/reliability/gdn_fuzz_abi" "${seed_arg[@]}" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 -max_len=1024 \
  -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" \
  "$build/fuzz-corpus" tests/reliability/corpus tests/reliability/regressions 2>&1 | tee "$build/fuzz.log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
  echo "fuzz.sh: FAILED (exit $rc); inputs in $build/fuzz-artifacts/:" >&2
  ls -l "$build/fuzz-artifacts/" >&2
  exit 1
fi
grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$build/fuzz.log" | tail -3
echo "fuzz.sh: ${seconds} s, no crash, no sanitizer report, every invariant held"

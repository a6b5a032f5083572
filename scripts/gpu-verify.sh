#!/usr/bin/env bash
# The release check on a machine with NVIDIA GPUs, from the repository root:
# every GPU test of a build folder (CUDA suite, reliability checks, the
# example, compute-sanitizer memcheck) and the benchmark. With two GPUs the
# CUDA suite and the reliability checks also run on the second one (no
# hidden device-0 assumption). Logs in $OUT; a summary is printed last.
#
#   scripts/gpu-verify.sh BUILD_DIR      (binaries as built by CMake there)
set -u
B=${1:?build folder}
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
step() {  # step NAME LOG COMMAND...
    local name=$1 log=$2 t0=$(date +%s)
    shift 2
    echo "=== $*" >> "$log"
    "$@" >> "$log" 2>&1
    local rc=$?
    printf '%-44s rc=%-3s %4ss\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$SUMMARY"
}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > "$OUT/machine.log" 2>&1
gpus=$(nvidia-smi -L | wc -l)

step "cuda suite, device 0" "$OUT/cuda-dev0.log" "$B/tests/cuda/gdn_tests_cuda" &
if [ "$gpus" -ge 2 ]; then
    GDN_TEST_DEVICE=1 step "cuda suite, device 1" "$OUT/cuda-dev1.log" "$B/tests/cuda/gdn_tests_cuda" &
fi
wait
R=$B/tests/reliability/gdn_tests_reliability_gpu
for check in $("$R" --list); do
    step "reliability $check, device 0" "$OUT/reliability.log" "$R" "$check"
    if [ "$gpus" -ge 2 ]; then
        step "reliability $check, device 1" "$OUT/reliability.log" "$R" --device 1 "$check"
    fi
done
step "example" "$OUT/example.log" "$B/examples/gdn_example"
step "memcheck [sanitize]" "$OUT/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/cuda/gdn_tests_cuda" "[sanitize]"
step "gdn-bench bf16" "$OUT/bench.log" "$B/bench/gdn-bench" --backend cuda --dtype bf16 \
    --T 128,512,2048,8192,32768 --decode 1,8,64,256,1024 --reps 7 --check-heads 2 \
    --json "$OUT/bench.json"
tail -n 25 "$OUT/example.log"
tail -n 20 "$OUT/bench.log"
grep -h -E "All tests passed|test cases:|assertions:" "$OUT"/cuda-dev*.log
cat "$SUMMARY"

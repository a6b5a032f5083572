#!/usr/bin/env bash
# Runs gdn_tests_hip_emu (the HIP kernels under the nvcc WMMA emulation) on an
# NVIDIA GPU and writes one log:
#   1. every test case in its own process (a kernel fault cannot hide the
#      cases after it), with its exit code and seconds;
#   2. compute-sanitizer memcheck over all cases at the small sizes
#      (GDN_HIP_TEST_SMALL=1), and racecheck (LDS hazards: a missing barrier)
#      on the cases that exercise every barrier of prep, scan and sequential.
# Usage: tests/hip/run_emulation.sh BUILD_DIR/tests/hip/gdn_tests_hip_emu OUT_DIR
# Exit code: the number of failed steps (0: everything passed).
set -u
bin=$1
out=$2
mkdir -p "$out"
log="$out/hip_emulation.log"
failed=0
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    echo "binary: $bin"
} >"$log"

"$bin" --list-test-names-only 2>>"$log" | grep '^hip:' >"$out/cases.txt"
echo "cases: $(wc -l <"$out/cases.txt")" >>"$log"
while IFS= read -r name; do
    start=$(date +%s.%N)
    timeout 60 "$bin" "$name" >>"$log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    printf '[case] rc=%d %ss %s\n' "$rc" "$(awk "BEGIN { printf \"%.1f\", $end - $start }")" "$name" >>"$log"
    [ "$rc" -ne 0 ] && failed=$((failed + 1))
done <"$out/cases.txt"

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
    start=$(date +%s)
    GDN_HIP_TEST_SMALL=1 timeout 50 "$sanitizer" --tool memcheck --error-exitcode 9 "$bin" >>"$log" 2>&1
    rc=$?
    echo "[sanitizer] memcheck rc=$rc $(($(date +%s) - start))s (124: timed out)" >>"$log"
    [ "$rc" -ne 0 ] && failed=$((failed + 1))
    for name in "hip: the fused output norm and z gate equal the CPU epilogue applied to the unfused output" \
                "hip: the chunked path with empty sequences (T = 0) in a batch"; do
        start=$(date +%s)
        GDN_HIP_TEST_SMALL=1 timeout 35 "$sanitizer" --tool racecheck --error-exitcode 9 "$bin" "$name" >>"$log" 2>&1
        rc=$?
        echo "[sanitizer] racecheck rc=$rc $(($(date +%s) - start))s: $name" >>"$log"
        [ "$rc" -ne 0 ] && failed=$((failed + 1))
    done
else
    echo "[sanitizer] compute-sanitizer not found: not run" >>"$log"
fi
echo "failed steps: $failed" >>"$log"
exit "$failed"

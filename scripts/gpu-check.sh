#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the repository root, after building
# the CUDA backend into build-cuda (or $GDN_BUILD): runs every GPU test,
# compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on the small
# shapes of the "[sanitize]" tests, the kernels' resource report, the CUDA
# benchmark, and flash-linear-attention beside gdn when its wheels are in
# .whl/. Logs go to $OUT (default ./gpu-logs); a summary table is printed last.
#
#   scripts/gpu-check.sh [tests] [sanitize] [sanitize-all] [resources] [bench] [fla] [fla-quick]
#                        [block-states]
#   (no argument: all of them but block-states)
#
# Expected times on one H200: tests ~3-4 min; bench (gdn_bench_cuda all: prompt, decode,
# host, tc tables) well under 1 min; fla (scripts/bench_fla.py: the issue-7 matrix, H_v 48
# and 64 x T 512..65536 and 8 x 4096, gdn in 4 precisions beside fla, plus decode) ~2-3 min;
# fla-quick < 1 min. GPU_CHECK_DEADLINE=S (seconds from the start) clips every step's
# timeout to the time left and skips steps once less than 20 s is left, so that e.g.
# `GPU_CHECK_DEADLINE=470 scripts/gpu-check.sh tests bench fla` ends inside 8 minutes.
set -u
OUT=${OUT:-$PWD/gpu-logs}
mkdir -p "$OUT"
B=${GDN_BUILD:-build-cuda}
TESTS=$B/tests/cuda/gdn_tests_cuda
BENCH=$B/tests/cuda/gdn_bench_cuda
LIB=$(ls -v $B/libgdn.so.*.*.* 2>/dev/null | tail -1)  # the newest, if a stale one is beside it
T_START=$(date +%s)
DEADLINE=${GPU_CHECK_DEADLINE:-0}
parts=${*:-tests sanitize-all resources bench fla}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

# step NAME TIMEOUT_S LOG COMMAND...: runs, appends its status to the summary.
step() {
    local name=$1 limit=$2 log=$3
    shift 3
    local t0=$(date +%s)
    if [ "$DEADLINE" -gt 0 ]; then
        local left=$(( DEADLINE - (t0 - T_START) ))
        if [ "$left" -lt 20 ]; then
            printf '%-28s skipped: %ss left of GPU_CHECK_DEADLINE=%s\n' "$name" "$left" "$DEADLINE" >> "$SUMMARY"
            return 124
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "=== $name: $*" >> "$log"
    timeout "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    printf '%-28s rc=%-4s %4ss  %s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$(basename "$log")" >> "$SUMMARY"
    return $rc
}

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
    nvcc --version 2>/dev/null | tail -1
} > "$OUT/machine.log" 2>&1

for part in $parts; do
    case $part in
    tests)
        step "tests" 240 "$OUT/tests.log" "$TESTS" -d yes ;;
    sanitize | sanitize-all)
        tools="memcheck racecheck"
        [ "$part" = sanitize-all ] && tools="memcheck racecheck initcheck synccheck"
        # (racecheck takes ~100 s of the 200 since the fused output-norm shape joined
        # "[sanitize]", run 202.)
        for tool in $tools; do
            step "sanitizer $tool" 200 "$OUT/sanitize.log" \
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$TESTS" "[sanitize]"
        done
        # racecheck's reading of warpgroup barriers (bench/racecheck_barriers.cu): "paired", the
        # fused kernel's form, must report nothing; "one-sided" is race-free too, and racecheck
        # 2025.3 reported thousands of hazards on it (rc=9). Should it report none (rc=0), the
        # tool follows such barriers now, and the fused kernel's pair_bar can go.
        if [ -x "$B/bench/gdn_racecheck_barriers" ]; then
            step "racecheck paired" 60 "$OUT/sanitize.log" \
                compute-sanitizer --tool racecheck --error-exitcode 9 "$B/bench/gdn_racecheck_barriers" paired
            step "racecheck one-sided (rc 9 expected)" 60 "$OUT/sanitize.log" \
                compute-sanitizer --tool racecheck --error-exitcode 9 "$B/bench/gdn_racecheck_barriers" one-sided
        fi ;;
    resources)
        {
            echo "# cuobjdump --dump-resource-usage $LIB"
            cuobjdump --dump-resource-usage "$LIB" | c++filt
            echo
            echo "# SASS instruction counts per kernel (FFMA, LDS, STS, LDL/STL = local memory, BAR)"
            cuobjdump --dump-sass "$LIB" | c++filt > "$OUT/sass.txt"
            awk '/Function :/ {f=$0} /FFMA/ {ffma[f]++} /LDS/ {lds[f]++} /STS/ {sts[f]++}
                 /LDL|STL/ {loc[f]++} /BAR/ {bar[f]++}
                 END {for (k in ffma) printf "%s\n   FFMA %d  LDS %d  STS %d  local %d  BAR %d\n", k, ffma[k], lds[k], sts[k], loc[k], bar[k]}' "$OUT/sass.txt"
            xz -f -9 "$OUT/sass.txt"
        } > "$OUT/resources.log" 2>&1
        echo "resources                    rc=0            resources.log" >> "$SUMMARY" ;;
    bench)
        step "bench (CUDA)" 180 "$OUT/bench.log" "$BENCH" all ;;
    fla | fla-quick)
        if ls .whl/*.whl > /dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site .whl/*.whl > "$OUT/fla.log" 2>&1
            flag="" limit=270
            [ "$part" = fla-quick ] && flag="--quick" limit=90
            PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 step "fla beside gdn${flag:+ (quick)}" $limit "$OUT/fla.log" \
                python3 scripts/bench_fla.py --lib "$LIB" $flag
        else
            echo "fla: no wheels in .whl/, skipped" >> "$SUMMARY"
        fi ;;
    block-states)
        # GDN_FLAG_BLOCK_STATES on every chunked path (perf-notes v92-v93): the "[token_states]"
        # cases, memcheck on "[block_states]", then gdn-bench (bf16 in and out) without and
        # with --block-states, alternating, two rounds: FP32, BF16 (the fused kernel), BF16 on
        # the register-state scan (q/k/v rows padded by 4: no TMA), FP16.
        step "block states: tests" 240 "$OUT/block_states.log" "$TESTS" "[token_states]"
        step "block states: memcheck" 400 "$OUT/block_states.log" \
            compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" "[block_states]"
        for round in 1 2; do
            for shape in "--precision fp32 --T 8192,32768" "--precision bf16 --T 8192,32768" \
                         "--precision fp32 --T 4096 --seqs 8 --varlen" "--precision bf16 --T 4096 --seqs 8 --varlen" \
                         "--precision bf16 --in-row-pad 4 --T 8192" "--precision fp16 --T 8192"; do
                for flag in "" --block-states; do
                    # (shape is a list of arguments: split on purpose)
                    # shellcheck disable=SC2086
                    step "block states: bench $round" 120 "$OUT/block_states_bench.log" \
                        "$B/bench/gdn-bench" --backend cuda --dtype bf16 --out-dtype bf16 --algos auto \
                        --reps 10 --check-heads 2 $shape $flag
                done
            done
        done ;;
    *) echo "unknown part $part" >> "$SUMMARY" ;;
    esac
done

echo
echo "---------------- logs"
for f in tests bench; do
    [ -f "$OUT/$f.log" ] && { echo "## $f (tail)"; tail -n 60 "$OUT/$f.log"; }
done
# block states: each call's command and its table rows.
[ -f "$OUT/block_states_bench.log" ] && { echo "## block states bench"; grep -E "^=== |^prompt|^state:" "$OUT/block_states_bench.log" | cut -c1-240; }
# fla: its tables whole (from the matrix on), the start-up lines and any traceback included.
[ -f "$OUT/fla.log" ] && { echo "## fla"; grep -v "^  \[" "$OUT/fla.log" | grep -v "^$" | tail -n 150; }
[ -f "$OUT/sanitize.log" ] && { echo "## sanitizer summaries"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|===" "$OUT/sanitize.log" | tail -n 20; }
echo "---------------- summary"
cat "$SUMMARY"

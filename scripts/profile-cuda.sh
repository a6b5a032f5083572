#!/usr/bin/env bash
# On the GPU machine, after building build-cuda: Nsight Compute on one chunk-scan launch
# (T = 2048, bf16), one chunk-prep launch and one decode launch (N = 64); logs to $OUT.
# GDN_BUILD: the build folder (default build-cuda); GDN_BENCH_PRECISION=1|2|3|4|5:
# profile the tensor-core scan (TF32X3 / FP16 / BF16 / BF16X3 / FP16X3) instead of the FP32 one.
set -u
OUT=${OUT:-$PWD/gpu-logs}; mkdir -p "$OUT"
B=${GDN_BUILD:-build-cuda}/tests/cuda/gdn_bench_cuda
S="--section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters --import-source yes"
timeout 90 ncu --clock-control none -k regex:chunk_scan_kernel --launch-skip 2 --launch-count 1 $S $B profile-chunked > $OUT/ncu-scan.log 2>&1; echo scan rc=$?
timeout 50 ncu --clock-control none -k regex:chunk_prep_kernel --launch-skip 2 --launch-count 1 $S $B profile-chunked > $OUT/ncu-prep.log 2>&1; echo prep rc=$?
timeout 50 ncu --clock-control none -k regex:decode_kernel --launch-skip 2 --launch-count 1 $S $B profile-decode > $OUT/ncu-decode.log 2>&1; echo decode rc=$?
grep -E "Duration|Issue Slots Busy|Executed Ipc A|No Eligible|Stall|Warp Cycles Per Issued|Achieved Occupancy|Memory Throughput|DRAM Throughput|Registers|One or More" $OUT/ncu-*.log | cut -c1-160

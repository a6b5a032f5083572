#!/usr/bin/env bash
# Builds bench/peer_flashinfer.cu: FlashInfer's Hopper (sm_90a, CUTLASS) gated-delta-rule
# prefill beside gdn on the same inputs (times and errors against an FP64 recurrence).
# Not part of CMake: CI has no FlashInfer. Run from anywhere; paths are made absolute.
#
# usage: scripts/bench_flashinfer.sh FLASHINFER_DIR CUTLASS_DIR [GDN_BUILD_DIR] [OUT_BIN]
#    or: FLASHINFER_DIR=... CUTLASS_DIR=... [GDN_BUILD=build-final] [OUT_BIN=...] scripts/bench_flashinfer.sh
#   FLASHINFER_DIR  a FlashInfer source tree that still has the C++ sm90 prefill
#                   (include/flashinfer/flat/**; commit 992848ad3d0e21650f2d6cd2e03becae187cf743,
#                   the last one with csrc/gdn_prefill_launcher.cu)
#   CUTLASS_DIR     CUTLASS at the commit FlashInfer pins (3rdparty/cutlass: b46b16d0...)
#   GDN_BUILD_DIR   a CUDA build of gdn holding libgdn.so (default: build-final)
#   OUT_BIN         the binary (default: .peers/bin/peer_flashinfer)
# Export the two trees from git mirrors into the git-ignored .peers/, for example:
#   mkdir -p .peers/flashinfer .peers/cutlass
#   git -C FLASHINFER_MIRROR archive 992848ad3d0e21650f2d6cd2e03becae187cf743 include/flashinfer \
#       | tar -x -C .peers/flashinfer
#   git -C CUTLASS_MIRROR archive b46b16d003484063bca4ed365e44095c4c6ed633 include tools/util/include \
#       | tar -x -C .peers/cutlass
#
# The FlashInfer kernel is compiled alone (slow: CUTLASS; its object is kept in OBJ_DIR, default
# .peers/obj, and reused while the flags, the kernel part of the source and the trees are unchanged) with the flags of FlashInfer's JIT for this module
# (flashinfer/jit/gdn.py, core.py, cpp_ext.py: sm90a, -std=c++20, -use_fast_math, -O3,
# -DNDEBUG, --expt-relaxed-constexpr, -DFLAT_SM90A_ENABLED, -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED).
# The binary finds libgdn.so through its RUNPATH ($ORIGIN-relative to GDN_BUILD_DIR, and the
# absolute path); LD_LIBRARY_PATH=GDN_BUILD_DIR works too.
#
# Run on an H100/H200 from the repository root: .peers/bin/peer_flashinfer [--quick] [--help]
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}
case "${1:-}" in -h | --help) usage ;; esac

ROOT=$(cd "$(dirname "$0")/.." && pwd)
FLASHINFER_DIR=${1:-${FLASHINFER_DIR:-}}
CUTLASS_DIR=${2:-${CUTLASS_DIR:-}}
GDN_BUILD=${3:-${GDN_BUILD:-$ROOT/build-final}}
OUT_BIN=${4:-${OUT_BIN:-$ROOT/.peers/bin/peer_flashinfer}}
NVCC=${NVCC:-nvcc}

die() { echo "$*" >&2; exit 2; }
if [ -z "$FLASHINFER_DIR" ] || [ -z "$CUTLASS_DIR" ]; then usage; fi
[ -f "$FLASHINFER_DIR/include/flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh" ] ||
    die "no include/flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh in $FLASHINFER_DIR"
[ -f "$CUTLASS_DIR/include/cutlass/cutlass.h" ] || die "no include/cutlass/cutlass.h in $CUTLASS_DIR"
[ -d "$CUTLASS_DIR/tools/util/include" ] || die "no tools/util/include in $CUTLASS_DIR"
[ -e "$GDN_BUILD/libgdn.so" ] || die "no libgdn.so in $GDN_BUILD (a CUDA build of gdn)"

FLASHINFER_DIR=$(cd "$FLASHINFER_DIR" && pwd)
CUTLASS_DIR=$(cd "$CUTLASS_DIR" && pwd)
GDN_BUILD=$(cd "$GDN_BUILD" && pwd)
mkdir -p "$(dirname "$OUT_BIN")"
OUT_BIN=$(cd "$(dirname "$OUT_BIN")" && pwd)/$(basename "$OUT_BIN")
OBJ_DIR=${OBJ_DIR:-$ROOT/.peers/obj}
mkdir -p "$OBJ_DIR"
SRC=$ROOT/bench/peer_flashinfer.cu

ARCH="-gencode=arch=compute_90a,code=sm_90a"
COMMON="-O3 -DNDEBUG $ARCH --expt-relaxed-constexpr -Xcompiler=-fPIC"
KERNEL_FLAGS="-std=c++20 -use_fast_math -static-global-template-stub=false -Xfatbin=-compress-all
  -diag-suppress=2908 -DFLAT_SM90A_ENABLED -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
  -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16
  -I$FLASHINFER_DIR/include -I$CUTLASS_DIR/include -I$CUTLASS_DIR/tools/util/include"

# The kernel object, rebuilt when its inputs change: a stamp of the command, the compiler, the
# source up to the driver part, and the two trees' file lists (names, sizes, times).
KOBJ=$OBJ_DIR/peer_flashinfer_kernel.o
STAMP=$( { echo "$NVCC $COMMON $KERNEL_FLAGS"; "$NVCC" --version | tail -1;
           sed '/^#if !defined(PEER_FI_PART_KERNEL)/,$d' "$SRC";
           find "$FLASHINFER_DIR/include" "$CUTLASS_DIR/include" "$CUTLASS_DIR/tools/util/include" \
                -type f -printf '%p %s %T@\n' | sort; } | sha256sum | cut -c1-16)
if [ -f "$KOBJ" ] && [ "$(cat "$KOBJ.stamp" 2>/dev/null)" = "$STAMP" ]; then
    echo "kernel object up to date: $KOBJ"
else
    echo "compiling the FlashInfer kernel (CUTLASS; minutes) ..."
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$NVCC" $COMMON $KERNEL_FLAGS -DPEER_FI_PART_KERNEL -c "$SRC" -o "$KOBJ"
    echo "$STAMP" > "$KOBJ.stamp"
    echo "  $(( $(date +%s) - start )) s"
fi

echo "compiling the driver ..."
DOBJ=$OBJ_DIR/peer_flashinfer_driver.o
# shellcheck disable=SC2086
"$NVCC" $COMMON -std=c++17 -Xcompiler=-Wall,-Wextra -I"$ROOT/include" -DPEER_FI_PART_DRIVER \
    -c "$SRC" -o "$DOBJ"

# RUNPATH: libgdn.so from GDN_BUILD, by a path relative to the binary (so the tree can move
# with it, e.g. .peers/bin -> ../../build-final) and by its absolute path.
REL=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' \
      "$GDN_BUILD" "$(dirname "$OUT_BIN")" 2>/dev/null || echo "$GDN_BUILD")
# shellcheck disable=SC2016
"$NVCC" $ARCH "$KOBJ" "$DOBJ" -o "$OUT_BIN" -L"$GDN_BUILD" -lgdn -lpthread \
    -Xlinker -rpath -Xlinker '$ORIGIN/'"$REL" -Xlinker -rpath -Xlinker "$GDN_BUILD"
echo "built $OUT_BIN ($(du -h "$OUT_BIN" | cut -f1)); libgdn.so from $GDN_BUILD"

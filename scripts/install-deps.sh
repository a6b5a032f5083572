#!/usr/bin/env bash
# Installs what building and testing gdn needs from Debian's packages (12,
# bookworm). Without arguments: the CPU build and its tests. --all adds the
# HIP toolchain (clang-19, ROCm device libraries: the HIP backend's build
# checks), the ABI tools and the fuzzer runtime. Installs only what is missing.
set -euo pipefail
pkgs=(cmake g++ make catch2 libfmt-dev pkg-config)
if [[ "${1:-}" == "--all" ]]; then
  pkgs+=(clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs clang-tools-19 abigail-tools binutils python3 libclang-rt-19-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

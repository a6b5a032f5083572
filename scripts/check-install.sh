#!/usr/bin/env bash
# Installs gdn into a temporary prefix and builds and runs two consumers
# against the *installed* tree only, each in its own build directory:
#   - tests/abi/consumers/c:   a C99 program compiled with `pkg-config gdn`;
#   - tests/abi/consumers/cxx: a C++ program whose CMake project does
#     find_package(gdn CONFIG) and links gdn::gdn (and checks the package's
#     version, components and GDN_HAS_* variables).
# Each consumer runs a small problem on the CPU backend and checks the result.
#
#   scripts/check-install.sh [BUILD_DIR]
#
# With BUILD_DIR (a configured and built gdn tree) that tree is installed;
# without it a CPU-only gdn is configured and built in a temporary directory.
# KEEP=1 keeps the temporary directory.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gdn-check-install.XXXXXX")"
if [[ "${KEEP:-0}" != 1 ]]; then
    trap 'rm -rf "$work"' EXIT
fi
step() { echo "== $*"; }

if [[ $# -ge 1 ]]; then
    build="$(cd "$1" && pwd)"
else
    build="$work/gdn-build"
    step "configure and build a CPU-only gdn in $build"
    cmake -S "$src" -B "$build" -DGDN_ENABLE_CUDA=OFF -DGDN_ENABLE_HIP=OFF \
        -DGDN_BUILD_TESTS=OFF -DGDN_BUILD_EXAMPLES=OFF -DGDN_BUILD_BENCH=OFF > "$work/configure.log"
    cmake --build "$build" --target gdn -j2 > "$work/build.log"
fi

prefix="$work/prefix"
step "install $build into a fresh prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
sed "s#$work#<tmp>#g" "$work/install.log"

# The installed tree: header, library with its SONAME chain, package files.
fail=0
expect_file() {
    if [[ ! -e "$prefix/$1" ]]; then
        echo "FAILED: the install has no $1"
        fail=1
    fi
}
expect_file include/gdn/gdn.h
shopt -s nullglob
libdir=""
for d in "$prefix"/lib "$prefix"/lib64 "$prefix"/lib/*-linux-gnu; do
    [[ -e "$d/cmake/gdn/gdnConfig.cmake" ]] && libdir="$d"
done
if [[ -z "$libdir" ]]; then
    echo "FAILED: no lib*/cmake/gdn/gdnConfig.cmake in the install"
    exit 1
fi
rel="${libdir#"$prefix"/}"
expect_file "$rel/cmake/gdn/gdnConfigVersion.cmake"
expect_file "$rel/cmake/gdn/gdnTargets.cmake"
expect_file "$rel/pkgconfig/gdn.pc"
shared=0
if [[ -e "$libdir/libgdn.so" ]]; then
    shared=1
    real="$(readlink -f "$libdir/libgdn.so")"
    soname="$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
    echo "libgdn.so -> $(basename "$real"), SONAME $soname"
    if [[ ! -e "$libdir/$soname" || "$(readlink -f "$libdir/$soname")" != "$real" ]]; then
        echo "FAILED: $soname is not installed beside libgdn.so pointing to the same file"
        fail=1
    fi
    if [[ ! "$soname" =~ ^libgdn\.so\.[0-9]+$ ]]; then
        echo "FAILED: SONAME '$soname' is not libgdn.so.<major>"
        fail=1
    fi
else
    expect_file "$rel/libgdn.a"
fi
if grep -rq "$src\|$build" "$libdir/cmake/gdn" "$libdir/pkgconfig"; then
    echo "FAILED: the installed package files name the source or build tree:"
    grep -rn "$src\|$build" "$libdir/cmake/gdn" "$libdir/pkgconfig"
    fail=1
fi

# C consumer via pkg-config, nothing but the installed prefix on the paths.
step "C consumer via pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig"
echo "pkg-config gdn: version $(pkg-config --modversion gdn), cflags '$(pkg-config --cflags gdn | sed "s#$work#<tmp>#g")'," \
     "libs '$(pkg-config --libs gdn | sed "s#$work#<tmp>#g")'"
pc_libs="$(pkg-config --libs gdn)"
[[ $shared == 0 ]] && pc_libs="$(pkg-config --libs --static gdn)"
mkdir -p "$work/consumer-c"
# shellcheck disable=SC2046
${CC:-cc} -std=c99 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags gdn) \
    "$src/tests/abi/consumers/c/consumer.c" -o "$work/consumer-c/consumer" \
    $pc_libs -Wl,-rpath,"$(pkg-config --variable=libdir gdn)" -lm
"$work/consumer-c/consumer"

# C++ consumer via find_package, in a separate CMake build directory.
step "C++ consumer via find_package(gdn CONFIG)"
cmake -S "$src/tests/abi/consumers/cxx" -B "$work/consumer-cxx" \
    -DCMAKE_PREFIX_PATH="$prefix" -DGDN_EXPECT_VERSION="$(pkg-config --modversion gdn)" \
    > "$work/consumer-cxx.log" || { cat "$work/consumer-cxx.log"; exit 1; }
grep -E "^-- gdn" "$work/consumer-cxx.log" | sed "s#$work#<tmp>#g"
cmake --build "$work/consumer-cxx" -j2 > "$work/consumer-cxx-build.log" ||
    { cat "$work/consumer-cxx-build.log"; exit 1; }
"$work/consumer-cxx/gdn_consumer_cxx"

if [[ $fail != 0 ]]; then
    echo "check-install: FAILED"
    exit 1
fi
echo "check-install: the installed tree serves a C (pkg-config) and a C++ (find_package) consumer"

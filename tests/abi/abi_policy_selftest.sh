#!/usr/bin/env bash
# The ABI check must fail on every incompatible change and pass the allowed
# ones. A tiny library shaped like gdn (a versioned struct passed by pointer,
# a status enum) is built in variants, each compared by abi/check-abi.sh with
# the base variant's baseline; the expected verdict of each is listed below.
#   usage: abi_policy_selftest.sh CHECK_ABI_SCRIPT [CC]
set -euo pipefail
check="$1"
cc="${2:-cc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cat > "$work/base.h" <<'EOF'
#include <stddef.h>
#include <stdint.h>
typedef enum demo_status_t { DEMO_OK = 0, DEMO_BAD = 1 } demo_status_t;
typedef struct demo_problem_t { size_t struct_size; int32_t a; int64_t b; float c; } demo_problem_t;
__attribute__((visibility("default"))) demo_status_t demo_run(const demo_problem_t* p, int n);
__attribute__((visibility("default"))) demo_status_t demo_fill(demo_problem_t* p);
EOF
cat > "$work/impl.c" <<'EOF'
#include "demo.h"
demo_status_t demo_run(const demo_problem_t* p, int n) { return p->a + n ? DEMO_OK : DEMO_BAD; }
#ifndef NO_FILL
demo_status_t demo_fill(demo_problem_t* p) { p->a = 1; return DEMO_OK; }
#endif
#ifdef ADD_FN
__attribute__((visibility("default"))) int demo_new(void) { return 3; }
#endif
static int private_helper(int x) { return x + 1; }
int demo_not_exported(int x) { return private_helper(x); }
EOF

# name | expected (pass/fail) | sed edit of the header | extra compile flags
variants=(
  "base|pass||"
  "append_field|pass|s/float c; }/float c; double d; int32_t e; }/|"
  "add_function|pass||-DADD_FN"
  "add_enumerator|pass|s/DEMO_BAD = 1 }/DEMO_BAD = 1, DEMO_NEW = 2 }/|"
  "reorder_fields|fail|s/int32_t a; int64_t b;/int64_t b; int32_t a;/|"
  "insert_field_in_middle|fail|s/int32_t a; int64_t b;/int32_t a; int32_t x; int64_t b;/|"
  "retype_field|fail|s/float c; }/double c; }/|"
  "retype_and_append|fail|s/float c; }/double c; double d; }/|"
  "remove_field|fail|s/ float c; }/ }/|"
  "renumber_enumerator|fail|s/DEMO_BAD = 1 }/DEMO_BAD = 2 }/|"
  "change_parameter|fail|s/const demo_problem_t\\* p, int n/const demo_problem_t* p, long n/|"
  "remove_function|fail|/demo_fill/d|-DNO_FILL"
)

build() {  # name edit flags
    local dir="$work/$1"
    mkdir -p "$dir"
    sed -e "${2:-}" "$work/base.h" > "$dir/demo.h"
    sed -e 's/int n) { return/PARAM) { return/' "$work/impl.c" > "$dir/impl.c"
    local param="int n"
    grep -q "long n" "$dir/demo.h" && param="long n"
    sed -i "s/PARAM/$param/" "$dir/impl.c"
    # shellcheck disable=SC2086
    "$cc" -g -O2 -shared -fPIC -fvisibility=hidden ${3:-} -I"$dir" "$dir/impl.c" \
        -Wl,-soname,libdemo.so.0 -o "$dir/libdemo.so"
}

build base "" ""
bash "$check" --headers "$work/base" --update "$work/base/libdemo.so" "$work/baseline.abi" > /dev/null
if grep -q "$work" "$work/baseline.abi"; then
    echo "FAILED: the baseline names the build directory"
    exit 1
fi

failures=0
passed=0
for v in "${variants[@]}"; do
    IFS='|' read -r name want edit flags <<< "$v"
    build "$name" "$edit" "$flags"
    set +e
    out="$(bash "$check" --headers "$work/$name" "$work/$name/libdemo.so" "$work/baseline.abi" 2>&1)"
    rc=$?
    set -e
    got=pass
    [[ $rc -eq 1 ]] && got=fail
    if [[ $rc -ge 2 ]]; then
        echo "FAILED: $name: the check could not run (exit $rc):"
        echo "$out"
        failures=$((failures + 1))
    elif [[ $got != "$want" ]]; then
        echo "FAILED: $name: expected $want, got $got:"
        echo "$out"
        failures=$((failures + 1))
    else
        echo "ok: $name -> $got"
        passed=$((passed + 1))
    fi
done
echo "abi policy self-test: $passed of ${#variants[@]} variants judged as expected"
[[ $failures -eq 0 ]]

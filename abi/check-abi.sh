#!/usr/bin/env bash
# The ABI check: compares a freshly built libgdn.so (with DWARF, e.g. the
# tests' libgdn twin or a RelWithDebInfo build) against the committed baseline
# of the current release, with Debian's abigail-tools (abidw, abidiff).
#
#   abi/check-abi.sh [--headers DIR] LIB [BASELINE]           compare; 0 = compatible
#   abi/check-abi.sh [--headers DIR] --update LIB [BASELINE]  write LIB's ABI as the baseline
#
# BASELINE defaults to abi/libgdn.so.<major>.abi, <major> from LIB's SONAME.
# Only the types declared in the public headers (DIR, default include/gdn)
# are part of the ABI; the library's internal C++ types are not.
#
# The policy (docs/versioning.md): within a major version the only changes
# allowed are additions — new exported functions, new enumerators, fields
# appended at the end of a struct (struct_size evolution). Anything else
# (a function removed or its signature changed, a field moved, retyped or
# removed, an enumerator renumbered) fails. abidiff alone calls most of those
# "changes that may or may not be compatible" (exit bit 4), and its
# suppression rules for "inserted at end" also hide a retyped field, so the
# appended fields are cut here instead: each struct of LIB that grew is
# truncated back to the baseline's size before the comparison, and then
# abidiff must report no change at all, added symbols aside.
#
# Exit: 0 compatible, 1 incompatible (the report says what), 2 the check
# could not run (missing tool, no debug info, no baseline).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
update=0
headers="$here/../include/gdn"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --update) update=1; shift ;;
        --headers) headers="$2"; shift 2 ;;
        *) break ;;
    esac
done
if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 [--headers DIR] [--update] LIB [BASELINE]" >&2
    exit 2
fi
headers="$(cd "$headers" && pwd)"
lib="$1"

for tool in abidw abidiff readelf python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "check-abi: '$tool' not found (apt-get install abigail-tools binutils python3)" >&2
        exit 2
    fi
done
if [[ ! -f "$lib" ]]; then
    echo "check-abi: no library at '$lib'" >&2
    exit 2
fi
sections="$(readelf -S "$lib")"
if [[ "$sections" != *.debug_info* ]]; then
    echo "check-abi: '$lib' has no DWARF: abidiff would see symbols but no types." >&2
    echo "           Check the libgdn twin the tests build (tests/abi), or a -g build." >&2
    exit 2
fi
soname="$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
baseline="${2:-$here/${soname:-libgdn.so}.abi}"

# Machine-independent output: no paths, no locations, no build directory.
abidw_flags=(--no-corpus-path --no-comp-dir-path --no-show-locs --no-elf-needed
             --no-parameter-names --type-id-style hash
             --headers-dir "$headers" --drop-private-types --exported-interfaces-only)

if [[ $update == 1 ]]; then
    abidw "${abidw_flags[@]}" --out-file "$baseline" "$lib"
    # Path attributes name the build machine's files: keep only base names.
    sed -i -E "s#(path=')[^']*/#\1#g" "$baseline"
    echo "check-abi: wrote $(basename "$baseline") from $lib ($soname)"
    exit 0
fi

if [[ ! -f "$baseline" ]]; then
    echo "check-abi: no baseline '$baseline' (SONAME '$soname'); a new major version starts" >&2
    echo "           with 'abi/check-abi.sh --update LIB', see docs/versioning.md" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
abidw "${abidw_flags[@]}" --out-file "$work/new.abi" "$lib"

# Truncate every struct that grew back to the baseline's size: members that
# start at or after the old end were appended, which the policy allows.
set +e
python3 - "$baseline" "$work/new.abi" "$work/new-truncated.abi" <<'PY'
import sys
import xml.etree.ElementTree as ET

base = ET.parse(sys.argv[1]).getroot()
tree = ET.parse(sys.argv[2])
new = tree.getroot()

def structs(root):
    out = {}
    for c in root.iter("class-decl"):
        name, size = c.get("name"), c.get("size-in-bits")
        if name and size and c.get("is-declaration-only") != "yes":
            out.setdefault(name, int(size))
    return out

old_size = structs(base)
new_size = structs(new)
# A header directory that does not match the DWARF's would drop every type and
# hide every change: each public struct of the baseline must still be seen.
lost = sorted(set(old_size) - set(new_size))
if lost:
    print(f"check-abi: the new ABI has no {', '.join(lost)}: removed from gdn.h, or the "
          f"headers directory does not match the library's debug info")
    sys.exit(3)
for c in new.iter("class-decl"):
    name, size = c.get("name"), c.get("size-in-bits")
    if name not in old_size or not size or int(size) <= old_size[name]:
        continue
    cut = old_size[name]
    appended = [m for m in c.findall("data-member")
                if int(m.get("layout-offset-in-bits", "0")) >= cut]
    for m in appended:
        c.remove(m)
    c.set("size-in-bits", str(cut))
    names = [v.get("name") for m in appended for v in m.findall("var-decl")]
    print(f"check-abi: {name} grew from {cut // 8} to {int(size) // 8} bytes; "
          f"appended (allowed): {', '.join(names) or 'padding only'}")
tree.write(sys.argv[3])
PY
rc=$?
set -e
if [[ $rc -eq 3 ]]; then
    exit 1
elif [[ $rc -ne 0 ]]; then
    echo "check-abi: reading the ABI files failed" >&2
    exit 2
fi

set +e
abidiff --no-added-syms --no-show-locs "$baseline" "$work/new-truncated.abi" > "$work/report.txt"
rc=$?
set -e
if [[ $rc -eq 0 ]]; then
    added="$( (abidiff --no-show-locs "$baseline" "$work/new.abi" || true) |
              sed -n 's/^Functions changes summary:.*, \([0-9]*\) Added functions.*/\1/p')"
    echo "check-abi: $soname is compatible with $(basename "$baseline") (${added:-0} functions added)"
    exit 0
fi
cat "$work/report.txt"
if (( rc & 3 )); then
    echo "check-abi: abidiff failed to run (exit $rc)" >&2
    exit 2
fi
echo "check-abi: INCOMPATIBLE with $(basename "$baseline") (abidiff exit $rc): within a major"
echo "           version only additions are allowed; see docs/versioning.md"
exit 1

#!/bin/bash
# tests/check-layers.sh [SRC]: the include arrows of src/ point down only
# (docs/architecture.md, "Data flow"); run by `make lint` (mk/lint.mk).
#
# Each rule names a folder of SRC (default src) and the folders its files
# (.c and .h, in it or below it: src/store/redis is store) may not include
# from. Nothing below the api knows about JSON or
# HTTP; the Redis module links the core, the wire encodings and util only,
# never an engine of the store; the core is pure and includes only itself
# and util. Prints file:line: the include, for every one that breaks a rule;
# exits 1 if there is any.
set -uo pipefail
SRC=${1:-src}

RULES=(
    # folder    may not include from
    "store      api http server"
    "wal        api http server"
    "cluster    api http server"
    "wire       api http server"
    "core       api http server store wal cluster wire module"
    "module     api http server store wal cluster"
    "util       api http server store wal cluster wire core module"
)

status=0
for rule in "${RULES[@]}"; do
    read -r folder banned <<<"$rule"
    [ -d "$SRC/$folder" ] || continue
    alternatives=$(tr ' ' '|' <<<"$banned")
    # "api/x.h", <api/x.h> or "../api/x.h"
    pattern="^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<](\.\./)*($alternatives)/"
    # the folder's files and its subfolders' (an engine's folder in store)
    found=$(grep -rEHn --include='*.[ch]' "$pattern" "$SRC/$folder" 2>/dev/null)
    if [ -n "$found" ]; then
        sed "s|\$| (src/$folder may not include from: $banned)|" <<<"$found"
        status=1
    fi
done
[ $status -eq 0 ] || echo "check-layers: an include points up (docs/architecture.md)"
exit $status

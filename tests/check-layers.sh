#!/bin/bash
# tests/check-layers.sh [SRC]: the include arrows of src/ point down only
# (docs/architecture.md, "Data flow"); run by `make lint` (mk/lint.mk).
#
# Each rule names a folder of SRC (default src) and the folders its files
# (.c and .h, in it or below it: src/store/redis is store) may not include
# from. The HTTP layer knows the api and util only, the api nothing above it;
# nothing below the api knows about JSON or HTTP; the Redis module links the
# core, the wire encodings and util only, never an engine of the store; the
# core is pure and includes only itself and util. The client library (lib/,
# beside SRC) includes of src/ only util's header-only helpers, one way:
# "util/NAME.h" through -iquote src (mk/client.mk), never a path into src/.
# Prints file:line: the include, for every one that breaks a rule; exits 1
# if there is any.
set -uo pipefail
SRC=${1:-src}

RULES=(
    # folder    may not include from
    "http       server store wal cluster wire core module"
    "api        http server"
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
# lib/: no folder of src/ but util, and no path into src/ ("../src/...")
LIB=$(dirname "$SRC")/lib
if [ -d "$LIB" ]; then
    pattern='^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]((\.\./)+|(\.\./)*src/|(api|http|server|store|wal|cluster|wire|core|module)/)'
    found=$(grep -rEHn --include='*.[ch]' "$pattern" "$LIB" 2>/dev/null)
    if [ -n "$found" ]; then
        sed 's|$| (lib may include of src/ only "util/NAME.h", through -iquote src)|' <<<"$found"
        status=1
    fi
fi
[ $status -eq 0 ] || echo "check-layers: an include points up (docs/architecture.md)"
exit $status

#!/bin/sh
# fuzz/merge-corpus.sh [TARGET...]: add to fuzz/corpus/TARGET the inputs that a
# fuzzing run left in build/fuzz/corpus/TARGET and that reach code the kept
# corpus does not (libFuzzer -merge=1). Default: every target. Then commit
# fuzz/corpus (make test replays it).
set -e
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- $(ls fuzz/fuzz_*.c | sed -n 's#fuzz/fuzz_\(.*\)\.c#\1#p' | grep -v '^common$')
for t in "$@"; do
    bin=build/fuzz/fuzz_$t
    [ -x "$bin" ] || { echo "merge-corpus: $bin missing (make fuzz-build)"; exit 1; }
    [ -d "build/fuzz/corpus/$t" ] || { echo "merge-corpus: nothing found for $t"; continue; }
    before=$(ls "fuzz/corpus/$t" | wc -l)
    extra=""
    [ "$t" = wal_recover ] && extra=-close_fd_mask=2
    "$bin" -merge=1 $extra "fuzz/corpus/$t" "build/fuzz/corpus/$t" >/dev/null 2>&1
    echo "$t: $before -> $(ls "fuzz/corpus/$t" | wc -l) inputs"
done

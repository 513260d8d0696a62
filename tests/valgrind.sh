#!/bin/sh
# tests/valgrind.sh: integration scripts with every server under valgrind memcheck.
#
#   tests/valgrind.sh                      the main scripts against build/hf3fs-metad
#   tests/valgrind.sh test_vllm.py ...     chosen scripts (names under tests/integration/)
#   BUILD=build tests/valgrind.sh          another build directory (not the ASan one)
#
# Each server the tests start runs as
#   valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect,possible ...
# with one log per server; a memory error, or a leak at the clean exit on
# SIGTERM, is an error in that log. (Not --error-exitcode: the server's
# snapshot child, a fork that writes the snapshot and _exits without freeing
# the parent's memory, would exit with it and count as a failed snapshot.)
# Timeouts are stretched (HF3FS_TEST_SLOWDOWN, default 25). Ends with the log
# of every server that had errors, "N passed, N failed" over the scripts, and
# the totals of errors and leaked bytes; exits 0 only if every script passed
# and valgrind found nothing.
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
BIN="$BUILD/hf3fs-metad"
[ -x "$BIN" ] || { echo "valgrind.sh: $BIN missing: run make first"; exit 2; }
command -v valgrind >/dev/null 2>&1 || { echo "valgrind.sh: valgrind is not installed (Debian: apt-get install valgrind)"; exit 2; }

# (test_ops.py is clean under valgrind too, but two of its tests time log
# lines too tightly for a server 25 times slower: run it by name.)
if [ $# -eq 0 ]; then
    set -- test_vllm.py test_sglang.py test_leases.py test_http.py test_malformed.py \
           test_concurrency.py test_abuse.py test_durability.py test_auth.py test_metrics.py
fi

LOGS=$(mktemp -d /tmp/hf3fs-valgrind.XXXXXX)
# --child-silent-after-fork: the snapshot child is not the server's shutdown.
export HF3FS_METAD_WRAPPER="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible --child-silent-after-fork=yes --num-callers=30 --log-file=$LOGS/vg-%p.log"
export HF3FS_TEST_SLOWDOWN=${HF3FS_TEST_SLOWDOWN:-25}
export HF3FS_METAD_BIN="$BIN"

passed=0
failed=0
for t in "$@"; do
    case "$t" in */*) path=$t ;; *) path=tests/integration/$t ;; esac
    echo "=== $t (under valgrind)"
    if "$PYTHON" "$path"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL $t"
    fi
done

echo
servers=0
errors=0
leaked=0
for log in "$LOGS"/vg-*.log; do
    [ -f "$log" ] || continue
    servers=$((servers + 1))
    n=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$log" | tr -d , | tail -1)
    [ -n "$n" ] || n=0
    errors=$((errors + n))
    for kind in "definitely lost" "indirectly lost" "possibly lost"; do
        b=$(sed -n "s/.*$kind: \([0-9,]*\) bytes.*/\1/p" "$log" | tr -d , | tail -1)
        [ -n "$b" ] && leaked=$((leaked + b))
    done
    if [ "$n" -ne 0 ]; then
        echo "valgrind found $n errors in $log:"
        sed -n '1,60p' "$log"
    fi
done
echo "valgrind: $servers servers, $errors errors, $leaked bytes definitely/indirectly/possibly lost (logs in $LOGS)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$errors" -eq 0 ] && [ "$leaked" -eq 0 ]

#!/bin/sh
# Run every test against the build directory $1 (build or build/asan):
# the unit test binaries, then the integration scripts, which start
# $1/hf3fs-metad themselves on free ports. Ends with "N passed, N failed".
BUILD=${1:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
passed=0
failed=0
failures=""
run() {
    name=$1; shift
    echo "=== $name"
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failures="$failures $name"
    fi
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && run "$(basename "$t")" "$t"
done
for t in tests/integration/test_*.py; do
    [ -f "$t" ] && run "$(basename "$t")" env HF3FS_METAD_BIN="$BUILD/hf3fs-metad" "$PYTHON" "$t"
done
echo
[ -n "$failures" ] && echo "failed suites:$failures"
echo "suites in $BUILD"
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

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
# The suites about the state and the routes again, over the Redis engine
# (harness.py: HF3FS_TEST_ENGINE=redis starts a redis-server of their own,
# with the module $BUILD/hf3fs_metad_redis.so loaded: redis_server.py).
# Not again: the HTTP layer, auth and abuse (the engine plays no part), the
# embedded engine's files (durability, fuzz corpora) and the bench. test_crash
# over Redis kills the front end: Redis must have every acknowledged change.
REDIS_SUITES="test_vllm test_sglang test_leases test_concurrency test_malformed test_metrics
              test_ops test_load test_cli test_client_lib test_crash test_page_integrity
              test_retries test_fuzz_corpus"
# The reference model over Redis (tests/engines.h starts its redis-server).
run "test_model[redis]" env HF3FS_TEST_ENGINE=redis "$BUILD/tests/test_model"
for name in $REDIS_SUITES; do
    t=tests/integration/$name.py
    run "$name.py[redis]" env HF3FS_TEST_ENGINE=redis HF3FS_METAD_BIN="$BUILD/hf3fs-metad" \
        "$PYTHON" "$t"
done
# The same over a local Redis Cluster (3 primaries + 3 replicas, each process
# starts its own: tests/engines.h, harness.py): every store call goes to the
# node of its namespace's slot (one module value per namespace).
run "test_model[redis-cluster]" env HF3FS_TEST_ENGINE=redis-cluster "$BUILD/tests/test_model"
for name in $REDIS_SUITES; do
    t=tests/integration/$name.py
    run "$name.py[redis-cluster]" env HF3FS_TEST_ENGINE=redis-cluster \
        HF3FS_METAD_BIN="$BUILD/hf3fs-metad" "$PYTHON" "$t"
done
echo
[ -n "$failures" ] && echo "failed suites:$failures"
echo "suites in $BUILD"
echo "suites: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

"""The libFuzzer targets of fuzz/ in their short form: each replays its whole
seed corpus (fuzz/corpus/<target>/, which keeps the inputs of past findings as
regress-* files), then fuzzes for a few seconds from it. Any crash, sanitizer
report or broken oracle fails the test; the input that caused it is written to
build/fuzz/crashes/.

With HF3FS_TEST_ENGINE=redis (run-all.sh) only fuzz_sequence's corpus is
replayed, against the Redis engine (tests/engines.h). HF3FS_FUZZ_SHARD=I/N
replays only the I-th of N equal shares of each corpus (I from 1), so that a
runner can split a long replay into N processes, each with a Redis of its own.

The targets are built by `make units` (mk/fuzz.mk, clang with libFuzzer, ASan
and UBSan) into $HF3FS_FUZZ_DIR (default build/fuzz). Seconds of fuzzing per
target: $HF3FS_FUZZ_TEST_SECONDS (default 3; 0: the replay alone). The long
form is `make fuzz`.
"""

import os
import re
import shutil
import subprocess
import tempfile

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUZZ_DIR = os.environ.get("HF3FS_FUZZ_DIR", os.path.join(ROOT, "build", "fuzz"))
SECONDS = int(os.environ.get("HF3FS_FUZZ_TEST_SECONDS", "3"))
# Per-target options, as mk/fuzz.mk passes them.
EXTRA = {"wal_recover": ["-close_fd_mask=2"]}


def targets():
    names = sorted(f[len("fuzz_"):-2] for f in os.listdir(os.path.join(ROOT, "fuzz"))
                   if f.startswith("fuzz_") and f.endswith(".c") and f != "fuzz_common.c")
    return names


def binary(target):
    path = os.path.join(FUZZ_DIR, "fuzz_" + target)
    if not os.access(path, os.X_OK):
        raise AssertionError("%s is missing: build it with `make fuzz-build` (needs clang and "
                             "libclang-rt-14-dev)" % path)
    return path


def run(target, args, timeout):
    crashes = os.path.join(FUZZ_DIR, "crashes")
    os.makedirs(crashes, exist_ok=True)
    cmd = [binary(target), "-artifact_prefix=%s/%s-" % (crashes, target),
           "-dict=" + os.path.join(ROOT, "fuzz", "fuzz.dict"), "-rss_limit_mb=2048",
           "-timeout=20"] + EXTRA.get(target, []) + args
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        lines = [x for x in out.splitlines()
                 if "FUZZ ORACLE" in x or "ERROR" in x or "SUMMARY" in x or "Test unit" in x]
        raise AssertionError("fuzz_%s exited %d: %s\n%s" % (target, p.returncode,
                                                           " | ".join(lines[:6]), out[-3000:]))
    return out


def corpus(target):
    path = os.path.join(ROOT, "fuzz", "corpus", target)
    harness.expect_true(os.path.isdir(path) and os.listdir(path),
                        "fuzz/corpus/%s is missing or empty" % target)
    return path


def shard():
    """(I, N) from HF3FS_FUZZ_SHARD=I/N, or None for the whole corpus."""
    spec = os.environ.get("HF3FS_FUZZ_SHARD")
    if not spec:
        return None
    i, n = (int(x) for x in spec.split("/"))
    if not 1 <= i <= n:
        raise SystemExit("HF3FS_FUZZ_SHARD=%s: need I/N with 1 <= I <= N" % spec)
    return i, n


def replay(target):
    if harness.ENGINE in harness.REDIS_ENGINES:
        os.environ["HF3FS_TEST_REDIS_URL"] = harness.new_redis_db()
    part = shard()
    if part is None:
        out = run(target, ["-runs=0", corpus(target)], timeout=300 * harness.SLOWDOWN)
        harness.expect_true("INITED" in out or "Done" in out,
                            "fuzz_%s did not run its corpus:\n%s" % (target, out[-2000:]))
        return
    # Named files are run one by one ("Executed FILE in N ms" each).
    files = sorted(os.listdir(corpus(target)))[part[0] - 1::part[1]]
    out = run(target, [os.path.join(corpus(target), f) for f in files],
              timeout=300 * harness.SLOWDOWN)
    executed = out.count("Executed ")
    harness.expect_eq(executed, len(files), "inputs of fuzz/corpus/%s (shard %d/%d) executed"
                      % (target, part[0], part[1]))


def short_run(target):
    """The whole seed corpus first (libFuzzer runs every file of it before it
    mutates: that is the replay, each file at its full length), then
    SECONDS of fuzzing from it."""
    work = tempfile.mkdtemp(prefix="hf3fs-fuzz-%s-" % target)
    seeds = corpus(target)
    files = os.listdir(seeds)
    longest = max(os.path.getsize(os.path.join(seeds, f)) for f in files)
    try:
        # SECONDS 0 (run-all.sh --check): the replay alone
        fuzz = ["-max_total_time=%d" % SECONDS] if SECONDS > 0 else ["-runs=0"]
        out = run(target, fuzz + ["-max_len=%d" % max(4096, longest),
                           "-seed=1", work, seeds], timeout=SECONDS + 300 * harness.SLOWDOWN)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m = re.search(r"seed corpus: files: (\d+)", out)
    harness.expect_true(m is not None and "INITED" in out,
                        "fuzz_%s did not run its seed corpus:\n%s" % (target, out[-2000:]))
    harness.expect_eq(int(m.group(1)), len(files), "files of fuzz/corpus/%s run" % target)


def _make_tests():
    tests = {}
    for target in targets():
        def replay_test(t=target):
            replay(t)

        def short_test(t=target):
            short_run(t)
        # The embedded engine: one libFuzzer run replays the corpus and then
        # fuzzes. With HF3FS_TEST_ENGINE=redis (run-all.sh) only the sequence
        # fuzzer (tests/engines.h: it drives the engine the variable names)
        # replays its corpus, over this process's redis-server, and does not
        # fuzz.
        if target == "sequence":
            tests["test_fuzz_sequence_replays_its_seed_corpus_over_redis_without_a_finding"] = \
                harness.redis_only(replay_test)
        tests["test_fuzz_%s_replays_its_seed_corpus_then_finds_nothing_in_a_short_run"
              % target] = harness.embedded_only(short_test)
    return tests


globals().update(_make_tests())

if __name__ == "__main__":
    harness.main(globals())

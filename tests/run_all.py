"""run_all.py: run the test suites against one or more builds, several at once.

    tests/run-all.sh [-j N] [--check] [--only WORD]... BUILD [BUILD...]

BUILD is a build directory (build, build/asan, build/tsan). For each build the runner
makes one job per suite: every unit test binary BUILD/tests/test_*, every
integration script tests/integration/test_*.py against BUILD/hf3fs-metad, and
the suites about the state and the routes again over the Redis engine (one
redis-server of their own) and over a local Redis Cluster (3 primaries + 3
replicas of their own): see SUITES_OVER_REDIS. The suites that do not depend
on the build (the fuzz corpora, built once into build/fuzz; the bench smoke
run, which always uses build/) run once per invocation, not once per build.

A ThreadSanitizer build (build/tsan, `make tsan`: the server alone) gets only
the jobs of TSAN_SUITES, the suites that load the server's threads at once;
a TSan report ends the server with status 66, which fails the suite.

--check keeps the quick loop: the unit tests and the embedded engine's
integration suites of each build, none over Redis, no bench smoke and no
fuzzing beyond the corpora's replay.

Most suites sleep (leases, timeouts, servers starting), so the runner keeps
-j jobs running at once (default 6, or $HF3FS_TEST_JOBS), longest first
(the durations of the last run are kept in BUILD/suite-times.json; without
them, the order below). Each job's output goes to a log file under
BUILD/test-logs/ and is printed only when the job fails. The last line is
"suites: N passed, N failed"; the exit status is 0 only if every job passed.

A job still running after JOB_LIMIT seconds ($HF3FS_TEST_JOB_LIMIT) is
stopped and fails, its log ending with where each of its processes stood:
gdb's backtraces of the native ones, faulthandler's of the Python ones. A
hang then costs minutes and names itself, instead of the CI's whole hour.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import procs  # tests/integration, on the path just above
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")

# The suites about the state and the routes, run again over each Redis engine.
# Not again: the HTTP layer, auth and abuse (the engine plays no part), the
# embedded engine's files (durability) and the bench. test_crash over Redis
# kills the front end: Redis must have every acknowledged change.
SUITES_OVER_REDIS = ["test_vllm", "test_sglang", "test_leases", "test_concurrency",
                     "test_malformed", "test_metrics", "test_ops", "test_load", "test_cli",
                     "test_client_lib", "test_crash", "test_page_integrity", "test_retries",
                     "test_stripes", "test_tenants", "test_import_sglang", "test_prefix_hits"]
# With several stripes per namespace: over the cluster (but
# DEFAULT_OVER_CLUSTER) and over one Redis in the sanitized build (the
# rest: the default, one stripe for their pools).
STRIPED_SUITES = ["test_page_integrity", "test_crash", "test_concurrency", "test_load",
                  "test_retries", "test_vllm", "test_sglang", "test_metrics"]
# The stock clients' suites run over the cluster at the default stripes,
# as a new user's pools (2 to 1,024 pages) meet it; at 4 stripes in the
# sanitized build over one Redis.
DEFAULT_OVER_CLUSTER = ["test_vllm", "test_sglang"]
# Run again with 4 stripes per namespace: the module's durability and
# replication (RDB, AOF, replicas, slot moves) of values that are stripes.
STRIPED_AGAIN = ["test_redis_module"]
# The tests of tests/unit/test_model.c, by a part of their names; over
# Redis and the cluster the first two (with and without eviction: the third,
# another seed of the first, runs over the embedded engine, as every test of
# test_model does there).
MODEL_RUNS = ["with_clock_eviction", "without_eviction", "another_seed"]
MODEL_RUNS_OVER_REDIS = MODEL_RUNS[:2]
# Suites that run in the sanitized build only, when one is in the run: the
# normal build adds nothing they check (test_clock_steps: the clocks are the
# same code in both; the ASan build also checks their memory).
SANITIZED_ONLY = ["test_clock_steps"]
# Over one Redis, a suite outside STRIPED_SUITES runs with the same flags in
# both builds: it runs there once, in the sanitized build when the run has
# one (the normal build runs it over the cluster), except these, which run
# over one Redis in the normal build only: test_cli (the CLI's own code runs
# sanitized against the embedded engine; its routes over Redis are
# test_ops's, which the sanitized build runs).
NOT_SANITIZED_OVER_REDIS = ["test_cli"]
# Shares of the fuzz corpus replayed over Redis (test_fuzz_corpus.py): one
# over the cluster (FUZZ_SHARD_OVER_CLUSTER), the rest over one Redis, so
# each input runs through one of the two (the embedded engine replays them
# all); a step over the cluster costs about twice one over one Redis.
FUZZ_SHARDS = 4
FUZZ_SHARD_OVER_CLUSTER = 2
# Suites that do not depend on the build directory: once per run.
# test_docs (the docs' shell sessions, as a reader runs them: the normal
# build, its Redis module loaded by a redis-server without the ASan runtime)
# runs once, and only when the first build is not sanitized.
# test_partitions (a cluster and two front ends in network namespaces, links
# cut under load) runs once, against the first build, as two jobs of
# PARTITION_JOBS (the first with the two tests of a WAIT that a demotion
# refuses over the cluster, about 3 s; those over one Redis, about 4 s
# more, only in `make test-partitions`, which runs all of it).
ONCE = ["test_fuzz_corpus", "test_bench_smoke", "test_docs", "test_upgrade", "test_partitions",
        "test_ui"]
PARTITION_JOBS = [("cut primary, front end cut, demotions",
                   ["with_one_front_end", "every_redis_node",
                    "test_a_change_whose_wait_a_demotion_refuses"], {}),
                  ("random, short", ["random"], {"HF3FS_PARTITION_RANDOM_SECONDS": "10"})]
# Sanitizer options for the sanitized builds (a leak at exit fails the suite).
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}

# The ThreadSanitizer build (make tsan) runs only these suites, the ones that
# keep the server's threads busy at once (event loop, log writer, keeper,
# Redis monitor): (script, engine (None: the embedded one), test-name words
# (none: every test)). A report ends the server at once with status 66
# (halt_on_error), and the harness fails a server that does not exit 0;
# tests/tsan.supp lists the reports suppressed, each with why.
# test_abuse.py without three tests whose time bounds TSan's slowdown breaks
# on a loaded machine (they pass under TSan on a quiet one): the slow
# readers' CPU-idle bound, the resets during snapshot forks (a /metrics
# scrape after them timed out) and the clients vanishing mid-response (their
# minute outlasted the idle timeout of the test's own connection).
TSAN_ABUSE = ["trickling", "stalled", "max_connections", "flood", "oversized", "expect_100",
              "pipelined", "vanishing_mid_request", "sigint", "lower_limits"]
# test_redis.py's tests of the server at work (its start-up refusals, one
# of them over a cluster, run no thread but main's).
# Not the moment's starvation under load (test_redis_starved...) nor the
# workers split over two front ends (two processes, each its threads as
# under killed_under_load): the flag's shared connections under load are
# share_the_flag's.
TSAN_REDIS = ["killed_under_load", "stopped", "frozen", "one_front_end", "redis_wait_ack",
              "share_the_flag", "in_flight_bound"]
TSAN_SUITES = [("test_concurrency", None, []), ("test_abuse", None, TSAN_ABUSE),
               ("test_load", None, []), ("test_redis", None, TSAN_REDIS),
               ("test_admission", None, ["full_table", "flood"]),
               ("test_load", "redis", [])]
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions="
                            + os.path.join(ROOT, "tests", "tsan.supp"),
            "HF3FS_TEST_SLOWDOWN": "3"}


# At most this many jobs that start a Redis Cluster of their own (6
# redis-servers each) run at once: more, on 2 cores, starve the nodes of the
# CPU they need to answer within the engine's command timeout.
CLUSTER_JOBS = 3
CLUSTER_SCRIPTS = ("test_redis_cluster.py", "test_cluster_engine.py", "test_partitions.py")
# The scripts that run longest under the sanitizers (test_redis.py: about
# 100 s under ASan, 70 s under TSan), weighted with the heaviest jobs in
# every build (the TSan build's too): without measured times they start
# among the first, not last, alone on the cores.
LONG_SCRIPTS = ("test_redis", "test_trace_replay")

# The most seconds a job may run (the longest, the bench smoke run, takes
# under 5 minutes here with the others beside it).
JOB_LIMIT = float(os.environ.get("HF3FS_TEST_JOB_LIMIT", "480"))


class Job:
    def __init__(self, name, argv, env=None, weight=0):
        self.name = name
        self.argv = argv
        # PYTHONFAULTHANDLER: a Python suite prints its threads' tracebacks
        # on SIGABRT (what a job over its time limit is sent).
        self.env = dict(os.environ, PYTHONFAULTHANDLER="1", **(env or {}))
        self.weight = weight  # order without measured times: higher first
        self.proc = None
        self.log = None
        self.log_path = None
        self.started = 0.0
        self.seconds = 0.0
        self.rc = None
        self.cpu = 0.0
        self.hung = False
        self.cluster = (self.env.get("HF3FS_TEST_ENGINE") == "redis-cluster"
                        or os.path.basename(argv[-1]) in CLUSTER_SCRIPTS)


def sanitized(build):
    return "asan" in os.path.basename(os.path.normpath(build))


def thread_sanitized(build):
    return "tsan" in os.path.basename(os.path.normpath(build))


def tsan_jobs(build):
    """The jobs of a ThreadSanitizer build: TSAN_SUITES against its server."""
    tag = "@" + os.path.normpath(build)
    server = dict(TSAN_ENV, HF3FS_METAD_BIN=os.path.join(build, "hf3fs-metad"))
    jobs = []
    for name, engine, words in TSAN_SUITES:
        env = dict(server, HF3FS_TEST_ENGINE=engine) if engine else server
        jobs.append(Job("%s.py%s%s" % (name, "[%s]" % engine if engine else "", tag),
                        [PYTHON, os.path.join("tests", "integration", name + ".py")] + words,
                        env, weight=4 if name in LONG_SCRIPTS else 2))
    return jobs


def build_jobs(build, check, with_sanitized=False):
    """The jobs of one build directory; with_sanitized: the run also has a
    sanitized build (SANITIZED_ONLY, NOT_SANITIZED_OVER_REDIS)."""
    if thread_sanitized(build):
        return [] if check else tsan_jobs(build)
    jobs = []
    env = dict(SAN_ENV) if sanitized(build) else {}
    tag = "" if os.path.normpath(build) == "build" else "@" + os.path.normpath(build)
    tests_dir = os.path.join(build, "tests")
    units = sorted(f for f in os.listdir(tests_dir) if f.startswith("test_")) \
        if os.path.isdir(tests_dir) else []
    for name in units:
        path = os.path.join(tests_dir, name)
        if os.access(path, os.X_OK):
            jobs.append(Job(name + tag, [path], env, weight=1))
    server = dict(env, HF3FS_METAD_BIN=os.path.join(build, "hf3fs-metad"))
    scripts = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "tests", "integration"))
                     if f.startswith("test_") and f.endswith(".py"))
    for name in scripts:
        if name in ONCE:
            continue
        if name in SANITIZED_ONLY and with_sanitized and not sanitized(build) and not check:
            continue
        # the cluster's own suites (failover, slot moves) with 4 stripes
        striped = dict(server, HF3FS_TEST_STRIPES="4") if name + ".py" in CLUSTER_SCRIPTS else server
        jobs.append(Job(name + ".py" + tag,
                        [PYTHON, os.path.join("tests", "integration", name + ".py")],
                        striped, weight=4 if name in LONG_SCRIPTS else 2))
        if name in STRIPED_AGAIN and not check:
            jobs.append(Job(name + ".py[4 stripes]" + tag,
                            [PYTHON, os.path.join("tests", "integration", name + ".py")],
                            dict(server, HF3FS_TEST_STRIPES="4"), weight=2))
    if check:
        return jobs
    # Over one Redis a namespace is one value (the default of redis://).
    # Over the cluster the reference model and STRIPED_SUITES run with 4
    # stripes (their keys of stripe 0 and pools 4 times as large: the
    # fan-out and the rollback), the rest (DEFAULT_OVER_CLUSTER among them)
    # with the default, which gives their small pools one stripe
    # (docs/many-nodes.md "Choosing S"). "": no --stripes.
    #
    # The sanitized build runs these once, over one Redis with the striped
    # suites at 4 stripes (the front end's fan-out and rollback, the code
    # that runs only over Redis), and the model's first run only: the
    # cluster's routing is its own suites' (CLUSTER_SCRIPTS, above, with 4
    # stripes), and the normal build runs every engine and seed. This keeps
    # `make test` within its 10 minutes on 2 cores.
    engines = (("redis", 3, ""), ("redis-cluster", 4, "4"))
    if sanitized(build):
        engines = (("redis", 3, "4"),)
    for engine, weight, stripes in engines:
        runs = MODEL_RUNS[:1] if sanitized(build) else MODEL_RUNS_OVER_REDIS
        over = dict(env, HF3FS_TEST_ENGINE=engine, HF3FS_TEST_STRIPES=stripes)
        # The reference model's runs (each minutes over the network) as a
        # job each, each with a Redis of its own.
        for run in runs:
            jobs.append(Job("test_model[%s]:%s%s" % (engine, run, tag),
                            [os.path.join(tests_dir, "test_model"), run], over, weight + 1))
        for name in SUITES_OVER_REDIS:
            if engine == "redis" and name not in STRIPED_SUITES:
                if sanitized(build) and name in NOT_SANITIZED_OVER_REDIS:
                    continue
                if with_sanitized and not sanitized(build) \
                        and name not in NOT_SANITIZED_OVER_REDIS:
                    continue
            striped = name in STRIPED_SUITES and not (engine == "redis-cluster"
                                                      and name in DEFAULT_OVER_CLUSTER)
            jobs.append(Job("%s.py[%s]%s" % (name, engine, tag),
                            [PYTHON, os.path.join("tests", "integration", name + ".py")],
                            dict(server, HF3FS_TEST_ENGINE=engine,
                                 HF3FS_TEST_STRIPES=stripes if striped else ""),
                            weight))
    return jobs


def once_jobs(build, check):
    """The suites that run once whatever the builds: the fuzz corpora (the
    targets are built once, into build/fuzz), the bench smoke run, the docs'
    sessions (not against a sanitized build) and the static checks."""
    server = {"HF3FS_METAD_BIN": os.path.join(build, "hf3fs-metad")}
    fuzz = [PYTHON, os.path.join("tests", "integration", "test_fuzz_corpus.py")]
    if check:
        # The quick loop replays the corpora and does not fuzz.
        return [Job("test_fuzz_corpus.py", fuzz, dict(server, HF3FS_FUZZ_TEST_SECONDS="0"),
                    weight=2)]
    jobs = []
    if not sanitized(build):
        docs = Job("test_docs.py", [PYTHON, os.path.join("tests", "integration", "test_docs.py")],
                   server, weight=2)
        docs.cluster = True  # many-nodes.md brings a Redis Cluster up (6 redis-servers)
        jobs.append(docs)
        for label, words, env in PARTITION_JOBS:
            job = Job("test_partitions.py[%s]" % label,
                      [PYTHON, os.path.join("tests", "integration", "test_partitions.py")] + words,
                      dict(server, **env), weight=3)
            job.cluster = True
            jobs.append(job)
    jobs.append(Job("test_ui.py", [PYTHON, os.path.join("tests", "integration", "test_ui.py")],
                    server, weight=2))
    jobs += [Job("test_fuzz_corpus.py", fuzz, server, weight=4),
             Job("test_bench_smoke.py",
                 [PYTHON, os.path.join("tests", "integration", "test_bench_smoke.py")],
                 server, weight=4),
             # the short form of the upgrade from the previous release (its
             # module built once under build/prev/); make test-upgrade: all
             Job("test_upgrade.py",
                 [PYTHON, os.path.join("tests", "integration", "test_upgrade.py")],
                 server, weight=3),
             # The static checks (mk/lint.mk) and the tree's format
             # (.clang-format): a finding or a line to reformat fails them.
             Job("lint", ["make", "--no-print-directory", "BUILD_JOBS=1", "lint",
                          "format-check"], {}, weight=4)]
    # The sequence fuzzer's corpus over the Redis engines, in shares that run
    # at once, each over a Redis of its own.
    for i in range(1, FUZZ_SHARDS + 1):
        engine = "redis-cluster" if i == FUZZ_SHARD_OVER_CLUSTER else "redis"
        shard = "%d/%d" % (i, FUZZ_SHARDS)
        jobs.append(Job("test_fuzz_corpus.py[%s]:%s" % (engine, shard), fuzz,
                        dict(server, HF3FS_TEST_ENGINE=engine, HF3FS_FUZZ_SHARD=shard),
                        weight=3))
    return jobs


def load_times(builds):
    times = {}
    for build in builds:
        try:
            with open(os.path.join(build, "suite-times.json")) as f:
                times.update(json.load(f))
        except (OSError, ValueError):
            pass
    return times


def save_times(builds, jobs):
    for build in builds:
        path = os.path.join(build, "suite-times.json")
        times = {}
        try:
            with open(path) as f:
                times = json.load(f)
        except (OSError, ValueError):
            pass
        times.update({j.name: round(j.seconds, 1) for j in jobs if j.rc is not None})
        try:
            with open(path + ".tmp", "w") as f:
                json.dump(times, f, indent=0, sort_keys=True)
            os.replace(path + ".tmp", path)
        except OSError:
            pass


def log_name(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) + ".log"


def start(job, log_dir):
    job.log_path = os.path.join(log_dir, log_name(job.name))
    job.log = open(job.log_path, "wb")
    job.started = time.monotonic()
    job.proc = subprocess.Popen(job.argv, cwd=ROOT, env=job.env, stdin=subprocess.DEVNULL,
                                stdout=job.log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def finish(job):
    job.rc = job.proc.returncode
    job.seconds = time.monotonic() - job.started
    job.log.close()
    # Whatever the suite left running in its process group (a server or a
    # redis-server of a test that died before its clean-up) goes with it.
    try:
        os.killpg(job.proc.pid, signal.SIGKILL)
    except OSError:
        pass


def group_members(pgid):
    """(pid, command name) of each process in process group pgid."""
    return [(pid, name) for pid, name, fields in procs.processes()
            if int(fields[2]) == pgid]  # state ppid pgrp ...


def stop_hung(job):
    """A job over JOB_LIMIT: where each of its processes stands, into its
    log (gdb's backtraces of the project's own programs, then SIGABRT to the Python
    ones, whose faulthandler prints every thread's traceback), then the
    whole group killed."""
    job.hung = True
    members = group_members(job.proc.pid)
    job.log.write(("\n==== over the %.0f s limit: stopped; its processes: %s\n"
                   % (JOB_LIMIT, " ".join("%d:%s" % m for m in members))).encode())
    job.log.flush()
    gdb = shutil.which("gdb")
    for pid, name in members:
        try:  # ours only (the server, a unit test, the bench's load), not redis-server's
            ours = os.path.realpath("/proc/%d/exe" % pid).startswith(ROOT + os.sep)
        except OSError:
            ours = False
        if ours and gdb:
            job.log.write(("==== backtraces of %d (%s)\n" % (pid, name)).encode())
            job.log.flush()
            try:
                subprocess.run([gdb, "-p", str(pid), "-batch", "-nx",
                                "-ex", "thread apply all bt"], stdout=job.log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=60)
            except subprocess.TimeoutExpired:
                pass
    for pid, name in members:
        if name.startswith("python"):
            try:
                os.kill(pid, signal.SIGABRT)
            except OSError:
                pass
    time.sleep(2)
    try:
        os.killpg(job.proc.pid, signal.SIGKILL)
    except OSError:
        pass


def report(job, out):
    status = "PASS" if job.rc == 0 else "FAIL (exit %d)" % job.rc
    if job.hung:
        status = "FAIL (over its %.0f s limit, exit %d)" % (JOB_LIMIT, job.rc)
    out.write("%-4s %-44s %6.1f s (cpu %5.1f s)\n"
              % (status.split()[0], job.name, job.seconds, job.cpu))
    if job.rc != 0:
        out.write("---- %s: %s, log %s\n" % (job.name, status, job.log_path))
        with open(job.log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
        if len(text) > 60000:
            text = "...\n" + text[-60000:]
        out.write(text)
        if not text.endswith("\n"):
            out.write("\n")
        out.write("---- end of %s\n" % job.name)
    out.flush()


def usage(msg=None):
    if msg:
        sys.stderr.write("run-all.sh: %s\n" % msg)
    sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
    sys.exit(2)


def main(argv):
    jobs_at_once = int(os.environ.get("HF3FS_TEST_JOBS", "6"))
    check = False
    only = []
    builds = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-j", "--jobs") and i + 1 < len(argv):
            jobs_at_once = int(argv[i + 1])
            i += 1
        elif a.startswith("-j") and a[2:].isdigit():
            jobs_at_once = int(a[2:])
        elif a == "--check":
            check = True
        elif a == "--only" and i + 1 < len(argv):
            only.append(argv[i + 1])
            i += 1
        elif a.startswith("-"):
            usage("unknown option %s" % a)
        else:
            builds.append(a)
        i += 1
    if not builds:
        builds = ["build"]
    if jobs_at_once < 1:
        usage("-j needs at least 1")
    for build in builds:
        if not os.path.exists(os.path.join(build, "hf3fs-metad")):
            usage("%s/hf3fs-metad does not exist: build it first (make)" % build)

    jobs = []
    with_sanitized = any(sanitized(b) for b in builds)
    for build in builds:
        jobs += build_jobs(build, check, with_sanitized)
    plain = [b for b in builds if not thread_sanitized(b)]
    if plain:
        jobs += once_jobs(plain[0], check)
    if only:
        jobs = [j for j in jobs if any(w in j.name for w in only)]
    times = load_times(builds)
    # Longest first: measured seconds when known, else the weights above.
    jobs.sort(key=lambda j: (-times.get(j.name, 0.0), -j.weight))

    log_dir = os.path.join(builds[0], "test-logs")
    os.makedirs(log_dir, exist_ok=True)
    # Every suite's temporary files under one directory of this run.
    tmp = tempfile.mkdtemp(prefix="hf3fs-metad-tests-")
    for j in jobs:
        j.env["TMPDIR"] = tmp

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    out = sys.stdout
    out.write("running %d suites of %s, %d at once (logs in %s)\n"
              % (len(jobs), " ".join(builds), jobs_at_once, log_dir))
    out.flush()
    t0 = time.monotonic()
    pending = list(jobs)
    running = []
    try:
        while pending or running:
            while len(running) < jobs_at_once:
                clusters = sum(j.cluster for j in running)
                job = next((j for j in pending if not j.cluster or clusters < CLUSTER_JOBS),
                           None)
                if job is None:
                    break
                pending.remove(job)
                start(job, log_dir)
                running.append(job)
            pid, status, rusage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                now = time.monotonic()
                for job in running:
                    if not job.hung and now - job.started > JOB_LIMIT:
                        stop_hung(job)
                time.sleep(0.05)
                continue
            for job in running:
                if job.proc.pid == pid:
                    job.proc.returncode = os.waitstatus_to_exitcode(status)
                    job.cpu = rusage.ru_utime + rusage.ru_stime
                    finish(job)
                    running.remove(job)
                    report(job, out)
                    break
    except KeyboardInterrupt:
        # Interrupted (^C, or SIGTERM from a CI's own time limit): which jobs
        # were still running, then none left behind.
        now = time.monotonic()
        out.write("interrupted; still running: %s\n"
                  % ", ".join("%s (%.0f s)" % (j.name, now - j.started) for j in running))
        out.flush()
        for job in running:
            try:
                os.killpg(job.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        raise
    save_times(builds, jobs)
    subprocess.run(["rm", "-rf", tmp])

    passed = [j for j in jobs if j.rc == 0]
    failed = [j for j in jobs if j.rc != 0]
    out.write("\n")
    if failed:
        out.write("failed suites: %s\n" % " ".join(j.name for j in failed))
    out.write("suites of %s in %.0f s wall, %.0f s of suites, %.0f s of cpu\n"
              % (" ".join(builds), time.monotonic() - t0, sum(j.seconds for j in jobs),
                 sum(j.cpu for j in jobs)))
    out.write("suites: %d passed, %d failed\n" % (len(passed), len(failed)))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""bench/read_cost.py: what persistence, replication and tenants cost a reader (stdlib only).

    bench/read_cost.py [--runs 3] [--seconds 4] [--conns 16] [--keys 100000]
                       [--threads 2] [--no-redis] [--only embedded,redis,auth] [--smoke]

Reads write nothing (core.h "What is durable"): this measures that they
also cost nothing more than in memory; and that tokens and tenants cost a
reader next to nothing. Every server runs on CPU 1, the load
generator (wrk -t1, 128-key vLLM batch_exists of complete keys on 2 ranks,
32-hex keys: vLLM's MD5 hex digests) on CPU 0; the runs of the two sides of
each comparison alternate, and each figure is the median of --runs runs.

  embedded   hf3fs-metad --data-dir (default fsync) against --in-memory,
             both with --threads T; and the bytes the log grew by during
             each run of reads (GET /v1/stats, persistence.log_bytes).
  redis      a front end over a Redis with the module, with appendonly yes
             (everysec) and a replica attached, against a front end over a
             Redis without either; and that Redis's replication stream
             (INFO master_repl_offset) and AOF bytes per read (no automatic
             AOF rewrite in the run).
  auth       hf3fs-metad --in-memory --auth-token-file with two tenants (a
             token each; the keys loaded into each tenant's own `kv`
             through its token), read as tenant a with HTTP Basic
             credentials (what `requests` sends from netrc), against the
             same server without auth; both with --threads T. Beside the
             rates: each server's CPU time (/proc/PID/stat) per request
             answered, median of the runs, which a machine shared with
             other work disturbs less than the rates.

Prints a table and the targets of docs/performance.md ("What a read
costs", "What tenants cost"). --smoke: one run of 1 s, 2,000 keys: checks the script works.
Every process started here is stopped.
"""

import argparse
import base64
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from redis_server import Resp, info_fields  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_seconds, free_port, parse, pin, wait_port  # noqa: E402

BIN = os.path.join(ROOT, "build", "hf3fs-metad")
LOADGEN = os.path.join(ROOT, "build", "bench", "loadgen")
MODULE = os.path.join(ROOT, "build", "hf3fs_metad_redis.so")
SERVER_CPU, LOAD_CPU = 1, 0
ENV = dict(os.environ, KEYCHARS="32")
procs = []


def spawn(args, port, what, log):
    p = subprocess.Popen(pin(SERVER_CPU) + args, stdin=subprocess.DEVNULL,
                         stdout=log, stderr=subprocess.STDOUT, env=ENV)
    procs.append(p)
    wait_port(port, p, timeout=60, what=what)
    return p


def stop_all():
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def stats(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/stats" % port, timeout=60) as r:
        return json.loads(r.read())


class Front:
    """hf3fs-metad on a free port with `flags`, loaded with the keys."""

    def __init__(self, opts, log, *flags):
        self.port = free_port()
        self.proc = spawn([BIN, "--host", "127.0.0.1", "--port", str(self.port),
                           "--log-level", "warn"] + list(flags), self.port, "hf3fs-metad", log)

    def load(self, opts, authorization=None):
        subprocess.run(pin(LOAD_CPU) + [LOADGEN, "load", str(self.port),
                        str(opts.keys), "2", "1000000"], check=True,
                       env=with_authorization(authorization), stdout=subprocess.DEVNULL)


def with_authorization(authorization):
    """ENV, with HF3FS_AUTHORIZATION (the Authorization header of every
    request of loadgen and bodies.lua) if given."""
    return dict(ENV, HF3FS_AUTHORIZATION=authorization) if authorization else ENV


def wrk(port, bodies, opts, authorization=None):
    """One wrk run: (requests/s, requests answered)."""
    out = subprocess.run(pin(LOAD_CPU) + ["wrk", "-t1", "-c%d" % opts.conns,
                          "-d%ds" % opts.seconds, "--timeout", "10s", "-s",
                          os.path.join(ROOT, "bench", "wrk", "bodies.lua"),
                          "http://127.0.0.1:%d" % port, "--", bodies],
                         capture_output=True, text=True,
                         env=with_authorization(authorization)).stdout
    line = [x for x in out.splitlines() if x.startswith("requests=")]
    if not line:
        sys.exit("wrk printed no figures:\n" + out)
    f = parse(line[0])
    if f["errors"] != 0:
        sys.exit("unexpected answers in a run: " + line[0])
    return f["rps"], int(f["requests"])


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def embedded(opts, tmp, bodies, log):
    mem = Front(opts, log, "--in-memory", "--threads", str(opts.threads))
    disk = Front(opts, log, "--data-dir", os.path.join(tmp, "data"), "--threads",
                 str(opts.threads))
    mem.load(opts)
    disk.load(opts)
    rates = {"mem": [], "disk": []}
    grew = []
    for _ in range(opts.runs):
        rates["mem"].append(wrk(mem.port, bodies, opts)[0])
        before = stats(disk.port)["server"]["persistence"]["log_bytes"]
        rates["disk"].append(wrk(disk.port, bodies, opts)[0])
        grew.append(stats(disk.port)["server"]["persistence"]["log_bytes"] - before)
    return rates, grew


class Redis:
    def __init__(self, tmp, log, *extra):
        self.port = free_port()
        self.dir = os.path.join(tmp, "redis-%d" % self.port)
        os.makedirs(self.dir)
        self.proc = spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                           "--dir", self.dir, "--save", "", "--daemonize", "no",
                           "--logfile", os.path.join(self.dir, "redis.log"),
                           "--loadmodule", MODULE] + list(extra), self.port, "redis-server", log)
        self.c = Resp(port=self.port, timeout=60)

    def info(self, section, field):
        return int(info_fields(self.c.cmd("INFO", section))[field])

    def aof_bytes(self):
        return sum(os.path.getsize(f) for f in glob.glob(os.path.join(self.dir, "*", "*.aof")))


def redis(opts, tmp, bodies, log):
    plain = Redis(tmp, log, "--appendonly", "no")
    kept = Redis(tmp, log, "--appendonly", "yes", "--appendfsync", "everysec",
                 "--auto-aof-rewrite-percentage", "0",
                 "--repl-ping-replica-period", "3600")
    replica = Redis(tmp, log, "--appendonly", "no")
    replica.c.cmd("REPLICAOF", "127.0.0.1", str(kept.port))
    fronts = {"plain": Front(opts, log, "--store", "redis://127.0.0.1:%d" % plain.port),
              "kept": Front(opts, log, "--store", "redis://127.0.0.1:%d" % kept.port)}
    for f in fronts.values():
        f.load(opts)
    deadline = time.monotonic() + 120
    while replica.info("replication", "slave_repl_offset") < \
            kept.info("replication", "master_repl_offset"):
        if time.monotonic() > deadline:
            sys.exit("the replica did not catch up")
        time.sleep(0.1)
    rates = {"plain": [], "kept": []}
    stream, aof = [], []
    for _ in range(opts.runs):
        rates["plain"].append(wrk(fronts["plain"].port, bodies, opts)[0])
        off, size = kept.info("replication", "master_repl_offset"), kept.aof_bytes()
        rps, answered = wrk(fronts["kept"].port, bodies, opts)
        time.sleep(1.1)  # everysec: what the run wrote reaches the file
        rates["kept"].append(rps)
        stream.append((kept.info("replication", "master_repl_offset") - off) / answered)
        aof.append((kept.aof_bytes() - size) / answered)
    return rates, stream, aof


TOKENS = ("bench-token-of-tenant-a-5d1e7f0c2b9a", "bench-token-of-tenant-b-93c4a8e1f6d0")


def basic(token):
    return "Basic " + base64.b64encode(("hf3fs:" + token).encode()).decode()


def auth(opts, tmp, bodies, log):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("%s a\n%s b\n" % TOKENS)
    os.chmod(tokens, 0o600)
    off = Front(opts, log, "--in-memory", "--threads", str(opts.threads))
    on = Front(opts, log, "--in-memory", "--threads", str(opts.threads),
               "--auth-token-file", tokens)
    off.load(opts)
    for token in TOKENS:
        on.load(opts, basic(token))
    rates = {"off": [], "on": []}
    cpu = {"off": [], "on": []}  # server CPU microseconds per request
    for _ in range(opts.runs):
        for side, f, authorization in (("off", off, None), ("on", on, basic(TOKENS[0]))):
            before = cpu_seconds(f.proc.pid)
            rps, answered = wrk(f.port, bodies, opts, authorization)
            rates[side].append(rps)
            cpu[side].append(1e6 * (cpu_seconds(f.proc.pid) - before) / answered)
    return rates, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--only", default="embedded,redis,auth",
                    help="comparisons to run, of embedded,redis,auth")
    ap.add_argument("--smoke", action="store_true")
    opts = ap.parse_args()
    if opts.smoke:
        opts.runs, opts.seconds, opts.keys = 1, 1, 2000
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    subprocess.run(["make", "-s", "-C", ROOT, "build/hf3fs-metad", "build/bench/loadgen",
                    "build/hf3fs_metad_redis.so"], check=True)
    tmp = tempfile.mkdtemp(prefix="hf3fs-read-cost.")
    log = open(os.path.join(tmp, "servers.log"), "w")
    try:
        bodies = os.path.join(tmp, "bodies.txt")
        with open(bodies, "w") as f:
            subprocess.run([LOADGEN, "bodies", "exists", str(opts.keys), "256", "128"],
                           stdout=f, check=True, env=ENV)
        print("128-key batch_exists, 32-hex keys complete on 2 ranks, %d keys; wrk -t1 -c%d, "
              "%d s runs, median of %d" % (opts.keys, opts.conns, opts.seconds, opts.runs))
        print()
        print("| side | requests/s | other side | ratio | written per read |")
        print("|---|---|---|---|---|")
        only = opts.only.split(",")
        targets = []
        if "embedded" in only:
            rates, grew = embedded(opts, tmp, bodies, log)
            m, d = med(rates["mem"]), med(rates["disk"])
            print("| embedded --data-dir vs --in-memory, --threads %d | %.0f | %.0f | %.2fx | "
                  "log: %d bytes in the largest run |" % (opts.threads, d, m, d / m, max(grew)))
            targets += [("persistent reads >= 0.95x of in memory", d / m >= 0.95,
                         "%.2fx" % (d / m)),
                        ("log growth in a read-only run <= 64 KiB", max(grew) <= 65536,
                         "%d bytes" % max(grew))]
        if "auth" in only:
            rates, cpu = auth(opts, tmp, bodies, log)
            on, off = med(rates["on"]), med(rates["off"])
            print("| --auth-token-file, 2 tenants, Basic auth vs no auth, --in-memory --threads "
                  "%d | %.0f | %.0f | %.3fx | server CPU per request %.1f vs %.1f us: %.3fx |"
                  % (opts.threads, on, off, on / off, med(cpu["on"]), med(cpu["off"]),
                     med(cpu["on"]) / med(cpu["off"])))
            targets += [("reads with 2 tenants and auth >= 0.95x of without auth", on / off >= 0.95,
                         "%.3fx" % (on / off))]
        if "redis" in only and not opts.no_redis and shutil.which("redis-server"):
            rates, stream, aof = redis(opts, tmp, bodies, log)
            p, k = med(rates["plain"]), med(rates["kept"])
            print("| Redis with a replica and appendonly yes vs without | %.0f | %.0f | %.2fx | "
                  "replication %.1f B, AOF %.1f B (medians) |" % (k, p, k / p, med(stream),
                                                                med(aof)))
            targets += [("replication stream per 128-key read <= 64 bytes", med(stream) <= 64,
                         "%.1f bytes" % med(stream)),
                        ("read rate with a replica and the AOF >= 0.9x", k / p >= 0.9,
                         "%.2fx" % (k / p))]
        print()
        print("Targets:")
        for what, ok, got in targets:
            print("  %s: %s %s" % (what, got, "met" if ok else "MISSED"))
    finally:
        stop_all()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""cluster_bench.py: the Redis engine over a Redis Cluster of 1, 2 and 3
primaries: what each call costs each shard, how the load
spreads, and what one front end serves.

    bench/cluster_bench.py [--primaries 1,2,3] [--namespaces 6] [--ranks 2]
                           [--keys 20000] [--seconds 5] [--runs 3] [--conns 16]
                           [--smoke]

The module keeps one value per namespace (the key hf3fs:{<hex namespace>},
all its ranks inside), so a namespace lives on one shard, and what spreads
over a cluster is namespaces. For each primary count: a fresh cluster (no
replicas, no persistence: the cost of a call, not of durability), one
hf3fs-metad --store redis-cluster://... (default threads), then `loadgen
load` of --keys complete keys on --ranks ranks into namespace kv (the vLLM
dialect, which always uses kv) and into each of --namespaces SGLang
namespaces ns0, ns1, ... Keys in each engine's shape (bench/keys.h): 32-hex
(vLLM's MD5) in kv, SGLang's "<64 hex>-k"/"-v" (66 bytes) in the SGLang
namespaces. Three rows (ids c1s, c1e, c1v, c2s...: primaries,
then the kind), each the median of --runs runs:

  s  SGLang reserve_and_allocate + confirm of 128 fresh keys on every rank
     (loadgen sg-save), each job in one of the namespaces in turn
  e  SGLang exists of 128 random loaded keys on one rank (wrk, 256 bodies
     over every (namespace, rank 0/1) alike): one HF3FS.EXISTS on the
     namespace's shard
  v  vLLM batch_exists of 128 random loaded keys (completeness over every
     rank of kv, one HF3FS.CEXISTS): what a vLLM deployment does, all of it
     on the one shard that holds kv

Printed per row: requests/s (and pairs/s), and per shard its share of the
module command calls (HF3FS.*, INFO commandstats) and its CPU time per
request (user + system time of the redis-server process, /proc/PID/stat:
commandstats' durations would count the time a node waits for the one CPU
that the nodes share here); then which namespaces each shard holds
(HF3FS.NAMESPACES) and the memory per (key, rank) of each shard after the
load (INFO memory's used_memory, less an empty node's). The processes share
this machine's cores (the load generator on CPU 0, the front end and every
Redis on CPU 1, as bench/run does), so the point is the cost per call per
shard and the shape, not the absolute rate. docs/performance.md ("The Redis
engine") and docs/many-nodes.md ("Sizing a cluster") turn the figures into
a sizing rule.

--smoke: one run of 1 s, 2,000 keys (tests/integration/test_bench_smoke.py
checks that the script works, not any figure).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from redis_cluster import RedisCluster  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_seconds, NCPU, free_port, parse, pin, wait_port  # noqa: E402

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
SERVER = os.path.join(BUILD, "hf3fs-metad")
LOADGEN = os.path.join(BUILD, "bench", "loadgen")


def node_stats(rc, port):
    """(module command calls, usec of every command) on one node since its
    last RESETSTAT (commandstats)."""
    text = rc.call(port, "INFO", "commandstats")
    calls = usec = 0
    for name, c, u in re.findall(r"cmdstat_([\w.|]+):calls=(\d+),usec=(\d+)", text):
        if name.startswith("hf3fs."):
            calls += int(c)
        if name not in ("info", "config", "cluster", "ping", "dbsize", "module"):
            usec += int(u)
    return calls, usec


def used_memory(rc, port):
    return int(re.search(r"used_memory:(\d+)", rc.call(port, "INFO", "memory")).group(1))


# the loadgen KEYCHARS of each engine's keys
VLLM_KEYS, SGLANG_KEYS = "32", "66"


def run_row(kind, port, a, bodies):
    if kind == "s":
        cmd = pin(0) + [LOADGEN, "sg-save", str(port), str(a.seconds), str(a.conns), "128",
                        str(a.ranks), str(a.namespaces)]
    else:
        cmd = pin(0) + ["wrk", "-t1", "-c%d" % a.conns, "-d%ds" % a.seconds, "--timeout", "10s",
                        "-s", os.path.join(ROOT, "bench", "wrk", "bodies.lua"),
                        "http://127.0.0.1:%d" % port, "--", bodies[kind]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, KEYCHARS=SGLANG_KEYS))
    line = [x for x in r.stdout.splitlines() if x.startswith("requests=")]
    if r.returncode != 0 or not line:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), r.stdout[-2000:]))
    got = parse(line[0])
    if got.get("errors", 0):
        raise RuntimeError("%s: %d errors" % (kind, got["errors"]))
    # every request answered in the run (loadgen's warm-up included), to
    # divide the CPU measured around the run
    got["all"] = got.get("answered", got["requests"])
    return got


KINDS = (("s", "SGLang allocate 128 + confirm, %d namespaces (per request: one of the two)"),
         ("e", "SGLang exists 128 keys, %d namespaces"),
         ("v", "vLLM batch_exists 128 keys (namespace kv)"))


def bench_primaries(n, a, tmp):
    out = {"primaries": n}
    with RedisCluster(primaries=n, replicas=0) as rc:
        prim = rc.primaries_ports()
        base = {p: used_memory(rc, p) for p in prim}
        port = free_port()
        log = open(os.path.join(tmp, "metad-%d.log" % n), "w")
        proc = subprocess.Popen(pin(1) + [SERVER, "--store", "redis-cluster://" + rc.seeds(),
                                          "--host", "127.0.0.1", "--port", str(port),
                                          "--log-level", "warn"], stdout=log, stderr=log)
        try:
            for p in prim:
                pid = rc.nodes[p].proc.pid
                if pin(1):
                    subprocess.run(["taskset", "-cp", "1", str(pid)], stdout=subprocess.DEVNULL)
            wait_port(port, proc)
            loads = [[VLLM_KEYS]] + [[SGLANG_KEYS, "sglang", "ns%d" % i]
                                     for i in range(a.namespaces)]
            for extra in loads:
                subprocess.run(pin(0) + [LOADGEN, "load", str(port), str(a.keys), str(a.ranks),
                                         str(a.pages)] + extra, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out["memory"] = {}
            for p in prim:
                out["memory"][p] = used_memory(rc, p) - base[p]
            out["holds"] = {p: sorted(x.decode() if isinstance(x, bytes) else str(x)
                                      for x in (rc.call(p, "HF3FS.NAMESPACES") or []))
                            for p in prim}
            bodies = {"e": os.path.join(tmp, "bodies-e-%d.txt" % n),
                      "v": os.path.join(tmp, "bodies-v-%d.txt" % n)}
            with open(bodies["e"], "w") as f:
                subprocess.run([LOADGEN, "bodies", "sg-exists", str(a.keys), "256", "128",
                                str(a.namespaces)], stdout=f, check=True,
                               env=dict(os.environ, KEYCHARS=SGLANG_KEYS))
            with open(bodies["v"], "w") as f:
                subprocess.run([LOADGEN, "bodies", "exists", str(a.keys), "256", "128"],
                               stdout=f, check=True, env=dict(os.environ, KEYCHARS=VLLM_KEYS))
            for kind, _ in KINDS:
                runs = []
                for p in prim:
                    rc.call(p, "CONFIG", "RESETSTAT")
                cpu0 = {p: cpu_seconds(rc.nodes[p].proc.pid) for p in prim}
                for _ in range(a.runs):
                    runs.append(run_row(kind, port, a, bodies))
                stats = {p: (node_stats(rc, p)[0],
                             1e6 * (cpu_seconds(rc.nodes[p].proc.pid) - cpu0[p])) for p in prim}
                out[kind] = {
                    "requests": sum(r["all"] for r in runs),
                    "rps": statistics.median(r["rps"] for r in runs),
                    "pairs": statistics.median(r.get("pairs_per_s", 0) for r in runs),
                    "p99_ms": statistics.median(r.get("p99_us", 0) for r in runs) / 1000,
                    "shards": stats,
                }
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            log.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primaries", default="1,2,3")
    ap.add_argument("--namespaces", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--pages", type=int, default=1000000)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.seconds, a.keys, a.pages, a.conns = 1, 1, 2000, 100000, 4
    for tool in (SERVER, LOADGEN):
        if not os.path.exists(tool):
            sys.exit("cluster_bench: %s is missing (make all bench-tools)" % tool)
    if not shutil.which("wrk"):
        sys.exit("cluster_bench: wrk is missing (bench/run installs it)")
    import tempfile
    tmp = tempfile.mkdtemp(prefix="hf3fs-cluster-bench-")
    print("Redis engine over a Redis Cluster: namespace kv + %d SGLang namespaces, each %d "
          "complete keys on %d ranks, %d connection(s), %d run(s) of %d s; loadgen/wrk on CPU 0, "
          "the front end and every Redis on CPU 1 (of %d)"
          % (a.namespaces, a.keys, a.ranks, a.conns, a.runs, a.seconds, NCPU))
    print()
    print("| # | primaries | row | requests/s | pairs/s | p99 ms | Redis CPU per request, all shards (us) "
          "| per shard: share of module calls, Redis CPU per request (us) |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for n in [int(x) for x in a.primaries.split(",")]:
        r = bench_primaries(n, a, tmp)
        results.append(r)
        for kind, label in KINDS:
            row = r[kind]
            total = sum(c for c, _ in row["shards"].values()) or 1
            req = row["requests"] or 1
            shards = "; ".join("%.0f%%, %.0f" % (100.0 * c / total, u / req)
                               for c, u in row["shards"].values())
            print("| c%d%s | %d | %s | %.0f | %s | %.1f | %.0f | %s |" % (
                n, kind, n, label % a.namespaces if "%d" in label else label, row["rps"],
                "%.0f" % row["pairs"] if kind == "s" else "-", row["p99_ms"],
                sum(u for _, u in row["shards"].values()) / req, shards))
        sys.stdout.flush()
    print()
    print("Namespaces per shard (HF3FS.NAMESPACES), memory after the load per shard (used_memory"
          " less the empty node's), and per (key, rank) over all shards:")
    pools = a.keys * a.ranks * (a.namespaces + 1)
    for r in results:
        parts = ["%s: %.1f MB" % (",".join(r["holds"][p]) or "none", mem / 1e6)
                 for p, mem in r["memory"].items()]
        total = sum(r["memory"].values())
        print("  %d primaries: %s; all shards: %.0f bytes per (key, rank)" % (
            r["primaries"], "; ".join(parts), total / float(pools)))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

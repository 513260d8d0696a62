#!/usr/bin/python3
"""cluster_bench.py: the Redis engine over a Redis Cluster of 1, 2 and 3
primaries: what each call costs each shard, how the load
spreads, and what one front end serves.

    bench/cluster_bench.py [--primaries 1,2,3] [--namespaces 6] [--ranks 2]
                           [--keys 20000] [--seconds 5] [--runs 3] [--conns 16]
                           [--smoke]
    bench/cluster_bench.py --stripes 1,16 [--primaries 3] [--keys 60000] ...

These rows keep each namespace in one value (--stripes 1: the key
hf3fs:{<hex namespace>}, all its ranks inside), so a namespace lives on one
shard, and what spreads over a cluster is namespaces; --stripes (below)
compares stripe counts of one namespace. For each primary count: a fresh
cluster (no replicas, no persistence: the cost of a call, not of
durability), one hf3fs-metad --store redis-cluster://... --stripes 1
(default threads), then `loadgen
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

--stripes 1,16 (a list of stripe counts): instead of the rows above, what
striping namespace kv costs and spreads, over one cluster of --primaries
(one number, default 3) primaries per stripe count, all up at once, each
with its own hf3fs-metad --stripes S, kv loaded with --keys complete keys
on --ranks ranks (no SGLang namespaces). Two row kinds, ids c<P>v/s<S> and
c<P>w/s<S>, their runs alternating over the stripe counts (run 1 of every
S, then run 2, ...):

  v  vLLM batch_exists of 128 random loaded keys (as above)
  w  vLLM saves in kv: batch_allocate 128 fresh keys + confirm_write, on
     every rank (loadgen save); one allocate + confirm on one rank is a pair

Printed per row, each the median over the runs (every figure measured
around each run alone): each shard's share of the module's time (the usec
of INFO commandstats' hf3fs.* commands, normalized to sum 1; every stripe
count's nodes get CONFIG RESETSTAT before each run), the Redis CPU per
request (reads) or pair (saves) summed over the shards (/proc, as above;
beside it the part spent inside hf3fs.* commands, commandstats' usec, which
on a shared CPU also counts waits for it), and the front end's (user + system time of hf3fs-metad, /proc); then the
ratios of each S to the first one of the list, and the issue's targets.

--smoke: one run of 1 s, 2,000 keys, 2 primaries unless --primaries is
given (tests/integration/test_bench_smoke.py checks that the script works,
not any figure: two shards show the split as three would).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (LOADGEN, NCPU, ROOT, SERVER, commandstats, cpu_seconds,  # noqa: E402
                      free_port, parse, pin, wait_port)
from redis_cluster import RedisCluster  # noqa: E402


def node_stats(rc, port):
    """(module command calls, usec of every command) on one node since its
    last RESETSTAT (commandstats)."""
    calls = usec = 0
    for name, (c, u) in commandstats(rc.call(port, "INFO", "commandstats")).items():
        if name.startswith("hf3fs."):
            calls += c
        if name not in ("info", "config", "cluster", "ping", "dbsize", "module"):
            usec += u
    return calls, usec


def module_usec(rc, port):
    """usec of the module's commands (hf3fs.*) on one node since its last
    RESETSTAT (commandstats)."""
    return sum(u for name, (_, u) in commandstats(rc.call(port, "INFO", "commandstats")).items()
               if name.startswith("hf3fs."))


def used_memory(rc, port):
    return int(re.search(r"used_memory:(\d+)", rc.call(port, "INFO", "memory")).group(1))


# the loadgen KEYCHARS of each engine's keys
VLLM_KEYS, SGLANG_KEYS = "32", "66"


def run_row(kind, port, a, bodies):
    if kind == "w":
        cmd = pin(0) + [LOADGEN, "save", str(port), str(a.seconds), str(a.conns), "128",
                        str(a.ranks)]
    elif kind == "s":
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
                                          "--stripes", "1",
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


class Striped:
    """One cluster of n primaries and its front end with --stripes S, kv
    loaded."""

    def __init__(self, n, stripes, a, tmp):
        self.stripes = stripes
        self.rc = RedisCluster(primaries=n, replicas=0).__enter__()
        self.proc = None
        self.log = open(os.path.join(tmp, "metad-s%d.log" % stripes), "w")
        self.prim = self.rc.primaries_ports()
        self.port = free_port()
        self.proc = subprocess.Popen(pin(1) + [SERVER, "--store", "redis-cluster://" + self.rc.seeds(),
                                               "--stripes", str(stripes),
                                               "--host", "127.0.0.1", "--port", str(self.port),
                                               "--log-level", "warn"],
                                     stdout=self.log, stderr=self.log)
        for p in self.prim:
            if pin(1):
                subprocess.run(["taskset", "-cp", "1", str(self.rc.nodes[p].proc.pid)],
                               stdout=subprocess.DEVNULL)
        wait_port(self.port, self.proc)
        subprocess.run(pin(0) + [LOADGEN, "load", str(self.port), str(a.keys), str(a.ranks),
                                 str(a.pages)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # the values per shard: S stripes spread by their slots
        self.values = [int(self.rc.call(p, "DBSIZE")) for p in self.prim]
        if sum(self.values) != stripes:
            raise RuntimeError("--stripes %d: the cluster holds %s values (one per stripe "
                               "expected)" % (stripes, self.values))

    def run(self, kind, a, bodies):
        for p in self.prim:
            self.rc.call(p, "CONFIG", "RESETSTAT")
        pids = [self.rc.nodes[p].proc.pid for p in self.prim]
        r0 = [cpu_seconds(pid) for pid in pids]
        f0 = cpu_seconds(self.proc.pid)
        got = run_row(kind, self.port, a, bodies)
        f1 = cpu_seconds(self.proc.pid)
        r1 = [cpu_seconds(pid) for pid in pids]
        usec = [module_usec(self.rc, p) for p in self.prim]
        n = got.get("answered_pairs", got["all"]) if kind == "w" else got["all"]
        return {"rate": got.get("pairs_per_s", 0) if kind == "w" else got["rps"],
                "p99_ms": got.get("p99_us", 0) / 1000,
                "shares": [u / float(sum(usec) or 1) for u in usec],
                "redis_us": 1e6 * (sum(r1) - sum(r0)) / (n or 1),
                "module_us": sum(usec) / float(n or 1),
                "front_us": 1e6 * (f1 - f0) / (n or 1)}

    def close(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.log.close()
        self.rc.__exit__(None, None, None)


STRIPE_KINDS = (("v", "vLLM batch_exists 128 keys", "request"),
                ("w", "vLLM allocate 128 fresh + confirm, every rank", "pair"))


def bench_stripes(a, tmp):
    counts = [int(x) for x in a.stripes.split(",")]
    n = int(a.primaries) if a.primaries != "1,2,3" else 3
    print("Stripes of namespace kv over %d primaries: %d complete keys on %d ranks, %d "
          "connection(s), %d run(s) of %d s per row, the stripe counts' runs alternating; "
          "loadgen/wrk on CPU 0, the front ends and every Redis on CPU 1 (of %d)"
          % (n, a.keys, a.ranks, a.conns, a.runs, a.seconds, NCPU))
    bodies = {"v": os.path.join(tmp, "bodies-v.txt")}
    with open(bodies["v"], "w") as f:
        subprocess.run([LOADGEN, "bodies", "exists", str(a.keys), "256", "128"],
                       stdout=f, check=True)
    setups = []
    try:
        for s in counts:
            setups.append(Striped(n, s, a, tmp))
        print("Values (stripes) per shard: " + "; ".join(
            "S=%d: %s" % (x.stripes, "/".join(str(v) for v in x.values)) for x in setups))
        print()
        print("| # | stripes | row | rate | p99 ms | per shard: share of the module's time "
              "(commandstats hf3fs.* usec) | Redis CPU, all shards (us) | of which in hf3fs.* commands "
              "(commandstats, us) | front end CPU (us) |")
        print("|---|---|---|---|---|---|---|---|---|")
        med = {}
        for kind, label, unit in STRIPE_KINDS:
            runs = {x.stripes: [] for x in setups}
            for _ in range(a.runs):
                for x in setups:
                    runs[x.stripes].append(x.run(kind, a, bodies))
            for x in setups:
                rs = runs[x.stripes]
                m = {k: statistics.median(r[k] for r in rs)
                     for k in ("rate", "p99_ms", "redis_us", "module_us", "front_us")}
                m["shares"] = [statistics.median(r["shares"][i] for r in rs)
                               for i in range(n)]
                med[kind, x.stripes] = m
                print("| c%d%s/s%d | %d | %s | %.0f %s/s | %.1f | %s | %.1f per %s | %.1f | %.1f per %s |" % (
                    n, kind, x.stripes, x.stripes, label, m["rate"],
                    "pairs" if kind == "w" else "requests", m["p99_ms"],
                    " / ".join("%.2f" % v for v in m["shares"]), m["redis_us"], unit,
                    m["module_us"], m["front_us"], unit))
                sys.stdout.flush()
        print()
        base = counts[0]
        print("Ratios to S=%d (medians of the same run) and the targets (each shard <= 0.45 of "
              "the module's time; Redis and front-end CPU <= 1.5x of S=1's):" % base)
        for kind, label, unit in STRIPE_KINDS:
            for s in counts[1:]:
                m, b = med[kind, s], med[kind, base]
                top = max(m["shares"])
                print("  %s, S=%d: largest shard share %.2f (%s); Redis CPU per %s %.1f / %.1f us = "
                      "%.2fx (%s); front end CPU per %s %.1f / %.1f us = %.2fx (%s)" % (
                          label, s, top, "met" if top <= 0.45 else "MISSED", unit,
                          m["redis_us"], b["redis_us"], m["redis_us"] / (b["redis_us"] or 1),
                          "met" if m["redis_us"] <= 1.5 * b["redis_us"] else "MISSED", unit,
                          m["front_us"], b["front_us"], m["front_us"] / (b["front_us"] or 1),
                          "met" if m["front_us"] <= 1.5 * b["front_us"] else "MISSED"))
    finally:
        for x in setups:
            x.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primaries", default=None, help="default 1,2,3 (--smoke: 2)")
    ap.add_argument("--namespaces", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--pages", type=int, default=1000000)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--stripes", default=None,
                    help="compare these stripe counts of namespace kv (e.g. 1,16)")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.runs, a.seconds, a.keys, a.pages, a.conns = 1, 1, 2000, 100000, 4
    if a.primaries is None:
        a.primaries = "2" if a.smoke else "1,2,3"
    for tool in (SERVER, LOADGEN):
        if not os.path.exists(tool):
            sys.exit("cluster_bench: %s is missing (make all bench-tools)" % tool)
    if not shutil.which("wrk"):
        sys.exit("cluster_bench: wrk is missing (bench/run installs it)")
    import tempfile
    tmp = tempfile.mkdtemp(prefix="hf3fs-cluster-bench-")
    if a.stripes:
        bench_stripes(a, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        return
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

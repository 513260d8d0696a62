#!/usr/bin/python3
"""fleet_bench.py: what a fleet's shared state costs Redis, one Redis against
a Redis Cluster of 3 primaries, with the front ends a fleet runs.

    bench/fleet_bench.py [--primaries 3] [--keys 60000] [--ranks 2] [--pages 131072]
                         [--seconds 5] [--runs 3] [--front-cpu 1] [--redis-cpus 1]
                         [--rows WORD,...] [--smoke]

Setups, all up at once, each loaded with --keys complete 32-hex keys (vLLM's
MD5) on --ranks ranks of pools of --pages pages in namespace kv:

  one      one redis-server with the module; front ends --store redis://
  cluster  a Redis Cluster of --primaries primaries (no replicas); front ends
           --store redis-cluster://, at the default stripes (chosen by the
           pool size and the primaries: docs/many-nodes.md "Choosing S")
  embedded one hf3fs-metad --in-memory (the reference for the front end's
           own cost)
  wait     one redis-server with the module and one replica; two front ends,
           --redis-wait 0 and --redis-wait 1

Rows (each the median of --runs runs; the runs of every row alternate, so a
machine that drifts drifts for all of them):

  r  vLLM batch_exists of 128 random loaded keys (wrk): a read
  w  vLLM batch_allocate of 128 fresh keys + confirm_write, on every rank
     (loadgen save): one allocate + confirm on one rank is a pair

with 1 and 2 front ends over the same state (each load split evenly over
them) and 16 and 64 connections in all; also reads at 1 connection (p50
latency), the embedded engine's reads, and saves with and without WAIT.
Printed per row: the rate, p50, and each redis-server's CPU (user + system
time, /proc/PID/stat) per request or pair; then per (front ends,
connections):

  capacity  one Redis's CPU per read over the busiest primary's: how many
            times the reads of one Redis the cluster serves (the limit is
            --primaries)
  total     all primaries' CPU per read over one Redis's

and the issue's targets beside them. Every process shares this machine's
cores (the load generators on CPU 0, every server on CPU 1, as bench/run
does): the figures to read are the CPU per request and the ratios of the
same run, not the absolute rates. --front-cpu 0 puts the front ends on CPU
0 with the load generators, leaving CPU 1 to the redis-servers (a fleet's
front ends run on the inference nodes, not beside Redis). --redis-cpus
LIST (default 1) places the redis-servers: the one Redis (and the wait
setup's) on the first, the cluster's primaries on the CPUs in turn; on a
machine of 5 CPUs or more, --redis-cpus 1,2,3 --front-cpu 4 gives each
primary a CPU of its own, as a fleet gives it a machine, where on this
2-CPU VM the three share CPU 1. --rows: only the
rows whose name holds one of the words (e.g. 64c/r); the summary lines of
rows not run are left out.

--smoke: one run of 1 s, 2,000 keys, one and two front ends at 16
connections only (tests/integration/test_bench_smoke.py checks that the
script works, not any figure).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (LOADGEN, NCPU, ROOT, SERVER, cpu_seconds, free_port, parse,  # noqa: E402
                      pin, wait_port)
from redis_cluster import RedisCluster  # noqa: E402
from redis_server import RedisServer  # noqa: E402

KEYCHARS = "32"  # vLLM's MD5 hex
FRONT_CPU = 1  # the front ends' CPU (--front-cpu)


def pin_pid(pid, cpu=1):
    if pin(cpu):
        subprocess.run(["taskset", "-cp", str(cpu), str(pid)], stdout=subprocess.DEVNULL)


class Setup:
    """Front ends over one store (their ports), and the redis-servers whose
    CPU counts (their pids)."""

    def __init__(self, name, store_args, redis_pids, tmp, fronts=2, flags=()):
        self.name, self.redis_pids = name, redis_pids
        self.procs, self.ports = [], []
        for i in range(fronts):
            port = free_port()
            log = open(os.path.join(tmp, "metad-%s-%d.log" % (name, i)), "w")
            args = [SERVER] + list(store_args) + list(flags[i] if flags else ()) + [
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn"]
            self.procs.append(subprocess.Popen(pin(FRONT_CPU) + args, stdout=log, stderr=log))
            wait_port(port, self.procs[-1])
            self.ports.append(port)

    def load(self, a):
        subprocess.run(pin(0) + [LOADGEN, "load", str(self.ports[0]), str(a.keys), str(a.ranks),
                                 str(a.pages), KEYCHARS], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=10)


def run_load(kind, ports, conns, a, bodies):
    """One run of `kind` over the front ends `ports` at once, `conns`
    connections in all: (rate, p50 us, requests answered, p99 us)."""
    procs = []
    for i, port in enumerate(ports):
        c = conns // len(ports) + (1 if i < conns % len(ports) else 0)
        if kind == "w":
            cmd = [LOADGEN, "save", str(port), str(a.seconds), str(c), "128", str(a.ranks)]
        else:
            cmd = ["wrk", "-t1", "-c%d" % c, "-d%ds" % a.seconds, "--timeout", "10s", "-s",
                   os.path.join(ROOT, "bench", "wrk", "bodies.lua"),
                   "http://127.0.0.1:%d" % port, "--", bodies]
        procs.append((cmd, subprocess.Popen(pin(0) + cmd, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True,
                                            env=dict(os.environ, KEYCHARS=KEYCHARS))))
    rate = answered = 0.0
    p50, p99 = [], []
    for cmd, p in procs:
        out = p.communicate()[0]
        line = [x for x in out.splitlines() if x.startswith("requests=")]
        if p.returncode != 0 or not line:
            raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), out[-2000:]))
        got = parse(line[0])
        if got.get("errors", 0):
            raise RuntimeError("%s: %d errors" % (" ".join(cmd), got["errors"]))
        rate += got.get("pairs_per_s", 0) if kind == "w" else got["rps"]
        answered += got.get("answered_pairs", 0) if kind == "w" else got.get(
            "answered", got["requests"])
        p50.append(got.get("p50_us", 0))
        p99.append(got.get("p99_us", 0))
    return rate, statistics.median(p50), answered, statistics.median(p99)


def measure(setup, kind, first, fronts, conns, a, bodies):
    """One run over front ends first..first+fronts-1 of the setup."""
    pids = setup.redis_pids
    c0 = [cpu_seconds(pid) for pid in pids]
    rate, p50, n, p99 = run_load(kind, setup.ports[first:first + fronts], conns, a, bodies)
    c1 = [cpu_seconds(pid) for pid in pids]
    return {"rate": rate, "p50_us": p50, "p99_us": p99,
            "cpu_us": [1e6 * (y - x) / (n or 1) for x, y in zip(c0, c1)]}


def median_row(runs):
    return {"rate": statistics.median(r["rate"] for r in runs),
            "p50_us": statistics.median(r["p50_us"] for r in runs),
            "p99_us": statistics.median(r["p99_us"] for r in runs),
            "cpu_us": [statistics.median(r["cpu_us"][i] for r in runs)
                       for i in range(len(runs[0]["cpu_us"]))]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--primaries", type=int, default=3)
    ap.add_argument("--keys", type=int, default=60000)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pages", type=int, default=131072)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--front-cpu", type=int, default=1)
    ap.add_argument("--redis-cpus", default="1")
    ap.add_argument("--rows", default="")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    try:
        cpus = [int(c) for c in a.redis_cpus.split(",")]
    except ValueError:
        ap.error("--redis-cpus: CPU numbers separated by commas")
    if pin(0) and not all(0 <= c < NCPU for c in cpus + [a.front_cpu]):
        ap.error("--redis-cpus and --front-cpu name CPUs of this machine (0 to %d)" % (NCPU - 1))
    global FRONT_CPU
    FRONT_CPU = a.front_cpu
    conn_counts = (16, 64)
    if a.smoke:
        a.keys, a.seconds, a.runs, conn_counts = 2000, 1, 1, (16,)
    tmp = tempfile.mkdtemp(prefix="hf3fs-fleet-")
    bodies = os.path.join(tmp, "bodies.txt")
    with open(bodies, "w") as f:
        subprocess.run([LOADGEN, "bodies", "exists", str(a.keys), "256", "128"], stdout=f,
                       check=True, env=dict(os.environ, KEYCHARS=KEYCHARS))
    servers, setups = [], {}
    try:
        one = RedisServer().__enter__()
        servers.append(one)
        cluster = RedisCluster(primaries=a.primaries, replicas=0).__enter__()
        servers.append(cluster)
        primary = RedisServer().__enter__()
        servers.append(primary)
        replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(primary.port))).__enter__()
        servers.append(replica)
        cpids = [cluster.nodes[p].proc.pid for p in cluster.primaries_ports()]
        cpus = [int(c) for c in a.redis_cpus.split(",")]
        for pid in [one.proc.pid, primary.proc.pid, replica.proc.pid]:
            pin_pid(pid, cpus[0])
        for i, pid in enumerate(cpids):  # the primaries take the CPUs in turn
            pin_pid(pid, cpus[i % len(cpus)])
        setups["one"] = Setup("one", ["--store", one.url], [one.proc.pid], tmp)
        setups["cluster"] = Setup("cluster", ["--store", "redis-cluster://" + cluster.seeds()],
                                  cpids, tmp)
        setups["embedded"] = Setup("embedded", ["--in-memory"], [], tmp, fronts=1)
        setups["wait"] = Setup("wait", ["--store", primary.url], [primary.proc.pid], tmp,
                               flags=(("--redis-wait", "0"), ("--redis-wait", "1")))
        for s in setups.values():
            s.load(a)
        setups["embedded"].redis_pids = [setups["embedded"].procs[0].pid]
        values = [int(cluster.call(p, "DBSIZE")) for p in cluster.primaries_ports()]

        # (id, setup, kind, first front end, front ends, connections)
        rows = []
        for name in ("one", "cluster"):
            for fronts in (1, 2):
                for conns in conn_counts:
                    for kind in ("r", "w"):
                        rows.append(("%s/%dfe/%dc/%s" % (name, fronts, conns, kind), name, kind, 0,
                                     fronts, conns))
        for conns in conn_counts:
            rows.append(("embedded/1fe/%dc/r" % conns, "embedded", "r", 0, 1, conns))
        for name in ("embedded", "one", "cluster"):
            rows.append(("%s/1fe/1c/r" % name, name, "r", 0, 1, 1))
        # the front ends of "wait": --redis-wait 0, then --redis-wait 1
        rows.append(("wait0/1fe/16c/w", "wait", "w", 0, 1, 16))
        rows.append(("wait1/1fe/16c/w", "wait", "w", 1, 1, 16))

        print("Fleet: one Redis against %d primaries (values per primary: %s; stripes of kv: "
              "%d), %d complete keys on %d ranks, pools of %d pages, %d run(s) of %d s per "
              "row, alternating; load generators on CPU 0, redis-servers on CPU %s, front ends "
              "on CPU %d (of %d)"
              % (a.primaries, "/".join(map(str, values)), sum(values), a.keys, a.ranks, a.pages,
                 a.runs, a.seconds, a.redis_cpus, FRONT_CPU, NCPU))
        if a.rows:
            rows = [r for r in rows if any(w in r[0] for w in a.rows.split(","))]
        runs = {r[0]: [] for r in rows}
        for _ in range(a.runs):
            for rid, name, kind, first, fronts, conns in rows:
                runs[rid].append(measure(setups[name], kind, first, fronts, conns, a, bodies))
        med = {rid: median_row(rs) for rid, rs in runs.items()}

        def ran(*rids):
            return all(rid in med for rid in rids)
        print()
        print("| # | rate | p50 ms | Redis CPU per request/pair, per node (us) | all nodes (us) |")
        print("|---|---|---|---|---|")
        for rid, name, kind, _, _, _ in rows:
            m = med[rid]
            unit = "pairs/s" if kind == "w" else "requests/s"
            cpu = "-" if name == "embedded" else " / ".join("%.1f" % x for x in m["cpu_us"])
            total = "-" if name == "embedded" else "%.1f" % sum(m["cpu_us"])
            print("| %s | %.0f %s | %.2f | %s | %s |" % (rid, m["rate"], unit,
                                                        m["p50_us"] / 1000, cpu, total))
        print()
        print("Capacity (one Redis's CPU per read over the busiest primary's; limit %d) and total "
              "(all primaries over one Redis), 128-key reads; targets: capacity >= 2.0 at 64 "
              "connections, total <= 1.4:" % a.primaries)
        for fronts in (1, 2):
            for conns in conn_counts:
                one_id, cl_id = ("%s/%dfe/%dc/r" % (n, fronts, conns) for n in ("one", "cluster"))
                if not ran(one_id, cl_id):
                    continue
                o = med[one_id]["cpu_us"][0]
                c = med[cl_id]["cpu_us"]
                print("  %d front end(s), %d connections: capacity %.2fx, total %.2fx"
                      % (fronts, conns, o / (max(c) or 1), sum(c) / (o or 1)))
        print("One front end over one Redis against the embedded engine, reads (target >= 0.6):")
        for conns in conn_counts:
            if not ran("one/1fe/%dc/r" % conns, "embedded/1fe/%dc/r" % conns):
                continue
            o = med["one/1fe/%dc/r" % conns]["rate"]
            e = med["embedded/1fe/%dc/r" % conns]["rate"]
            print("  %d connections: %.0f / %.0f requests/s = %.2fx" % (conns, o, e, o / (e or 1)))
        if ran("wait0/1fe/16c/w", "wait1/1fe/16c/w"):
            w0, w1 = med["wait0/1fe/16c/w"]["rate"], med["wait1/1fe/16c/w"]["rate"]
            print("--redis-wait 1 against 0 (one replica), allocate 128 + confirm: %.0f / %.0f "
                  "pairs/s = %.2fx (target >= 0.9)" % (w1, w0, w1 / (w0 or 1)))
        if ran(*("%s/1fe/1c/r" % n for n in ("embedded", "one", "cluster"))):
            print("p50 of a 128-key read at 1 connection: embedded %.2f ms, one Redis %.2f ms, "
                  "cluster %.2f ms" % tuple(med["%s/1fe/1c/r" % n]["p50_us"] / 1000
                                           for n in ("embedded", "one", "cluster")))
    finally:
        for s in setups.values():
            s.close()
        for srv in reversed(servers):
            srv.__exit__(None, None, None)


if __name__ == "__main__":
    main()

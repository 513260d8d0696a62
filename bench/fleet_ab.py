#!/usr/bin/python3
"""fleet_ab.py: same-run A/B of two builds' front ends over Redis, each over a
redis-server of its own loaded with its own build's module (so builds of
different module versions compare).

    bench/fleet_ab.py [--kind r|w] [--conns 16] [--runs 3] [--seconds 3]
                      [--keychars 32|64|66] OLD_BUILD NEW_BUILD

OLD_BUILD and NEW_BUILD are build directories holding hf3fs-metad and
hf3fs_metad_redis.so (e.g. a worktree of an older commit built with
`make build/hf3fs-metad build/hf3fs_metad_redis.so`). Each front end gets
60,000 complete 32-hex keys (vLLM's MD5; --keychars 64: SHA-256 hex, as
SGLang's; 66: its "<64 hex>-k" and "-v") on 2 ranks (pools of 131,072
pages); then runs of `r` (128-key batch_exists, wrk) or `w` (allocate 128 + confirm, loadgen
save) alternate between the two, --runs times. Printed: every run, then per
side the median rate, p50, p99 and its redis-server's CPU per request or pair
(/proc), and NEW over OLD. Load on CPU 0, servers on CPU 1, as
bench/fleet_bench.py (whose setups and measures this uses).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_bench as fb  # noqa: E402
from redis_server import RedisServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--kind", choices=("r", "w"), default="r")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--keychars", choices=("32", "64", "66"), default=fb.KEYCHARS)
    a = ap.parse_args()
    fb.KEYCHARS = a.keychars
    a.keys, a.ranks, a.pages = 60000, 2, 131072
    tmp = tempfile.mkdtemp(prefix="hf3fs-fleet-ab-")
    bodies = os.path.join(tmp, "bodies.txt")
    with open(bodies, "w") as f:
        subprocess.run([fb.LOADGEN, "bodies", "exists", str(a.keys), "256", "128"], stdout=f,
                       check=True, env=dict(os.environ, KEYCHARS=fb.KEYCHARS))
    sides, servers = {}, []
    try:
        for name, build in (("old", a.old), ("new", a.new)):
            r = RedisServer(loadmodule=os.path.abspath(os.path.join(build, "hf3fs_metad_redis.so")))
            servers.append(r.__enter__())
            fb.pin_pid(r.proc.pid)
            fb.SERVER = os.path.abspath(os.path.join(build, "hf3fs-metad"))
            sides[name] = fb.Setup(name, ["--store", r.url], [r.proc.pid], tmp, fronts=1)
            sides[name].load(a)
        runs = {"old": [], "new": []}
        for i in range(a.runs):
            for name in ("old", "new"):
                m = fb.measure(sides[name], a.kind, 0, 1, a.conns, a, bodies)
                runs[name].append(m)
                print("%s run %d: %.0f/s, p50 %.0f us, p99 %.0f us, Redis CPU %.1f us"
                      % (name, i + 1, m["rate"], m["p50_us"], m["p99_us"], m["cpu_us"][0]),
                      flush=True)
    finally:
        for s in sides.values():
            s.close()
        for r in servers:
            r.__exit__(None, None, None)
    med = {name: fb.median_row(rs) for name, rs in runs.items()}
    what = "128-key reads" if a.kind == "r" else "allocate 128 + confirm pairs"
    for name in ("old", "new"):
        print("%s: %s %.0f/s, p50 %.0f us, p99 %.0f us, Redis CPU %.1f us (medians of %d, %d "
              "connections)" % (name, what, med[name]["rate"], med[name]["p50_us"],
                                med[name]["p99_us"], med[name]["cpu_us"][0], a.runs, a.conns))
    print("new / old: rate %.2fx, p50 %.2fx, p99 %.2fx, Redis CPU %.2fx"
          % (med["new"]["rate"] / med["old"]["rate"], med["new"]["p50_us"] / med["old"]["p50_us"],
             med["new"]["p99_us"] / med["old"]["p99_us"],
             med["new"]["cpu_us"][0] / med["old"]["cpu_us"][0]))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""bench/auth_cost.py: what tokens and tenants cost a reader (stdlib only).

    bench/auth_cost.py [--runs 5] [--seconds 4] [--conns 16] [--keys 100000]
                       [--threads 2] [--smoke]

Two hf3fs-metad --in-memory on CPU 1, the same flags but one: --auth-token-file
with two tenants (a token each) on one, no auth on the other. Each is loaded
with the same keys, complete on 2 ranks (over the auth server, into both
tenants' own `kv`, each through its token). The load generator (wrk -t1 on
CPU 0) sends 128-key vLLM batch_exists of those keys, on the auth server as
tenant a with HTTP Basic credentials (what `requests` sends from netrc).
The runs of the two alternate; each figure is the median of --runs runs.
Prints both medians, their ratio and the target of docs/performance.md
(auth on >= 0.95x of auth off). --smoke: one run of 1 s, 2,000 keys.
Every process started here is stopped.
"""

import argparse
import base64
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, parse, pin, wait_port  # noqa: E402

BIN = os.path.join(ROOT, "build", "hf3fs-metad")
LOADGEN = os.path.join(ROOT, "build", "bench", "loadgen")
SERVER_CPU, LOAD_CPU = 1, 0
TOKENS = {"a": "bench-token-of-tenant-a-5d1e7f0c2b9a", "b": "bench-token-of-tenant-b-93c4a8e1f6d0"}
procs = []


def basic(token):
    return "Basic " + base64.b64encode(("hf3fs:" + token).encode()).decode()


def front(opts, log, *flags):
    port = free_port()
    p = subprocess.Popen(pin(SERVER_CPU) + [BIN, "--host", "127.0.0.1", "--port", str(port),
                         "--in-memory", "--threads", str(opts.threads), "--log-level", "warn"]
                         + list(flags), stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT)
    procs.append(p)
    wait_port(port, p, timeout=60)
    return port


def load(port, opts, authorization=None):
    env = dict(os.environ)
    if authorization:
        env["HF3FS_AUTHORIZATION"] = authorization
    subprocess.run(pin(LOAD_CPU) + [LOADGEN, "load", str(port), str(opts.keys), "2", "1000000"],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def wrk(port, bodies, opts, authorization=None):
    env = dict(os.environ)
    if authorization:
        env["HF3FS_AUTHORIZATION"] = authorization
    out = subprocess.run(pin(LOAD_CPU) + ["wrk", "-t1", "-c%d" % opts.conns,
                          "-d%ds" % opts.seconds, "--timeout", "10s", "-s",
                          os.path.join(ROOT, "bench", "wrk", "bodies.lua"),
                          "http://127.0.0.1:%d" % port, "--", bodies],
                         capture_output=True, text=True, env=env).stdout
    line = [x for x in out.splitlines() if x.startswith("requests=")]
    if not line:
        sys.exit("wrk printed no figures:\n" + out)
    f = parse(line[0])
    if f["errors"] != 0:
        sys.exit("unexpected answers in a run (a 401?): " + line[0])
    return f["rps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true")
    opts = ap.parse_args()
    if opts.smoke:
        opts.runs, opts.seconds, opts.keys = 1, 1, 2000
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    subprocess.run(["make", "-s", "-C", ROOT, "build/hf3fs-metad", "build/bench/loadgen"],
                   check=True)
    tmp = tempfile.mkdtemp(prefix="hf3fs-auth-cost.")
    log = open(os.path.join(tmp, "servers.log"), "w")
    try:
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write("%s a\n%s b\n" % (TOKENS["a"], TOKENS["b"]))
        os.chmod(tokens, 0o600)
        bodies = os.path.join(tmp, "bodies.txt")
        with open(bodies, "w") as f:
            subprocess.run([LOADGEN, "bodies", "exists", str(opts.keys), "256", "128"],
                           stdout=f, check=True)
        off = front(opts, log)
        on = front(opts, log, "--auth-token-file", tokens)
        load(off, opts)
        for t in ("a", "b"):
            load(on, opts, basic(TOKENS[t]))
        rates = {"off": [], "on": []}
        for _ in range(opts.runs):
            rates["off"].append(wrk(off, bodies, opts))
            rates["on"].append(wrk(on, bodies, opts, basic(TOKENS["a"])))
        m_off, m_on = statistics.median(rates["off"]), statistics.median(rates["on"])
        print("128-key batch_exists, keys complete on 2 ranks, %d keys; --in-memory --threads "
              "%d; wrk -t1 -c%d, %d s runs, median of %d, runs alternating"
              % (opts.keys, opts.threads, opts.conns, opts.seconds, opts.runs))
        print()
        print("| server | requests/s (median) | runs |")
        print("|---|---|---|")
        print("| auth off | %.0f | %s |" % (m_off, " ".join("%.0f" % x for x in rates["off"])))
        print("| --auth-token-file, 2 tenants, Basic auth as tenant a | %.0f | %s |"
              % (m_on, " ".join("%.0f" % x for x in rates["on"])))
        print()
        ratio = m_on / m_off
        print("Target:")
        print("  auth on >= 0.95x of auth off: %.3fx %s" % (ratio, "met" if ratio >= 0.95
                                                           else "MISSED"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/durability.py: what durability costs (run by hand; not part of make test).

    bench/durability.py [--runs 3] [--seconds 5] [--clients 16] [--keys 1000000]
                        [--threads N] [--only cycle|restart|volume]

Builds build/hf3fs-metad and bench/durability_load (a C load generator), then
prints:
  1. the allocate+confirm cycle rate (SGLang dialect, one new key a cycle) at
     --clients concurrent keep-alive clients against --fsync always, everysec
     and --in-memory: the median of --runs runs of --seconds each, and the
     ratios to --in-memory;
  2. restart time with --keys owned keys: from the log only (kill -9), from a
     snapshot only (after a clean shutdown), and from a snapshot plus the log
     of 2 s of cycles; snapshot size; the time to /health = 200 and the
     server's own start-up figure;
  3. log bytes per operation: an allocate+confirm cycle of one key, and a
     vLLM batch_exists of 128 complete keys (2 ranks).
Data directories are made under $TMPDIR (default /tmp) and removed; every
server started here is stopped.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port  # noqa: E402
BIN = os.path.join(ROOT, "build", "hf3fs-metad")
LOAD = os.path.join(ROOT, "build", "bench", "durability_load")
servers = []
LOGS = tempfile.gettempdir()


def http(port, method, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Srv:
    def __init__(self, data_dir, *flags):
        self.port = free_port()
        self.log_path = os.path.join(LOGS, "server-%d.log" % self.port)
        args = [BIN, "--host", "127.0.0.1", "--port", str(self.port), "--log-summary-interval",
                "0"]
        args += ["--data-dir", data_dir] if data_dir else []
        args += list(flags)
        self.t0 = time.monotonic()
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        servers.append(self)
        while True:
            try:
                if http(self.port, "GET", "/health", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("server exited: %s" % open(self.log_path).read())
            time.sleep(0.005)
        self.ready_s = time.monotonic() - self.t0

    def stderr(self):
        return open(self.log_path, errors="replace").read()

    def stats(self):
        return json.loads(http(self.port, "GET", "/v1/stats")[1])

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        self.proc.wait(600)
        self.log.close()
        servers.remove(self)


def build():
    subprocess.run(["make", "-s", "-C", ROOT, "build/hf3fs-metad"], check=True)
    os.makedirs(os.path.dirname(LOAD), exist_ok=True)
    subprocess.run(["gcc", "-O2", "-D_GNU_SOURCE", "-pthread", "-o", LOAD,
                    os.path.join(ROOT, "bench", "durability_load.c")], check=True)


def load(port, *args):
    out = subprocess.run([LOAD, str(port)] + [str(a) for a in args], check=True,
                         capture_output=True, text=True).stdout
    return dict(zip(out.split()[0::2], map(float, out.split()[1::2])))


def cycle_rate(tmp, mode, opts):
    data = None if mode == "in-memory" else os.path.join(tmp, "cycle-%s" % mode)
    flags = ["--in-memory"] if mode == "in-memory" else ["--fsync", mode]
    if opts.threads:
        flags += ["--threads", str(opts.threads)]
    srv = Srv(data, *flags)
    for r in range(8):
        http(srv.port, "POST", "/%d/initialize" % r, {"num_pages": 50000000, "namespace": "bench"})
    res = load(srv.port, "cycle", opts.clients, opts.seconds)
    persistence = srv.stats()["server"].get("persistence") or {}
    srv.stop()
    if data:
        shutil.rmtree(data, ignore_errors=True)
    return res["rate"], persistence


def bench_cycle(tmp, opts):
    print("== allocate+confirm cycles/s, %d clients, %g s, median of %d runs"
          % (opts.clients, opts.seconds, opts.runs))
    rates = {m: [] for m in ("always", "everysec", "in-memory")}
    syncs = []
    for _ in range(opts.runs):
        for mode in rates:
            rate, p = cycle_rate(tmp, mode, opts)
            rates[mode].append(rate)
            if mode == "always" and p:
                syncs.append((p.get("log_syncs", 0), rate * opts.seconds * 2))
    med = {m: statistics.median(v) for m, v in rates.items()}
    for m in rates:
        print("  %-10s %9.0f   runs: %s" % (m, med[m], " ".join("%.0f" % x for x in rates[m])))
    print("  in-memory / always   = %.2fx" % (med["in-memory"] / med["always"]))
    print("  in-memory / everysec = %.2fx" % (med["in-memory"] / med["everysec"]))
    if syncs:
        s, ops = syncs[-1]
        print("  fsync always: %d fdatasyncs for ~%d changes (%.1f changes a sync)"
              % (s, ops, ops / max(s, 1)))


def startup_ms(srv):
    m = re.search(r"in (\d+) ms", srv.stderr())
    return int(m.group(1)) if m else -1


def bench_restart(tmp, opts):
    n = opts.keys
    print("== restart with %d owned keys" % n)
    data = os.path.join(tmp, "restart")
    srv = Srv(data, "--fsync", "everysec")
    t = load(srv.port, "load", n)
    print("  loaded %d keys in %.1f s" % (n, t["seconds"]))
    log_bytes = srv.stats()["server"]["persistence"]["log_bytes"]
    srv.stop(signal.SIGKILL)
    files = os.listdir(data)
    log_size = sum(os.path.getsize(os.path.join(data, f)) for f in files if f.endswith(".wal"))
    snap = sum(os.path.getsize(os.path.join(data, f)) for f in files if f.endswith(".snap"))
    srv = Srv(data)
    print("  after kill -9 (log %.1f MB, snapshot %.1f MB): ready in %.2f s (replay %d ms)"
          % (log_size / 1e6, snap / 1e6, srv.ready_s, startup_ms(srv)))
    srv.stop()  # a clean shutdown writes the final snapshot
    snap_files = [f for f in os.listdir(data) if f.endswith(".snap")]
    snap = os.path.getsize(os.path.join(data, snap_files[0]))
    print("  snapshot of %d keys: %.1f MB (%.1f bytes a key)" % (n, snap / 1e6, snap / n))
    srv = Srv(data)
    print("  from the snapshot alone: ready in %.2f s (load %d ms)"
          % (srv.ready_s, startup_ms(srv)))
    for r in range(8):
        http(srv.port, "POST", "/%d/initialize" % r, {"num_pages": 50000000, "namespace": "bench"})
    more = load(srv.port, "cycle", 16, 2.0)  # some log after the snapshot
    srv.stop(signal.SIGKILL)
    files = os.listdir(data)
    log_size = sum(os.path.getsize(os.path.join(data, f)) for f in files if f.endswith(".wal"))
    srv = Srv(data)
    print("  from the snapshot plus %.1f MB of log (%d cycles): ready in %.2f s (%d ms)"
          % (log_size / 1e6, more["cycles"], srv.ready_s, startup_ms(srv)))
    srv.stop(signal.SIGKILL)
    print("  log bytes while loading: %.1f a key (batches of 1,000)" % (log_bytes / n))
    shutil.rmtree(data, ignore_errors=True)


def bench_volume(tmp, opts):
    print("== log bytes per operation")
    data = os.path.join(tmp, "volume")
    srv = Srv(data, "--fsync", "everysec")
    load(srv.port, "load", 100000, 0)  # 100,000 complete keys on 2 ranks
    load(srv.port, "load", 100000, 1)
    for r in range(8):
        http(srv.port, "POST", "/%d/initialize" % r, {"num_pages": 50000000, "namespace": "bench"})
    b0 = srv.stats()["server"]["persistence"]["log_bytes"]
    c = load(srv.port, "cycle", 1, 2.0)
    b1 = srv.stats()["server"]["persistence"]["log_bytes"]
    print("  allocate+confirm of one key (SGLang): %.1f bytes a cycle" % ((b1 - b0) / c["cycles"]))
    e = load(srv.port, "exists", 2000)
    b2 = srv.stats()["server"]["persistence"]["log_bytes"]
    per = (b2 - b1) / e["requests"]
    print("  vLLM batch_exists of 128 complete keys on 2 ranks: %.0f bytes a request, %.2f a "
          "key and rank (%.0f requests/s)" % (per, per / 256, e["requests"] / e["seconds"]))
    srv.stop(signal.SIGKILL)
    shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", choices=["cycle", "restart", "volume"])
    opts = ap.parse_args()
    build()
    global LOGS
    tmp = tempfile.mkdtemp(prefix="hf3fs-bench-durability-",
                           dir=os.environ.get("TMPDIR", "/tmp"))
    LOGS = tmp
    try:
        if opts.only in (None, "cycle"):
            bench_cycle(tmp, opts)
        if opts.only in (None, "volume"):
            bench_volume(tmp, opts)
        if opts.only in (None, "restart"):
            bench_restart(tmp, opts)
    finally:
        for s in list(servers):
            s.proc.kill()
            s.proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

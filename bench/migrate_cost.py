#!/usr/bin/python3
"""migrate_cost.py: how long moving a namespace's value between Redis nodes
blocks the source node, at each stripe count.

    bench/migrate_cost.py [--stripes 1,16] [--keys 1000000] [--runs 3] [--smoke]

For each stripe count S: two redis-servers with the module loaded (the
source and the destination; no persistence), one hf3fs-metad --store
redis://<source> --stripes S, and `loadgen load` of --keys complete 64-hex
keys on one rank (namespace kv, a pool of --keys pages), after which the
front end is stopped. Then every value of the namespace (S of them) is
moved to the destination, one at a time, with `MIGRATE 127.0.0.1 <dst port>
<key> 0 60000` (what a slot migration does key by key), while a second
connection PINGs the source in a loop. Per value: the MIGRATE command's own
duration as its client sees it (serialize on the source, send, restore on
the destination, answer: the source executes nothing else meanwhile) and the
longest PING round trip that overlapped it (the stall another client sees).
Printed per S: the worst and the median over the values, and the whole
namespace's total; the destination's HF3FS.STRIPES of every moved value is
checked. --runs repeats the whole (fresh servers each time) and prints the
median of each figure.

A value holds about keys/S keys, and MIGRATE handles a value whole, so the
stall is about (the cost of one key's serialization + restore) x keys / S.

--smoke: 20,000 keys, one run (checks that the script works).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import LOADGEN, SERVER, free_port, pin, wait_port  # noqa: E402
from redis_server import RedisServer, Resp  # noqa: E402


class Pinger(threading.Thread):
    """PINGs a Redis in a loop on its own connection; records every round
    trip as (start, end)."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stop = False
        self.trips = []

    def run(self):
        while not self.stop:
            t0 = time.monotonic()
            self.sock.sendall(b"PING\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = self.sock.recv(64)
                if not chunk:
                    return
                got += chunk
            self.trips.append((t0, time.monotonic()))

    def worst_within(self, t0, t1):
        return max([e - s for s, e in self.trips if e >= t0 and s <= t1] or [0.0])


def one_run(stripes, a, tmp):
    src = RedisServer().start()
    dst = RedisServer().start()
    proc = None
    try:
        if pin(1):
            subprocess.run(["taskset", "-cp", "1", str(src.proc.pid)], stdout=subprocess.DEVNULL)
        port = free_port()
        log = open(os.path.join(tmp, "metad-%d.log" % stripes), "a")
        proc = subprocess.Popen(pin(1) + [SERVER, "--store", src.url, "--stripes", str(stripes),
                                          "--host", "127.0.0.1", "--port", str(port),
                                          "--log-level", "warn"], stdout=log, stderr=log)
        wait_port(port, proc)
        subprocess.run(pin(0) + [LOADGEN, "load", str(port), str(a.keys), "1", str(a.keys)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc.terminate()
        proc.wait(timeout=10)
        proc = None
        log.close()
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in src.cmd("KEYS", "*"))
        if len(keys) != stripes:
            raise RuntimeError("S=%d: the source holds %d values" % (stripes, len(keys)))
        pinger = Pinger(src.port)
        pinger.start()
        time.sleep(0.2)
        durations, stalls = [], []
        mover = Resp(port=src.port, timeout=120)
        for k in keys:
            t0 = time.monotonic()
            r = mover.cmd("MIGRATE", "127.0.0.1", str(dst.port), k, "0", "60000")
            t1 = time.monotonic()
            if r not in (b"OK", "OK"):
                raise RuntimeError("MIGRATE %s: %r" % (k, r))
            time.sleep(0.05)  # the PING in flight at t1 comes back
            durations.append(t1 - t0)
            stalls.append(pinger.worst_within(t0, t1))
        pinger.stop = True
        pinger.join(timeout=5)
        for k in keys:
            got = int(dst.cmd("HF3FS.STRIPES", k))
            if got != stripes:
                raise RuntimeError("%s on the destination: HF3FS.STRIPES %d" % (k, got))
        return {"worst": max(durations), "median": statistics.median(durations),
                "total": sum(durations), "ping_worst": max(stalls),
                "ping_median": statistics.median(stalls)}
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        src.stop()
        dst.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stripes", default="1,16")
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        a.keys, a.runs = 20000, 1
    for tool in (SERVER, LOADGEN):
        if not os.path.exists(tool):
            sys.exit("migrate_cost: %s is missing (make all bench-tools)" % tool)
    tmp = tempfile.mkdtemp(prefix="hf3fs-migrate-cost-")
    counts = [int(x) for x in a.stripes.split(",")]
    print("MIGRATE of every value of namespace kv (%s complete 64-hex keys on 1 rank) between "
          "two Redis nodes with the module, one value at a time; medians of %d run(s)"
          % (format(a.keys, ","), a.runs))
    print()
    print("| stripes | keys per value (about) | MIGRATE of one value, worst (s) | median (s) | "
          "all values (s) | longest PING during a MIGRATE, worst (s) | median (s) |")
    print("|---|---|---|---|---|---|---|")
    med = {}
    for s in counts:
        runs = [one_run(s, a, tmp) for _ in range(a.runs)]
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med[s] = m
        print("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            s, format(a.keys // s, ","), m["worst"], m["median"], m["total"], m["ping_worst"],
            m["ping_median"]))
        sys.stdout.flush()
    print()
    for s in counts:
        print("  S=%d: the source blocked at most %.3f s by one MIGRATE (PING: %.3f s): "
              "target <= 0.25 s %s" % (s, med[s]["worst"], med[s]["ping_worst"],
                                       "met" if max(med[s]["worst"], med[s]["ping_worst"]) <= 0.25
                                       else "MISSED"))
    if len(counts) > 1:
        b = counts[0]
        for s in counts[1:]:
            print("  S=%d vs S=%d: worst MIGRATE %.3f / %.3f s = %.3fx (keys per value: 1/%d)"
                  % (s, b, med[s]["worst"], med[b]["worst"], med[s]["worst"] / med[b]["worst"],
                     s // b))


if __name__ == "__main__":
    main()

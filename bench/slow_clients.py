#!/usr/bin/env python3
"""bench/slow_clients.py: well-behaved clients beside slow and greedy ones
(run by hand; not part of make test).

    bench/slow_clients.py [--runs 1] [--seconds 45] [--warmup 15]
                          [--slowloris N] [--slow-bodies 200] [BIN ...]

For each server binary (default build/hf3fs-metad), in turn, --runs times:
a server on its default flags (a data directory of its own under $TMPDIR,
--max-connections 1024) meets
  - N slowloris connections (default: --max-connections + 1,000): each
    sends a request line and one header line, then a byte every 5 s; one
    the server closes is opened again (as slowloris tools do), at most 500
    a second;
  - --slow-bodies connections that send whole headers announcing a
    100,000-byte body, then a byte a second, opened again when closed;
  - a well-behaved client: one thread on a kept-alive connection and one
    opening a connection per request, each sending an SGLang `exists` of 8
    keys every 20 ms, each request given 10 s.
After --warmup seconds, it prints for each kind of well-behaved request the
share answered 200 and the p50 and p99 latency of the answered ones, and
the server's counters of shed and timed-out connections.

    bench/slow_clients.py --tenants [--flooders 256] [--seconds 20] [BIN ...]

Tenants: tenant "steady" sends a 1-key exists every 10 ms from 4 kept-alive
connections (this process) while tenant "greedy" floods 8-key exists from
--flooders kept-alive connections as fast as it can (wrk, one request at a
time each); prints steady's answers per second and p99 with and without the
flood, and the ratio. Needs wrk (Debian's package). With --redis, each server
runs over a redis-server of its own with the module built beside BIN.
"""

import argparse
import http.client
import json
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import SERVER, free_port, wait_port  # noqa: E402

BENCH = os.path.dirname(os.path.abspath(__file__))

HEAD = b"POST /0/exists HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def start(binary, flags, workdir):
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port),
                             "--persistence-path", os.path.join(workdir, "data")] + flags,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    return proc, port


def post(conn, path, body, headers=None):
    conn.request("POST", path, json.dumps(body), headers or {})
    r = conn.getresponse()
    return r.status, r.read()


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("hf3fs_metad_connections_"):
            name, _, value = line.rpartition(" ")
            out[name[len("hf3fs_metad_connections_"):]] = float(value)
    return out


class Attacker(threading.Thread):
    """Slowloris and slow-body connections on one epoll, replaced when
    closed."""

    def __init__(self, port, slowloris, slow_bodies):
        super().__init__(daemon=True)
        self.port, self.want = port, {"loris": slowloris, "body": slow_bodies}
        self.stop = threading.Event()
        self.opened = 0

    def open_one(self, kind):
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", self.port))
            if kind == "loris":
                s.sendall(HEAD + b"X-a: ")
            else:
                s.sendall(HEAD + b"Content-Length: 100000\r\n\r\n{")
        except OSError:
            s.close()
            return None
        s.setblocking(False)
        self.opened += 1
        return s

    def run(self):
        ep = select.epoll()
        socks = {}  # fd -> (sock, kind, next send)
        count = {"loris": 0, "body": 0}
        last_open = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            budget = int((now - last_open) * 500) + 1
            last_open = now
            for kind in ("body", "loris"):
                while count[kind] < self.want[kind] and budget > 0 and not self.stop.is_set():
                    budget -= 1
                    s = self.open_one(kind)
                    if s is None:
                        break
                    every = 5.0 if kind == "loris" else 1.0
                    socks[s.fileno()] = (s, kind, now + every, every)
                    ep.register(s.fileno(), select.EPOLLIN)
                    count[kind] += 1
            for fd, _ in ep.poll(0.05):
                s, kind, _, _ = socks.pop(fd)
                ep.unregister(fd)
                s.close()
                count[kind] -= 1
            now = time.monotonic()
            for fd, (s, kind, due, every) in list(socks.items()):
                if now >= due:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
                    socks[fd] = (s, kind, now + every, every)
        for s, _, _, _ in socks.values():
            s.close()


class Good(threading.Thread):
    """A well-behaved client: a request every `every` seconds, on a kept-alive
    connection or a fresh one each time; records (start, ok, latency)."""

    def __init__(self, port, fresh, path, body, every, headers=None):
        super().__init__(daemon=True)
        self.port, self.fresh, self.path, self.body = port, fresh, path, body
        self.every, self.headers = every, headers or {}
        self.stop = threading.Event()
        self.log = []

    def run(self):
        conn = None
        due = time.monotonic()
        while not self.stop.is_set():
            if self.every:
                due += self.every
            t0 = time.monotonic()
            ok = False
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                status, _ = post(conn, self.path, self.body, self.headers)
                ok = status == 200
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
            if self.fresh and conn is not None:
                conn.close()
                conn = None
            self.log.append((t0, ok, time.monotonic() - t0))
            if self.every:
                time.sleep(max(0.0, due - time.monotonic()))
        if conn is not None:
            conn.close()


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def slow_run(binary, args):
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = start(binary, [], workdir)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            post(c, "/0/initialize", {"num_pages": 1024})
            c.close()
            body = {"keys": ["%032x" % i for i in range(8)]}
            goods = {"kept-alive": Good(port, False, "/0/exists", body, 0.02),
                     "fresh": Good(port, True, "/0/exists", body, 0.02)}
            attacker = Attacker(port, args.slowloris, args.slow_bodies)
            t0 = time.monotonic()
            attacker.start()
            for g in goods.values():
                g.start()
            time.sleep(args.seconds)
            for g in goods.values():
                g.stop.set()
            for g in goods.values():
                g.join()
            attacker.stop.set()
            attacker.join()
            figures = metrics(port)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    rows = {}
    for kind, g in goods.items():
        after = [(ok, lat) for start_t, ok, lat in g.log if start_t - t0 >= args.warmup]
        answered = [lat for ok, lat in after if ok]
        rows[kind] = (len(after), len(answered) / max(1, len(after)),
                      pct(answered, 0.5), pct(answered, 0.99))
    return rows, attacker.opened, figures


def tenants_run(binary, args, flood_on):
    with tempfile.TemporaryDirectory() as workdir:
        tokens = os.path.join(workdir, "tokens")
        with open(tokens, "w") as f:
            f.write("steady-token steady\ngreedy-token greedy\n")
        redis = None
        flags = ["--auth-token-file", tokens]
        if args.redis:
            from redis_server import RedisServer
            redis = RedisServer(loadmodule=os.path.join(os.path.dirname(binary),
                                                         "hf3fs_metad_redis.so")).__enter__()
            flags += ["--store", redis.url]
        proc, port = start(binary, flags, workdir)
        try:
            for token in ("steady-token", "greedy-token"):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                post(c, "/0/initialize", {"num_pages": 1024},
                     {"Authorization": "Bearer " + token})
                c.close()
            steady = [Good(port, False, "/0/exists", {"keys": ["%032x" % i]}, 0.01,
                           {"Authorization": "Bearer steady-token"}) for i in range(4)]
            flood = None
            if flood_on:
                bodies = os.path.join(workdir, "bodies")
                with open(bodies, "w") as f:
                    for i in range(64):
                        f.write("/0/exists\t%s\n" % json.dumps(
                            {"keys": ["%032x" % (i * 8 + k) for k in range(8)]}))
                flood = subprocess.Popen(
                    ["wrk", "-t1", "-c%d" % args.flooders, "-d%ds" % (args.seconds + 2),
                     "-s", os.path.join(BENCH, "wrk", "bodies.lua"),
                     "http://127.0.0.1:%d" % port, "--", bodies],
                    env=dict(os.environ, HF3FS_AUTHORIZATION="Bearer greedy-token"),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                time.sleep(1.0)
            for g in steady:
                g.start()
            time.sleep(args.seconds)
            for g in steady:
                g.stop.set()
            for g in steady:
                g.join()
            flood_rps = 0.0
            if flood:
                out = flood.communicate(timeout=30)[0]
                m = re.search(r"rps=([0-9.]+)", out)
                flood_rps = float(m.group(1)) if m else float("nan")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            if redis:
                redis.stop()
    ok = sum(1 for g in steady for _, good, _ in g.log if good)
    lat = [x for g in steady for _, good, x in g.log if good]
    return ok / args.seconds, pct(lat, 0.99), flood_rps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bins", nargs="*", default=[SERVER])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--warmup", type=float, default=15)
    ap.add_argument("--slowloris", type=int, default=1024 + 1000)
    ap.add_argument("--slow-bodies", type=int, default=200)
    ap.add_argument("--tenants", action="store_true")
    ap.add_argument("--flooders", type=int, default=256)
    ap.add_argument("--redis", action="store_true",
                    help="--tenants over a Redis with the module (next to each BIN)")
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = 20 if args.tenants else 45
    for run in range(args.runs):
        for binary in args.bins:
            if args.tenants:
                alone = tenants_run(binary, args, False)
                flooded = tenants_run(binary, args, True)
                print("%s run %d: steady tenant %.0f answers/s alone (p99 %.1f ms), %.0f under "
                      "a %d-connection flood (p99 %.1f ms, the flood %.0f/s): %.2fx"
                      % (binary, run + 1, alone[0], alone[1] * 1e3, flooded[0],
                         args.flooders, flooded[1] * 1e3, flooded[2],
                         flooded[0] / max(alone[0], 1e-9)), flush=True)
                continue
            rows, opened, figures = slow_run(binary, args)
            print("%s run %d: %d attacking connections opened; server: %s" % (
                binary, run + 1, opened,
                ", ".join("%s %d" % (k, v) for k, v in sorted(figures.items()))), flush=True)
            for kind, (n, share, p50, p99) in rows.items():
                print("  %-10s %5d requests after %.0f s: %6.2f%% answered, p50 %.1f ms, "
                      "p99 %.1f ms" % (kind, n, args.warmup, 100 * share, p50 * 1e3, p99 * 1e3),
                      flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""fleet_replay.py: what a 128-key read costs one Redis and each primary of a
cluster when its commands arrive D deep, without a front end beside them.

    bench/fleet_replay.py [--depths 64,25,8] [--commands 51200] [--runs 2]

The setups of bench/fleet_bench.py (one Redis; a cluster of 3 primaries at
the default stripes; 60,000 complete 32-hex keys on 2 ranks, pools of
131,072 pages), each loaded through a front end. Then, with MONITOR on
every redis-server, 256 reads of 128 random loaded keys (as many as
fleet_bench's bodies) go through each front end: the HF3FS.CEXISTS
commands it sent (one per stripe: 128 keys to one Redis, about 43 to each
primary) are captured exactly. The front ends stop, and the captured
commands are replayed straight into their redis-servers, every one in turn,
in pipelines of D commands (one write, then every reply), --commands per
redis-server: to one Redis alone, to each primary alone, and to the three
primaries at once. Printed per depth and run: each redis-server's CPU per
command (user + system, /proc/PID/stat) and the capacity and total of
bench/fleet_bench.py (one Redis's CPU per read over the busiest primary's;
all primaries' over one Redis's), alone and at once; then the same run's
time inside the command (INFO commandstats: usec per call of
hf3fs.cexists, the module's work and Redis's call around it), the rest
being Redis's reading, parsing, replying and event loop. Every
redis-server runs on CPU 1, the replaying client on CPU 0.

A front end reaches a depth of about 25 commands per write under 64
connections (its /v1/stats: calls over writes); this separates what Redis
costs at a depth from what the front end's way of sending adds.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_bench as fb  # noqa: E402
from benchlib import commandstats, cpu_seconds, pin  # noqa: E402
from redis_cluster import RedisCluster  # noqa: E402
from redis_server import Resp, RedisServer  # noqa: E402

READS = 256  # captured, as many as the bodies of bench/fleet_bench.py
ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b'"': b'"', b"\\": b"\\", b"a": b"\a",
           b"b": b"\b"}


def monitor_args(line):
    """The arguments of one MONITOR line: '... [db addr] "A" "B\\x00" ...'."""
    s = line[line.index(b"] ") + 2:]
    args, i = [], 0
    while i < len(s):
        if s[i:i + 1] != b'"':
            i += 1
            continue
        j, cur = i + 1, bytearray()
        while s[j:j + 1] != b'"':
            if s[j:j + 1] == b"\\":
                nx = s[j + 1:j + 2]
                if nx == b"x":
                    cur.append(int(s[j + 2:j + 4], 16))
                    j += 4
                else:
                    cur += ESCAPES.get(nx, nx)
                    j += 2
                continue
            cur.append(s[j])
            j += 1
        args.append(bytes(cur))
        i = j + 1
    return args


def capture(ports, front_port, bodies):
    """The HF3FS.CEXISTS commands each redis-server got for the bodies."""
    socks = []
    for p in ports:
        s = socket.create_connection(("127.0.0.1", p))
        s.sendall(b"MONITOR\r\n")
        socks.append(s)
    time.sleep(0.3)
    for b in bodies:
        req = urllib.request.Request("http://127.0.0.1:%d/keys/batch_exists" % front_port, data=b)
        urllib.request.urlopen(req).read()
    time.sleep(0.5)
    out = []
    for s in socks:
        s.settimeout(0.5)
        buf = b""
        try:
            while True:
                d = s.recv(1 << 20)
                if not d:
                    break
                buf += d
        except socket.timeout:
            pass
        s.close()
        out.append([monitor_args(line) for line in buf.split(b"\r\n")
                    if b'"HF3FS.CEXISTS"' in line.upper()])
    return out


def replay(port, cmds, depth, total, done, i):
    conn = Resp(port=port, timeout=60)
    sent = 0
    while sent < total:  # through every captured command in turn, depth at a time
        batch = [cmds[(sent + i) % len(cmds)] for i in range(depth)]
        for reply in conn.pipeline(batch):
            if isinstance(reply, Exception):
                raise reply
        sent += len(batch)
    conn.close()
    done[i] = sent


def cexists_usec(port):
    """(calls, usec) of hf3fs.cexists so far on the redis-server at port."""
    conn = Resp(port=port)
    info = conn.cmd("INFO", "commandstats").decode()
    conn.close()
    return commandstats(info).get("hf3fs.cexists", (0, 0))


def cpu_per_command(ports, pids, cmdsets, depth, total):
    """Each redis-server's (CPU, time inside HF3FS.CEXISTS) per command (us)
    while cmdsets[i] is replayed to ports[i], depth at a time."""
    u0 = [cexists_usec(p) for p in ports]
    c0 = [cpu_seconds(p) for p in pids]
    done = [0] * len(ports)
    threads = [threading.Thread(target=replay, args=(p, c, depth, total, done, i))
               for i, (p, c) in enumerate(zip(ports, cmdsets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c1 = [cpu_seconds(p) for p in pids]
    u1 = [cexists_usec(p) for p in ports]
    return [(1e6 * (y - x) / n, (b[1] - a[1]) / max(1, b[0] - a[0]))
            for x, y, n, a, b in zip(c0, c1, done, u0, u1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depths", default="64,25,8")
    ap.add_argument("--commands", type=int, default=51200)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    a.keys, a.ranks, a.pages = 60000, 2, 131072
    if pin(0):
        os.sched_setaffinity(0, {0})
    tmp = tempfile.mkdtemp(prefix="hf3fs-replay-")
    out = subprocess.run([fb.LOADGEN, "bodies", "exists", str(a.keys), str(READS), "128"],
                         capture_output=True, check=True,
                         env=dict(os.environ, KEYCHARS=fb.KEYCHARS)).stdout.decode()
    bodies = [line.split("\t", 1)[1].encode() for line in out.splitlines()]
    with RedisServer() as one, RedisCluster(primaries=3, replicas=0) as cl:
        ports = cl.primaries_ports()
        pids = [cl.nodes[p].proc.pid for p in ports]
        for pid in [one.proc.pid] + pids:
            fb.pin_pid(pid)
        s1 = fb.Setup("one", ["--store", one.url], [one.proc.pid], tmp, fronts=1)
        s2 = fb.Setup("cluster", ["--store", "redis-cluster://" + cl.seeds()], pids, tmp,
                      fronts=1)
        s1.load(a)
        s2.load(a)
        one_cmds = capture([one.port], s1.ports[0], bodies)[0]
        cl_cmds = capture(ports, s2.ports[0], bodies)
        s1.close()
        s2.close()
        print("Replayed HF3FS.CEXISTS of 128-key reads: one Redis %d commands, primaries %s; "
              "%d commands per redis-server and run; CPU per command (us)"
              % (len(one_cmds), "/".join(str(len(c)) for c in cl_cmds), a.commands))
        print()
        print("| depth | one Redis | primaries alone | primaries at once "
              "| capacity alone / at once | total alone / at once "
              "| inside the command: one Redis | alone | at once |")
        print("|---|---|---|---|---|---|---|---|---|")

        def us(xs):
            return " / ".join("%.1f" % x for x in xs)
        for depth in [int(d) for d in a.depths.split(",")]:
            for _ in range(a.runs):
                r1, in1 = cpu_per_command([one.port], [one.proc.pid], [one_cmds], depth,
                                          a.commands)[0]
                alone = [cpu_per_command([p], [pid], [c], depth, a.commands)[0]
                         for p, pid, c in zip(ports, pids, cl_cmds)]
                once = cpu_per_command(ports, pids, cl_cmds, depth, a.commands)
                ca, co = [x[0] for x in alone], [x[0] for x in once]
                print("| %d | %.1f | %s | %s | %.2fx / %.2fx | %.2fx / %.2fx | %.1f | %s | %s |"
                      % (depth, r1, us(ca), us(co), r1 / max(ca), r1 / max(co),
                         sum(ca) / r1, sum(co) / r1, in1, us(x[1] for x in alone),
                         us(x[1] for x in once)))

if __name__ == "__main__":
    main()

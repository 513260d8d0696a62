"""bench/benchlib.py: what the Python benchmark scripts share (stdlib only).

The paths of the build, ports, CPU pinning, waiting for a server, and the
load generators' one-line figures ("requests=.. rps=X .."), a process's CPU
time; importing it also makes the tests' Redis helpers importable. Imported
by bench/cluster_bench.py, bench/fleet_bench.py, bench/migrate_cost.py,
bench/durability.py and bench/read_cost.py.
"""

import os
import re
import shutil
import socket
import sys
import time

NCPU = os.cpu_count() or 1
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the builds the scripts run ($BUILD: another build directory)
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
SERVER = os.path.join(BUILD, "hf3fs-metad")
LOADGEN = os.path.join(BUILD, "bench", "loadgen")
# the tests' Redis helpers (redis_server.RedisServer, redis_cluster.RedisCluster)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpu):
    """The command prefix that runs a process on CPU `cpu` (none on one CPU)."""
    if NCPU >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", str(cpu)]
    return []


def wait_port(port, proc, timeout=15, what="hf3fs-metad"):
    """Until 127.0.0.1:port accepts connections; RuntimeError if proc exits
    first or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on %d" % (what, port))


def cpu_seconds(pid):
    """User + system CPU time of a process so far (/proc/PID/stat): what the
    node really spent, where commandstats' durations would also count the
    time a node waited for the CPU it shares with the others here."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def commandstats(text):
    """INFO commandstats as {command: (calls, usec)}, names lowercase as
    Redis prints them (hf3fs.cexists, module|list, ...)."""
    return {name: (int(c), int(u)) for name, c, u in
            re.findall(r"cmdstat_([\w.|]+):calls=(\d+),usec=(\d+)", text)}


def parse(line):
    """loadgen/wrk's "requests=.. rps=X ..." line as a dict of floats."""
    out = {}
    for k, v in re.findall(r"(\w+)=([0-9.]+)", line):
        out[k] = float(v)
    return out

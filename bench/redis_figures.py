#!/usr/bin/python3
"""bench/redis_figures.py: Redis's own figures for bench/run (stdlib only).

    redis_figures.py PORT reset
        CONFIG RESETSTAT (commandstats start from zero)
    redis_figures.py PORT command-usec PREFIX
        INFO commandstats since the reset, every command whose name starts
        with PREFIX (hf3fs. for the module's, hmget): "calls=N
        usec_per_call=U". commandstats times only the command itself, not
        the reading, parsing and replying around it, and on a CPU shared
        with other processes it also counts the time Redis waited for the
        CPU: bench/run's main figure is the process's CPU time from /proc
    redis_figures.py PORT used-memory
        INFO memory's used_memory, in bytes
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from redis_server import Resp  # noqa: E402


def stats(c, names):
    out = {}
    for line in c.cmd("INFO", "commandstats").decode().split("\r\n"):
        if line.startswith("cmdstat_"):
            name, rest = line[8:].split(":", 1)
            kv = dict(x.split("=") for x in rest.split(",") if "=" in x)
            if names(name):
                out[name] = (int(kv["calls"]), int(kv["usec"]))
    return out


def main():
    port, what = int(sys.argv[1]), sys.argv[2]
    c = Resp(port=port, timeout=60)
    if what == "reset":
        c.cmd("CONFIG", "RESETSTAT")
    elif what == "command-usec":
        prefix = sys.argv[3]
        s = stats(c, lambda name: name.startswith(prefix))
        calls = sum(v[0] for v in s.values())
        usec = sum(v[1] for v in s.values())
        print("calls=%d usec_per_call=%.2f" % (calls, usec / calls if calls else 0))
    elif what == "used-memory":
        for line in c.cmd("INFO", "memory").decode().split("\r\n"):
            if line.startswith("used_memory:"):
                print(line.split(":", 1)[1])
    else:
        sys.exit("unknown figure %s" % what)


if __name__ == "__main__":
    main()

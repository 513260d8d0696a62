#!/usr/bin/python3
"""bench/redis_figures.py: Redis's own figures for bench/run (stdlib only).

    redis_figures.py PORT reset
        CONFIG RESETSTAT (commandstats start from zero)
    redis_figures.py PORT module-usec
        Redis CPU per module command since the reset: "calls=N usec_per_call=U"
        (every HF3FS.* command together; INFO commandstats)
    redis_figures.py PORT hmget-usec BODIES [COUNT]
        the bare baseline of a 128-key batch_exists on 2 ranks: two hashes
        (one per rank) hold every key of the file (loadgen bodies exists ...)
        as a 32-byte field (64 hex characters packed); for COUNT bodies, one
        HMGET of the body's keys in each of the two; prints "calls=N
        usec_per_call=U usec_per_request=2U"; the hashes are deleted after
    redis_figures.py PORT used-memory
        INFO memory's used_memory, in bytes
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from redis_server import Resp  # noqa: E402


def field(key):
    """A key as a 32-byte field (64 hex characters packed), else its bytes."""
    if len(key) == 64 and all(c in "0123456789abcdef" for c in key):
        return bytes.fromhex(key)
    return key.encode()


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
    elif what == "module-usec":
        s = stats(c, lambda name: name.startswith("hf3fs."))
        calls = sum(v[0] for v in s.values())
        usec = sum(v[1] for v in s.values())
        print("calls=%d usec_per_call=%.2f" % (calls, usec / calls if calls else 0))
    elif what == "hmget-usec":
        count = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
        bodies = []
        with open(sys.argv[3]) as f:
            for line in f:
                bodies.append(json.loads(line.split("\t", 1)[1])["keys"])
        hashes = ["hf3fs-bench:{hmget}:%d" % rank for rank in (0, 1)]
        every = sorted({field(k) for body in bodies for k in body})
        for h in hashes:
            for i in range(0, len(every), 500):
                args = []
                for f in every[i:i + 500]:
                    args += [f, b"1"]
                c.cmd("HSET", h, *args)
        c.cmd("CONFIG", "RESETSTAT")
        batch = []
        for i in range(count):
            fields = [field(k) for k in bodies[i % len(bodies)]]
            for h in hashes:
                batch.append(["HMGET", h] + fields)
            if len(batch) >= 64:
                c.pipeline(batch)
                batch = []
        if batch:
            c.pipeline(batch)
        calls, usec = stats(c, lambda name: name == "hmget")["hmget"]
        c.cmd("DEL", *hashes)
        print("calls=%d usec_per_call=%.2f usec_per_request=%.2f"
              % (calls, usec / calls, 2 * usec / calls))
    elif what == "used-memory":
        for line in c.cmd("INFO", "memory").decode().split("\r\n"):
            if line.startswith("used_memory:"):
                print(line.split(":", 1)[1])
    else:
        sys.exit("unknown figure %s" % what)


if __name__ == "__main__":
    main()

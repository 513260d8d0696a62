#!/usr/bin/python3
"""bench/redis_figures.py: Redis's own figures for bench/run (stdlib only).

    redis_figures.py PORT reset
        CONFIG RESETSTAT (commandstats start from zero)
    redis_figures.py PORT script-usec
        Redis CPU per script call since the reset: "calls=N usec_per_call=U"
        (EVALSHA and EVAL together; INFO commandstats)
    redis_figures.py PORT hmget-usec BODIES [COUNT]
        the bare baseline of a 128-key batch_exists on 2 ranks: for COUNT bodies
        of the file (loadgen bodies exists ...), one HMGET of the body's keys
        (packed as the Redis engine packs them) in each of the two pools of
        namespace kv; prints "calls=N usec_per_call=U usec_per_request=2U"
    redis_figures.py PORT read-and-apply BODIES [COUNT]
        the two halves of a 128-key batch_exists on 2 ranks over the Redis
        engine, called as the front end calls it (EVALSHA of
        src/store/redis.lua) but with a use-log bound no read reaches: the
        read itself (usec_per_call), then the one call that applies the uses
        those reads logged (usec_per_use: per logged (key, rank) use)
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
    """The index field of a key (src/store/redis.c, args_key)."""
    if len(key) == 64 and all(c in "0123456789abcdef" for c in key):
        return b"\0" + bytes.fromhex(key)
    return b"\1" + key.encode()


def stats(c, names):
    out = {}
    for line in c.cmd("INFO", "commandstats").decode().split("\r\n"):
        if line.startswith("cmdstat_"):
            name, rest = line[8:].split(":", 1)
            kv = dict(x.split("=") for x in rest.split(","))
            if name in names:
                out[name] = (int(kv["calls"]), int(kv["usec"]))
    return out


def main():
    port, what = int(sys.argv[1]), sys.argv[2]
    c = Resp(port=port, timeout=60)
    if what == "reset":
        c.cmd("CONFIG", "RESETSTAT")
    elif what == "script-usec":
        s = stats(c, ("evalsha", "eval"))
        calls = sum(v[0] for v in s.values())
        usec = sum(v[1] for v in s.values())
        print("calls=%d usec_per_call=%.2f" % (calls, usec / calls if calls else 0))
    elif what == "hmget-usec":
        count = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
        bodies = []
        with open(sys.argv[3]) as f:
            for line in f:
                bodies.append(json.loads(line.split("\t", 1)[1])["keys"])
        c.cmd("CONFIG", "RESETSTAT")
        nsx = "kv".encode().hex()
        batch = []
        for i in range(count):
            fields = [field(k) for k in bodies[i % len(bodies)]]
            for rank in (0, 1):
                batch.append(["HMGET", "hfm:{%s:%d}:k" % (nsx, rank)] + fields)
            if len(batch) >= 64:
                c.pipeline(batch)
                batch = []
        if batch:
            c.pipeline(batch)
        calls, usec = stats(c, ("hmget",))["hmget"]
        print("calls=%d usec_per_call=%.2f usec_per_request=%.2f"
              % (calls, usec / calls, 2 * usec / calls))
    elif what == "read-and-apply":
        import hashlib
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "src", "store", "redis.lua"), "rb") as f:
            script = f.read()
        sha = hashlib.sha1(script).hexdigest()
        c.cmd("SCRIPT", "LOAD", script)
        count = int(sys.argv[4]) if len(sys.argv) > 4 else 500
        bodies = []
        with open(sys.argv[3]) as f:
            for line in f:
                bodies.append(json.loads(line.split("\t", 1)[1])["keys"])
        nsx = "kv".encode().hex()
        # op, now, reservation, read lease, evict, write lease, grace, bound, ns, rank (-1: exists)
        head = ["EVALSHA", sha, 0, "complete", "", 600000, 5000, 1, 600000, 10000, 1 << 40, 0, nsx,
                -1]
        c.cmd("CONFIG", "RESETSTAT")
        uses = 0
        for i in range(count):
            reply = c.cmd(*(head + [field(k) for k in bodies[i % len(bodies)]]))
            uses += 2 * sum(1 for x in reply[1] if x is not None)
        read = stats(c, ("evalsha",))["evalsha"]
        c.cmd("CONFIG", "RESETSTAT")
        c.cmd("EVALSHA", sha, 0, "stats", "", 600000, 5000, 1, 600000, 10000, 1 << 40, 0)
        apply = stats(c, ("evalsha",))["evalsha"]
        print("calls=%d usec_per_call=%.2f uses=%d apply_usec=%d usec_per_use=%.2f"
              % (read[0], read[1] / read[0], uses, apply[1], apply[1] / max(uses, 1)))
    elif what == "used-memory":
        for line in c.cmd("INFO", "memory").decode().split("\r\n"):
            if line.startswith("used_memory:"):
                print(line.split(":", 1)[1])
    else:
        sys.exit("unknown figure %s" % what)


if __name__ == "__main__":
    main()

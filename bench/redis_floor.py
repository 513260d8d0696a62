#!/usr/bin/python3
"""redis_floor.py: what Redis 7.0 charges per key for the pieces of a read
that keeps an exact LRU, so that the Redis engine's read targets (issue 12)
can be checked against what is possible at all.

    bench/redis_floor.py [--keys N] [--calls N] [--runs N]

Starts its own redis-server (no persistence, a free port, a temp dir), fills
one hash with N 33-byte fields (the engine's packed 64-hex keys: random
bytes) -> page, and
one 64-byte-per-page record string, then for each variant sends --calls
requests of 128 random existing fields (1,024 different requests, so that
the lookups are not all served from the CPU's caches) and reads Redis's CPU per call from
INFO commandstats (the median of --runs runs, variants interleaved). Printed:
microseconds per call and per key, and each variant's ratio to the bare
HMGET of the same fields.

Variants (every one but the first is a script, as the engine's calls are):
  bare HMGET            the HMGET command alone: the issue's yardstick
  script HMGET          the same HMGET inside a script (the script's own cost)
  read as served        HMGET + one APPEND of the uses: what a read costs the
                        engine today, before its uses are ordered
  + bulk HSET           ...+ one HSET page -> sequence for every use: the
                        cheapest per-use write Redis offers from a script
  + RPUSH               ...+ one RPUSH of the pages (an ordered list of uses)
  + BITFIELD SET        ...+ one BITFIELD with a SET per use (dense array)
  + SETRANGE each       ...+ one SETRANGE per use (8 bytes of the record)
  Lua parse of a log    a script that only parses 128 logged uses back into
                        numbers: what any later ordering pays per use in Lua

An exact LRU must put every read's uses in order at some point; whichever
way it is done, it pays at least one of the per-use costs above on top of
the read, unless uses repeat before they are ordered.
"""

import argparse
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from redis_server import RedisServer  # noqa: E402

NBODIES = 1024  # 131,072 draws of 128: most calls find the hash's entries out of the caches

READ = "local v = redis.call('HMGET', KEYS[1], unpack(ARGV))\n"
USED = ("local u = {}\nfor i = 1, #v do if v[i] then u[#u + 1] = v[i] end end\n"
        "redis.call('APPEND', KEYS[2], '1700000000000:0:' .. table.concat(u, ',') .. ';')\n")

VARIANTS = [
    ("bare HMGET", None),
    ("script HMGET", READ + "return #v"),
    ("read as served", READ + USED + "return #v"),
    ("+ bulk HSET", READ + USED + "local a = {}\nfor i = 1, #u do a[2 * i - 1] = u[i]; a[2 * i] = 1000000 + i end\n"
     "redis.call('HSET', KEYS[3], unpack(a))\nreturn #v"),
    ("+ RPUSH", READ + USED + "redis.call('RPUSH', KEYS[4], unpack(u))\nreturn #v"),
    ("+ BITFIELD SET", READ + USED + "local a = {}\nfor i = 1, #u do local n = 4 * i - 3\n"
     "a[n] = 'SET'; a[n + 1] = 'i64'; a[n + 2] = tonumber(u[i]) * 512 + 32; a[n + 3] = 1000000 + i end\n"
     "redis.call('BITFIELD', KEYS[5], unpack(a))\nreturn #v"),
    ("+ SETRANGE each", READ + USED + "for i = 1, #u do redis.call('SETRANGE', KEYS[5], tonumber(u[i]) * 64 + 4, "
     "'abcdefgh') end\nreturn #v"),
    ("Lua parse of a log", "local s = table.concat(ARGV, ',', 1, #ARGV)\nlocal n = 0\n"
     "for p in string.gmatch(s, '%d+') do n = n + tonumber(p) end\nreturn n"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    rnd = random.Random(7)
    with RedisServer() as srv:
        r = srv.connect()
        keys = ["floor:{p}:k", "floor:{p}:u", "floor:{p}:h", "floor:{p}:o", "floor:{p}:r"]
        fields = [b"\0" + rnd.randbytes(32) for _ in range(a.keys)]
        for b in range(0, a.keys, 1000):
            args = []
            for p in range(b, min(b + 1000, a.keys)):
                args += [fields[p], str(p)]
            r.cmd("HSET", keys[0], *args)
        r.cmd("SETRANGE", keys[4], str(a.keys * 64), "\0")
        bodies = [[fields[p] for p in rnd.sample(range(a.keys), 128)] for _ in range(NBODIES)]
        nums = [[str(rnd.randrange(a.keys)) for _ in range(128)] for _ in range(NBODIES)]
        shas = {name: (r.cmd("SCRIPT", "LOAD", src) if src else None) for name, src in VARIANTS}
        per = {name: [] for name, _ in VARIANTS}
        for _ in range(a.runs):
            for name, _ in VARIANTS:
                r.cmd("DEL", *keys[1:4])
                r.cmd("CONFIG", "RESETSTAT")
                for i in range(a.calls):
                    if shas[name] is None:
                        r.cmd("HMGET", keys[0], *bodies[i % NBODIES])
                    elif name == "Lua parse of a log":
                        r.cmd("EVALSHA", shas[name], "0", *nums[i % NBODIES])
                    else:
                        r.cmd("EVALSHA", shas[name], str(len(keys)), *keys, *bodies[i % NBODIES])
                    if i % 200 == 199:
                        r.cmd("DEL", *keys[1:4])
                stats = r.cmd("INFO", "commandstats")
                stats = stats.decode() if isinstance(stats, bytes) else stats
                cmd = "cmdstat_hmget:" if shas[name] is None else "cmdstat_evalsha:"
                for line in stats.splitlines():
                    if line.startswith(cmd):
                        per[name].append(float(line.split("usec_per_call=")[1].split(",")[0]))
        base = statistics.median(per["bare HMGET"])
        print(f"Redis CPU per call of 128 keys ({a.keys} fields in the hash, median of {a.runs} runs of {a.calls} calls)")
        print(f"{'variant':22s} {'us/call':>9s} {'us/key':>7s} {'x bare HMGET':>13s}")
        for name, _ in VARIANTS:
            m = statistics.median(per[name])
            print(f"{name:22s} {m:9.1f} {m / 128:7.2f} {m / base:13.2f}")


if __name__ == "__main__":
    main()

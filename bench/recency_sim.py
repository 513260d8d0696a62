#!/usr/bin/env python3
"""bench/recency_sim.py: prefix-hit ratio of exact LRU and of CLOCK variants
on a trace of bench/traces/ format (docs/eviction.md), one rank, no leases.

    bench/recency_sim.py TRACE.jsonl [TRACE.jsonl ...]

Per request, as vLLM drives the server: batch_exists uses every present key
of the chain, get_locations uses the prefix hits again, batch_allocate and
confirm_write use each present key after the prefix twice, and new keys are
inserted. Prints, per pool size (1%, 5%, 10%, 20% of the unique blocks),
LRU's ratio and each variant's difference in points. Variant gMI: use count
0..M, insertion at I (g43 is the core's policy; g10 is a single reference
bit). A simulation only: the figures through a real server are the replay
tool's.
"""
import json
import sys
from collections import OrderedDict


def load(path):
    return [json.loads(line)["hash_ids"] for line in open(path)]


def lru(reqs, cap):
    hits = tot = 0
    c = OrderedDict()
    for ch in reqs:
        pre, hp = True, 0
        for b in ch:
            tot += 1
            if b in c:
                c.move_to_end(b)
                hits += pre
                hp += pre
            else:
                pre = False
        for b in ch[:hp]:
            c.move_to_end(b)
        for b in ch[hp:]:
            if b in c:
                c.move_to_end(b)
        for b in ch[hp:]:
            if b not in c:
                if len(c) >= cap:
                    c.popitem(last=False)
                c[b] = 1
    return hits / tot


def gclock(reqs, cap, maxc, ins):
    hits = tot = 0
    slot_of, keys, cnt, hand, n = {}, [None] * cap, [0] * cap, 0, 0

    def use(s):
        cnt[s] = min(maxc, cnt[s] + 1)

    for ch in reqs:
        pre, hp = True, 0
        for b in ch:
            tot += 1
            s = slot_of.get(b)
            if s is not None:
                use(s)
                hits += pre
                hp += pre
            else:
                pre = False
        for b in ch[:hp]:
            use(slot_of[b])
        for b in ch[hp:]:
            if b in slot_of:
                use(slot_of[b])
                use(slot_of[b])
        for b in ch[hp:]:
            if b in slot_of:
                continue
            if n < cap:
                s, n = n, n + 1
            else:
                while True:
                    s, hand = hand, (hand + 1) % cap
                    if cnt[s]:
                        cnt[s] -= 1
                        continue
                    break
                del slot_of[keys[s]]
            keys[s], slot_of[b], cnt[s] = b, s, ins
    return hits / tot


def main():
    variants = ((4, 3), (1, 0), (1, 1), (2, 1), (3, 2))
    for path in sys.argv[1:]:
        reqs = load(path)
        uniq = len({b for ch in reqs for b in ch})
        for frac in (0.01, 0.05, 0.10, 0.20):
            cap = max(1, int(uniq * frac))
            base = lru(reqs, cap)
            diffs = " ".join("g%d%d %+.2f" % (m, i, (gclock(reqs, cap, m, i) - base) * 100)
                             for m, i in variants)
            print("%s %3d%% lru %.4f %s" % (path.split("/")[-1], frac * 100, base, diffs))


if __name__ == "__main__":
    main()

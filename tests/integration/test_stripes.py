"""Stripes (docs/redis-module.md "Stripes"): a namespace over several Redis
values. The reference model (tests/unit/test_model.c) checks every operation
per stripe; these tests check what only a front end's life shows: the count a
namespace keeps whatever a later front end's --stripes says, and an
all-or-nothing allocation undone on every stripe when one cannot serve it.
Over Redis and a Redis Cluster (HF3FS_TEST_ENGINE); the flag check runs on the
embedded engine.
"""
import subprocess

import harness
from harness import Server, expect_eq, expect_status, expect_true, redis_only


def vllm_init(c, ranks, pages):
    for r in range(ranks):
        expect_status(c.post("/rank/%d/initialize" % r, {"role": "worker", "num_pages": pages}),
                      200)


def vllm_save(c, rank, keys):
    """allocate + confirm; the pages (None where the allocation gave none)."""
    r = c.post("/keys/batch_allocate", {"rank": rank, "keys": keys})
    expect_status(r, 200)
    pages = [p for _, p in r.json()["results"]]
    done = [[k, p] for k, p in zip(keys, pages) if p >= 0]
    if done:
        expect_status(c.post("/keys/confirm_write", {"rank": rank, "confirmations": done}), 204)
    return [p if p >= 0 else None for p in pages]


@redis_only
def test_a_front_end_with_another_stripe_count_uses_the_namespaces_own_and_says_so():
    keys = ["%032x" % (i * 7919) for i in range(40)]
    with Server("--stripes", "4") as a:
        store = a.store
        c = a.client()
        vllm_init(c, 2, 64)
        pages = vllm_save(c, 0, keys)
        expect_eq(vllm_save(c, 1, keys), pages, "rank 1's pages")
        expect_true(all(p is not None for p in pages), "every key got a page: %r" % pages)
        with Server("--stripes", "2", store=store) as b:
            cb = b.client()
            r = cb.post("/keys/batch_exists", {"keys": keys})
            expect_eq(r.json()["exists"], [True] * len(keys), "found through the other front end")
            r = cb.post("/keys/get_locations", {"rank": 0, "keys": keys})
            expect_eq(r.json()["locations"], pages, "at their pages")
            # a save through b lands where a finds it: both use 4 stripes
            more = ["%032x" % (10 ** 6 + i) for i in range(8)]
            got = vllm_save(cb, 0, more)
            r = c.post("/keys/get_locations", {"rank": 0, "keys": more})
            expect_eq(r.json()["locations"], [None] * 8, "incomplete: rank 1 has none")
            r = c.post("/0/get_page_indices", {"keys": more})
            expect_eq(r.json()["indices"], got, "a sees b's pages")
            b.check()
            expect_true("has 4 stripe(s)" in b.stderr(), "b says the namespace's own count")
            sizes = {r: p["num_pages"] for (ns, r), p in b.stats().items() if ns == "kv"}
            expect_eq(sizes, {0: 64, 1: 64}, "pool sizes summed over the stripes")


@redis_only
def test_an_all_or_nothing_allocation_one_stripe_cannot_serve_reserves_nothing_anywhere():
    # 8 pages over 4 stripes: 2 each. Fill until one key finds its stripe full
    # (no eviction), then ask for it with fresh keys of the other stripes.
    with Server("--stripes", "4", "--eviction", "none") as s:
        c = s.client()
        vllm_init(c, 1, 8)
        full = None
        for i in range(64):
            k = "%032x" % (i + 1)
            if vllm_save(c, 0, [k]) == [None]:
                full = k
                break
        expect_true(full is not None, "a stripe filled up")
        before = s.stats()[("kv", 0)]
        expect_true(before["free"] > 0, "other stripes have room: %r" % before)
        fresh = ["%032x" % (10 ** 9 + i) for i in range(6)]
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": fresh + [full]})
        expect_status(r, 200)
        expect_eq([p for _, p in r.json()["results"]], [-1] * 7, "all or nothing")
        after = s.stats()[("kv", 0)]
        for field in ("free", "reserved", "owned", "draining"):
            expect_eq(after[field], before[field], field + " unchanged")
        s.check()


def test_stripes_without_a_store_is_refused_at_start():
    p = subprocess.run([harness.BIN, "--stripes", "4", "--port", "0"], capture_output=True,
                       timeout=30)
    expect_eq(p.returncode, 2, "exit status")
    expect_true(b"--stripes applies to --store only" in p.stderr, p.stderr)


if __name__ == "__main__":
    harness.main(globals())

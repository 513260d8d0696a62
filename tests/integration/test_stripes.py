"""Stripes (docs/redis-module.md "Stripes"): a namespace over several Redis
values. The reference model (tests/unit/test_model.c) checks every operation
per stripe; these tests check what only a front end's life shows: the count a
namespace keeps whatever a later front end's --stripes says, the count chosen
without --stripes by the first pool's size and the primaries
(docs/many-nodes.md "Choosing S"), learnt again by a front end whose cached
count went stale, and an all-or-nothing allocation undone on every stripe
when one cannot serve it.
Over Redis and a Redis Cluster (HF3FS_TEST_ENGINE); the flag check runs on the
embedded engine.
"""
import subprocess

import harness
from harness import (Server, expect_eq, expect_status, expect_true, redis_only, s_alloc,
                     s_confirm, s_exists, s_init, v_alloc, v_confirm, v_exists, v_init)


def anchor_layout(srv, ns):
    """[count, placement] ns's anchor records (HF3FS.STRIPES; [0, 0]: no
    namespace)."""
    key = "hf3fs:{%s}" % (ns.encode().hex() or "-")
    if harness.ENGINE == "redis-cluster":
        rc = harness.shared_cluster()
        return [int(x) for x in rc.call(rc.slot_owner(rc.keyslot(key)), "HF3FS.STRIPES", key)]
    c = harness.shared_redis().connect()
    try:
        c.cmd("SELECT", srv.store.rsplit("/", 1)[1])
        return [int(x) for x in c.cmd("HF3FS.STRIPES", key)]
    finally:
        c.close()


def anchor_stripes(srv, ns):
    """The stripe count ns's anchor records (0: no namespace)."""
    return anchor_layout(srv, ns)[0]


def values_per_primary(ns):
    """How many of ns's values (its stripes) each primary of the cluster holds."""
    rc = harness.shared_cluster()
    pattern = "hf3fs:{%s*" % ns.encode().hex()
    return sorted(len(rc.call(p, "KEYS", pattern)) for p in rc.primaries_ports())


def primaries():
    """The primaries of the store the tests run over (one Redis: 1)."""
    if harness.ENGINE == "redis-cluster":
        return len(harness.shared_cluster().primaries_ports())
    return 1


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


def small_pools_session(c):
    """The stock clients' calls on pools of 2 (SGLang) and 4 pages (vLLM, two
    ranks): a reservation of every page and (SGLang) one key more, then a new
    key once all are owned and all but one used since. Every answer, in
    order."""
    got = []
    s_init(c, 0, 2, ns="sg")
    got.append(s_alloc(c, 0, [["s1", None], ["s2", "s1"], ["s3", "s2"]], ns="sg"))
    s_confirm(c, 0, [["s1", 0], ["s2", 1]], ns="sg")
    got.append(s_exists(c, 0, ["s2"], ns="sg"))
    got.append(s_alloc(c, 0, [["s4", None]], ns="sg"))
    got.append(s_exists(c, 0, ["s1", "s2", "s4"], ns="sg"))
    keys = ["k1", "k2", "k3", "k4"]
    for rank in (0, 1):
        v_init(c, rank, 4)
        pages = v_alloc(c, rank, keys)
        got.append(pages)
        v_confirm(c, rank, list(zip(keys, pages)))
    got.append(v_exists(c, keys[1:]))
    for rank in (0, 1):
        got.append(v_alloc(c, rank, ["k5"]))
        v_confirm(c, rank, [["k5", got[-1][0]]])
    got.append(v_exists(c, keys + ["k5"]))
    return got


@redis_only
def test_small_pool_over_cluster_gets_one_stripe_and_answers_as_the_embedded_engine():
    with Server(store="") as ref:
        want = small_pools_session(ref.client())
    with Server(default_stripes=True) as s:
        got = small_pools_session(s.client())
        expect_eq((anchor_stripes(s, "sg"), anchor_stripes(s, "kv")), (1, 1), "stripes")
        s.check()
    expect_eq(got, want, "every answer, against the embedded engine's")
    # what those answers are: every page reserved, then the least recently
    # used key evicted for a new one, in each dialect
    expect_eq(sorted(p for _, p in got[0][:2]) + [got[0][2][1]], [0, 1, -1], "2 of 3 reserved")
    expect_eq(got[2][0][1], 0, "s4 takes s1's page (s2 was used since)")
    expect_eq(got[3], [False, True, False], "s1 evicted; s4 reserved, not confirmed")
    expect_eq(sorted(got[4]), [0, 1, 2, 3], "every page of rank 0 reserved by one call")
    expect_eq(got[7], got[5][:1], "k5 takes k1's page (k2-k4 were used since)")
    expect_eq(got[8], got[7], "on both ranks")
    expect_eq(got[9], [False, True, True, True, True], "k1 evicted for k5")


@redis_only
def test_pool_of_many_pages_gets_one_stripe_on_each_primary_and_every_front_end_uses_it():
    # 60,000 pages: at least 2,500 a stripe at one stripe per primary, and
    # within 60,000 a stripe (docs/many-nodes.md "Choosing S"); placed one
    # on each primary (wire.h "Placement")
    P = primaries()
    with Server(default_stripes=True) as a:
        c = a.client()
        v_init(c, 0, 60000)
        expect_eq(anchor_layout(a, "kv"), [P, 1 if P > 1 else 0],
                  "stripes of kv over %d primaries, and their placement" % P)
        if P > 1:
            expect_true("created with %d stripe(s) (by pool size)" % P in a.stderr(),
                        "a says so:\n" + a.stderr())
            expect_eq(values_per_primary("kv"), [1] * P, "kv's values on the primaries")
        keys = ["%032x" % (i * 7919) for i in range(12)]
        pages = v_alloc(c, 0, keys)
        v_confirm(c, 0, list(zip(keys, pages)))
        with Server(default_stripes=True, store=a.store) as b:
            cb = b.client()
            v_init(cb, 1, 4)  # a small pool of the same namespace: its count
            expect_eq(anchor_stripes(a, "kv"), P, "kv keeps its count")
            expect_eq(harness.s_pages(cb, 0, keys), pages, "b finds a's keys at their pages")
            sizes = {r: p["num_pages"] for (ns, r), p in b.stats().items() if ns == "kv"}
            expect_eq(sizes, {0: 60000, 1: 4}, "pool sizes summed over the stripes")
            b.check()


@redis_only
def test_a_front_end_whose_cached_stripe_count_went_stale_learns_the_namespaces_own():
    # b caches sg as a namespace of one stripe (a 4-page pool); a clears
    # everything and creates sg again from a pool of 60,000 pages (one
    # stripe per primary): b's next call is told (-ESTRIPES) and asks again.
    P = primaries()
    with Server(default_stripes=True) as a, \
            Server(default_stripes=True, store=a.store) as b:
        ca, cb = a.client(), b.client()
        s_init(cb, 0, 4, ns="sg")
        expect_eq(anchor_stripes(a, "sg"), 1, "a 4-page pool's namespace")
        expect_status(ca.post("/clear"), 204)
        s_init(ca, 0, 60000, ns="sg")
        expect_eq(anchor_stripes(a, "sg"), P, "created again by 60,000 pages")
        keys = ["%032x" % i for i in range(1, 13)]
        got = s_alloc(cb, 0, [[k, None] for k in keys], ns="sg")
        expect_true(all(p >= 0 for _, p in got), "b reserves on every stripe: %r" % got)
        s_confirm(cb, 0, [[k, p] for k, (_, p) in zip(keys, got)], ns="sg")
        expect_eq(s_exists(ca, 0, keys, ns="sg"), [True] * len(keys), "a finds b's keys")
        a.check()


def test_stripes_without_a_store_is_refused_at_start():
    p = subprocess.run([harness.BIN, "--stripes", "4", "--port", "0"], capture_output=True,
                       timeout=30)
    expect_eq(p.returncode, 2, "exit status")
    expect_true(b"--stripes applies to --store only" in p.stderr, p.stderr)


if __name__ == "__main__":
    harness.main(globals())

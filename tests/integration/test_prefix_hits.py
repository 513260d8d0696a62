"""Prefix hits (issue 28; docs/operations.md "Prefix hits and the hit ratio at other
sizes"): GET /v1/stats "namespaces" and the /metrics families, in every engine. The
prefix counters are checked against the leading-run rule computed here, so the
embedded engine and Redis (over the cluster with 4 stripes: a stripe sees only its
share of a request, the front end counts) must give the same figures for the same
calls; the estimate against a cyclic scan, whose answer is known.
"""
import harness
from harness import Server, expect_eq, expect_status, expect_true


def stripes():
    return ("--stripes", "4") if harness.ENGINE != "mem" else ()


def save(c, rank, keys):
    r = c.post("/keys/batch_allocate", {"rank": rank, "keys": keys})
    expect_status(r, 200)
    done = [[k, p] for k, p in r.json()["results"] if p >= 0]
    expect_status(c.post("/keys/confirm_write", {"rank": rank, "confirmations": done}), 204)


def namespace(c, name):
    r = c.get("/v1/stats")
    expect_status(r, 200)
    found = [n for n in r.json()["namespaces"] if n["namespace"] == name]
    expect_eq(len(found), 1, "one entry for %s" % name)
    return found[0]


def leading(flags):
    k = 0
    while k < len(flags) and flags[k]:
        k += 1
    return k


def test_prefix_counters_are_the_leading_runs_of_batch_exists_and_exists_in_every_engine():
    keys = ["%032x" % (i * 104729 + 1) for i in range(24)]
    with Server(*stripes()) as s:
        c = s.client()
        for r in range(2):
            expect_status(c.post("/rank/%d/initialize" % r,
                                 {"role": "worker", "num_pages": 256}), 200)
        for r in range(2):
            save(c, r, keys[:16])
        save(c, 0, keys[16:20])  # on rank 0 only: not complete
        expect_status(c.post("/0/initialize", {"num_pages": 64, "namespace": "sg"}), 204)
        r = c.post("/0/reserve_and_allocate_page_indices",
                   {"keys": [[k, None] for k in keys[:6]], "namespace": "sg"})
        expect_status(r, 200)
        got = [[k, p] for k, (_, p) in zip(keys[:6], r.json()["indices"])]
        expect_status(c.post("/0/confirm_write", {"written_keys_to_confirm": got,
                                                   "pages_to_release": [], "namespace": "sg"}), 204)
        asks = [keys[:16], keys[:5] + [keys[17]] + keys[5:9], keys[16:20] + keys[:3],
                [keys[0], "f" * 32, keys[1]], keys]
        want = {"requests": 0, "blocks": 0, "hit_blocks": 0}
        for ask in asks:
            r = c.post("/keys/batch_exists", {"keys": ask})
            expect_status(r, 200)
            flags = r.json()["exists"]
            expect_eq(flags, [k in keys[:16] for k in ask], "answers")
            want["requests"] += 1
            want["blocks"] += len(ask)
            want["hit_blocks"] += leading(flags)
        expect_eq(namespace(c, "kv")["prefix"], want, "kv's prefix counters")
        sg = {"requests": 0, "blocks": 0, "hit_blocks": 0}
        for ask in [keys[:6], keys[:2] + ["0" * 32] + keys[2:6], keys[6:9]]:
            r = c.post("/0/exists", {"keys": ask, "namespace": "sg"})
            expect_status(r, 200)
            sg["requests"] += 1
            sg["blocks"] += len(ask)
            sg["hit_blocks"] += leading(r.json()["exists"])
        expect_eq(sg, {"requests": 3, "blocks": 16, "hit_blocks": 8}, "the rule here")
        expect_eq(namespace(c, "sg")["prefix"], sg, "sg's prefix counters")
        text = c.get("/metrics").body.decode()
        for name, field in [("requests", "requests"), ("blocks", "blocks"),
                            ("hit_blocks", "hit_blocks")]:
            line = 'hf3fs_metad_prefix_%s_total{tenant="default",namespace="kv"} %d' % (
                name, want[field])
            expect_true(line in text, "%s in /metrics" % line)
        expect_status(c.post("/clear"), 204)
        r = c.get("/v1/stats")
        expect_eq(r.json()["namespaces"], [], "clear forgets the namespaces' figures")


def test_cyclic_scan_estimates_no_hit_at_or_below_the_pool_and_every_reuse_at_four_times():
    """2,048 keys read in turn (chains of 8) and saved, 4 rounds, over pools of 1,024
    pages: the scan misses in any LRU-like cache of 256-1,024 pages, and a cache of
    4,096 pages keeps every key after the first round (3 of 4 uses hit). The
    estimator samples about a quarter of the keys (reuse.h: a rate of at most 1/4)
    and shrinks its caches alike, which keeps both answers; over 4 stripes each
    stripe sees its share of the keys and pages, which keeps them too."""
    keys = ["%032x" % (i * 7919 + 3) for i in range(2048)]
    with Server(*stripes()) as s:
        c = s.client()
        expect_status(c.post("/rank/0/initialize", {"role": "worker", "num_pages": 1024}),
                      200)
        for _ in range(4):
            for i in range(0, len(keys), 8):
                chain = keys[i:i + 8]
                expect_status(c.post("/keys/batch_exists", {"keys": chain}), 200)
                save(c, 0, [[k, chain[j - 1] if j else None] for j, k in enumerate(chain)])
        ns = namespace(c, "kv")
        expect_eq(ns["prefix"]["hit_blocks"], 0, "the server itself: no prefix hit")
        est = ns["hit_ratio_at"]
        expect_eq(sorted(est), sorted(["0.25", "0.5", "1", "2", "4"]), "the scales")
        for scale in ["0.25", "0.5", "1"]:
            expect_eq(est[scale], 0, "estimate at %s x 1,024 pages" % scale)
        expect_eq(est["4"], 0.75, "estimate at 4 x 1,024 pages")
        sampled = ns["hit_ratio_sampled_blocks"]
        expect_true(sampled % 4 == 0 and 4 * 2048 / 8 < sampled < 4 * 2048 / 2,
                    "each sampled key 4 times, about a quarter of the keys: %d" % sampled)
        text = c.get("/metrics").body.decode()
        expect_true('hf3fs_metad_hit_ratio_estimate{tenant="default",namespace="kv",'
                    'pool_scale="4"} 0.750000' in text, "the estimate in /metrics")


if __name__ == "__main__":
    harness.main(globals())

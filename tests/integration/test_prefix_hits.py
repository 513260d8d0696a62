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


SCALES = ["0.125", "0.1487", "0.1768", "0.2102", "0.25", "0.2973", "0.3536", "0.4204", "0.5",
          "0.5946", "0.7071", "0.8409", "1", "1.189", "1.414", "1.682", "2", "2.378", "2.828",
          "3.364", "4"]


def cyclic_scan(c, n, pages):
    """n keys read in turn (chains of 8) and saved, 4 rounds, over pools of `pages`."""
    keys = ["%032x" % (i * 7919 + 3) for i in range(n)]
    expect_status(c.post("/rank/0/initialize", {"role": "worker", "num_pages": pages}), 200)
    for _ in range(4):
        for i in range(0, len(keys), 8):
            chain = keys[i:i + 8]
            expect_status(c.post("/keys/batch_exists", {"keys": chain}), 200)
            save(c, 0, [[k, chain[j - 1] if j else None] for j, k in enumerate(chain)])


def test_cyclic_scan_estimates_no_hit_below_its_keys_every_reuse_above_and_advises_its_size():
    """2,048 keys read in turn (chains of 8) and saved, 4 rounds, over pools of 1,024
    pages: the scan misses in any LRU-like cache of fewer than 2,048 pages, and one of
    more keeps every key after the first round (3 of 4 uses hit). The estimator
    samples about a quarter of the keys (reuse.h: a rate of at most 1/4) and shrinks
    its caches alike: about 512 keys sampled (standard deviation 20) against caches
    of 430 at 1.682 times and 609 at 2.378, so no hit up to 1.682 and every reuse
    from 2.378. Over 4 stripes each stripe simulates its share alone, about 128 keys
    (deviation 10) against caches of 91 at 1.414 times and 181 at 2.828: the checks
    keep as many deviations of margin there. The advice (default target: 0.75 less a
    point) lies between those sizes; halving costs nothing."""
    lo, hi = ("1.682", "2.378") if harness.ENGINE == "mem" else ("1.414", "2.828")
    with Server(*stripes()) as s:
        c = s.client()
        cyclic_scan(c, 2048, 1024)
        ns = namespace(c, "kv")
        expect_eq(ns["prefix"]["hit_blocks"], 0, "the server itself: no prefix hit")
        est = ns["hit_ratio_at"]
        expect_eq(sorted(est, key=float), SCALES, "the scales")
        for scale in SCALES[:SCALES.index(lo) + 1]:
            expect_eq(est[scale], 0, "estimate at %s x 1,024 pages" % scale)
        for scale in SCALES[SCALES.index(hi):]:
            expect_eq(est[scale], 0.75, "estimate at %s x 1,024 pages" % scale)
        sampled = ns["hit_ratio_sampled_blocks"]
        expect_true(sampled % 4 == 0 and 4 * 2048 / 8 < sampled < 4 * 2048 / 2,
                    "each sampled key 4 times, about a quarter of the keys: %d" % sampled)
        advice = ns["advice"]
        expect_eq((advice["target"], advice["reached"], advice["coarse"], advice["pages_now"]),
                  (0.74, True, False, 1024), "the default target is reached, on 21 sizes")
        expect_true(1024 * float(lo) < advice["pages"] <= 1024 * float(hi) + 1,
                    "advised pages: %d" % advice["pages"])
        expect_eq((advice["hit_ratio_now"], advice["halving_frees"], advice["halving_cost"]),
                  (0, 512, 0), "now and halving")
        text = c.get("/metrics").body.decode()
        labels = '{tenant="default",namespace="kv"'
        for line in [
                'hf3fs_metad_hit_ratio_estimate%s,pool_scale="4"} 0.750000' % labels,
                'hf3fs_metad_pool_advised_pages%s} %d' % (labels, advice["pages"]),
                'hf3fs_metad_hit_ratio_target%s} 0.740000' % labels,
                'hf3fs_metad_pool_halving_frees_pages%s} 512' % labels]:
            expect_true(line in text, "%s in /metrics" % line)


def test_hit_ratio_target_flag_sets_the_advice_target_and_an_unreachable_one_says_so():
    """The same scan at --hit-ratio-target 0.9: no size up to 4 times reaches it, so the
    advice is 4 times the pages, not reached."""
    with Server("--hit-ratio-target", "0.9", *stripes()) as s:
        c = s.client()
        cyclic_scan(c, 512, 256)
        advice = namespace(c, "kv")["advice"]
        expect_eq((advice["target"], advice["reached"], advice["pages"]), (0.9, False, 1024),
                  "an unreachable target")


if __name__ == "__main__":
    harness.main(globals())

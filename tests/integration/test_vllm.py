#!/usr/bin/python3
"""The vLLM dialect (docs/protocol.md "The vLLM dialect"): every route, exact
statuses and bodies, the initialization rule, all-or-nothing allocation,
completeness across ranks, confirm/release rules, /clear.

Over Redis with stripes, the tests that count pages or expect page numbers
use keys of stripe 0 and pools S times as large (harness.in_stripe0)."""

import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (Server, expect_eq, expect_error, expect_json, expect_no_body,  # noqa: E402
                     expect_true, pool_states, v_alloc, v_confirm, v_exists, v_init,
                     v_locations, LeaseWindow, with_lease)

INVALID_INIT = "Invalid initialization parameters"

S = harness.STRIPES
# Keys of stripe 0 (each is its own name at S = 1).
A, B, C, D, R, X, N = (harness.in_stripe0(k) for k in "abcdrxn")
K1, K2, K3, K4, N1, N2, N3, N4, N5, R1, R2, OLD, DEAD, NEW = (
    harness.in_stripe0(k) for k in ("k1", "k2", "k3", "k4", "n1", "n2", "n3", "n4", "n5",
                                    "r1", "r2", "old", "dead", "new"))


def not_initialized(rank):
    return "Rank %d not initialized" % rank


def alloc_confirm(c, rank, keys):
    """Allocate keys on rank, confirm them all; returns {key: page}."""
    pages = v_alloc(c, rank, keys)
    expect_true(all(p >= 0 for p in pages), "allocation failed: %r" % (pages,))
    v_confirm(c, rank, list(zip(keys, pages)))
    return dict(zip(keys, pages))


def stats_of(srv, rank=0, ns="kv"):
    return srv.stats()[(ns, rank)]


@contextlib.contextmanager
def four_pages(*flags, owned=()):
    """A server (flags) whose rank-0 pool has four pages in stripe 0 (4 * S
    in all), the keys of `owned` allocated and confirmed there: (server,
    client, {key: page})."""
    with Server(*flags) as srv:
        c = srv.client()
        v_init(c, 0, 4 * S)
        yield srv, c, alloc_confirm(c, 0, list(owned)) if owned else {}


# -- initialization ----------------------------------------------------------

def test_vllm_worker_initialize_answers_message_with_rank_and_pages():
    with Server() as srv:
        c = srv.client()
        r = c.post("/rank/3/initialize", {"role": "worker", "num_pages": 8})
        expect_json(r, 200, {"message": "Rank 3 initialized with 8 pages"})
        st = srv.stats()
        expect_true(("kv", 3) in st, "pool (kv, 3) should exist after initialize: %r" % st)
        expect_eq(pool_states(st, "kv", 3), (8, 8, 0, 0, 0, 0), "fresh pool states")


def test_vllm_worker_with_one_page_initializes():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 1)
        # stripe 0 holds the only page (the other stripes none)
        pages = v_alloc(c, 0, [A])
        expect_eq(pages, [0], "the only page of a 1-page pool")


def test_vllm_scheduler_initialize_succeeds_and_creates_no_pool():
    with Server() as srv:
        c = srv.client()
        for body in ({"role": "scheduler"}, {"role": "scheduler", "num_pages": 0},
                     {"role": "scheduler", "num_pages": 5}):
            r = c.post("/rank/0/initialize", body)
            expect_json(r, 200, {"message": "Scheduler role does not require initialization"})
        expect_eq(srv.stats(), {}, "pools after scheduler initialization")
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["a"]})
        expect_error(r, 404, not_initialized(0))


def test_vllm_initialize_without_role_defaults_to_worker():
    with Server() as srv:
        c = srv.client()
        r = c.post("/rank/0/initialize", {"num_pages": 4})
        expect_json(r, 200, {"message": "Rank 0 initialized with 4 pages"})
        expect_eq(stats_of(srv)["num_pages"], 4, "num_pages")


def test_vllm_initialize_rejects_every_invalid_parameter_with_exact_detail():
    bodies = [
        {},                                        # role defaults to worker, num_pages to 0
        {"role": "worker"},                        # num_pages defaults to 0
        {"role": "Worker", "num_pages": 8},        # misspelled role
        {"role": "WORKER", "num_pages": 8},
        {"role": "Scheduler"},
        {"role": "", "num_pages": 8},
        {"role": "client", "num_pages": 8},
        {"role": None, "num_pages": 8},
        {"role": 1, "num_pages": 8},
        {"role": ["worker"], "num_pages": 8},
        {"role": "worker", "num_pages": 0},
        {"role": "worker", "num_pages": -1},
        {"role": "worker", "num_pages": 1.5},
        {"role": "worker", "num_pages": 2.0},      # a float, even if integral
        {"role": "worker", "num_pages": "10"},
        {"role": "worker", "num_pages": True},
        {"role": "worker", "num_pages": False},
        {"role": "worker", "num_pages": None},
        {"role": "worker", "num_pages": [8]},
        {"role": "worker", "num_pages": {"n": 8}},
        {"role": "worker", "num_pages": 1001},     # above --max-pages
        {"role": "worker", "num_pages": 10 ** 30},
        {"role": "worker", "num_pages": 2 ** 64},
        {"role": "worker", "num_pages": 2 ** 64 + 8},  # wraps to 8 in a uint64
        {"num_pages": 0},
    ]
    raw_bodies = [
        b'{"role": "worker", "num_pages": 1e3}',
        b'{"role": "worker", "num_pages": 8.0e0}',
        b'{"role": "worker", "num_pages": -0}',
    ]
    with Server("--max-pages", "1000") as srv:
        c = srv.client()
        for body in bodies + raw_bodies:
            for path, full in (("/rank/0/initialize", body),
                               ("/initialize", None)):
                if full is None:
                    if isinstance(body, bytes):
                        full = b'{"rank": 0, ' + body[1:]
                    else:
                        full = dict(body, rank=0)
                r = c.post(path, full)
                try:
                    expect_error(r, 400, INVALID_INIT)
                except AssertionError as e:
                    raise AssertionError("POST %s %r: %s" % (path, full, e))
        expect_eq(srv.stats(), {}, "pools after rejected initializations")
        # the limit itself is accepted
        v_init(c, 0, 1000)


def test_vllm_initialize_alias_takes_rank_from_body():
    with Server() as srv:
        c = srv.client()
        r = c.post("/initialize", {"rank": 2, "role": "worker", "num_pages": 6})
        expect_json(r, 200, {"message": "Rank 2 initialized with 6 pages"})
        r = c.post("/initialize", {"rank": 0, "role": "scheduler"})
        expect_json(r, 200, {"message": "Scheduler role does not require initialization"})
        st = srv.stats()
        expect_eq(sorted(st), [("kv", 2)], "pools")
        expect_eq(st[("kv", 2)]["num_pages"], 6, "num_pages")
        expect_true(v_alloc(c, 2, ["a"])[0] in range(6), "rank 2 allocates")
        expect_error(c.post("/keys/batch_allocate", {"rank": 0, "keys": ["a"]}), 404,
                     not_initialized(0))


def test_vllm_billion_page_pool_initializes_without_a_per_page_array():
    with Server("--max-pages", "2000000000") as srv:
        c = srv.client()
        v_init(c, 0, 10 ** 9)
        v_init(c, 1, 10 ** 9)
        pages = v_alloc(c, 0, ["a", "b", "c"])
        expect_true(all(0 <= p < 10 ** 9 for p in pages) and len(set(pages)) == 3,
                    "pages distinct and in range: %r" % (pages,))
        p = stats_of(srv)
        expect_eq((p["num_pages"], p["free"], p["reserved"]), (10 ** 9, 10 ** 9 - 3, 3),
                  "(num_pages, free, reserved)")
        with open("/proc/%d/status" % srv.proc.pid) as f:
            rss_kb = [int(line.split()[1]) for line in f if line.startswith("VmRSS:")][0]
        sys.stdout.write("# server RSS %d KiB\n" % rss_kb)
        expect_true(rss_kb < 64 * 1024,
                    "server RSS %d MiB after two 10^9-page pools: a per-page array or bitmap?"
                    % (rss_kb // 1024))


def test_vllm_reinitialize_keeps_state_and_size():
    with four_pages() as (srv, c, _):
        owned = alloc_confirm(c, 0, [A, B])
        reserved = v_alloc(c, 0, [R])[0]
        before = pool_states(srv.stats(), "kv", 0)
        for n in (4 * S, 8 * S, 2 * S):
            r = c.post("/rank/0/initialize", {"role": "worker", "num_pages": n})
            body = expect_json(r, 200)
            expect_true(isinstance(body.get("message"), str)
                        and body["message"].startswith("Rank 0 initialized with"),
                        "re-initialize message: %r" % (body,))
        expect_eq(pool_states(srv.stats(), "kv", 0), before, "pool after re-initialize")
        expect_eq(v_locations(c, 0, [A, B]), [owned[A], owned[B]], "locations")
        # the reservation survived too: it can still be confirmed
        v_confirm(c, 0, [(R, reserved)])
        expect_eq(v_locations(c, 0, [R]), [reserved], "confirmed reservation")


def test_vllm_uninitialized_rank_answers_404_with_rank_in_text():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        expect_error(c.post("/keys/batch_allocate", {"rank": 5, "keys": [["a", ""]]}), 404,
                     not_initialized(5))
        expect_error(c.post("/keys/confirm_write", {"rank": 5, "confirmations": [["a", 0]]}),
                     404, not_initialized(5))
        expect_error(c.post("/keys/get_locations", {"rank": 7, "keys": ["a"]}), 404,
                     not_initialized(7))
        expect_eq(sorted(srv.stats()), [("kv", 0)], "no pool created by 404 requests")


def test_vllm_batch_exists_is_all_false_without_worker_ranks():
    with Server() as srv:
        c = srv.client()
        expect_eq(v_exists(c, ["a", "b"]), [False, False], "exists with no pool")
        expect_json(c.post("/rank/0/initialize", {"role": "scheduler"}), 200)
        expect_eq(v_exists(c, ["a"]), [False], "exists with only a scheduler")
        expect_eq(v_exists(c, []), [], "exists of no keys")


# -- batch_allocate ------------------------------------------------------------

def test_vllm_batch_allocate_accepts_pairs_and_bare_keys():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8 * S)
        keys = [[K1, "prefix"], K2, [K3, ""], K4]
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": keys})
        body = expect_json(r, 200)
        expect_eq(sorted(body), ["rank", "results"], "answer fields")
        expect_eq([x[0] for x in body["results"]], [K1, K2, K3, K4], "result keys")
        pages = [x[1] for x in body["results"]]
        expect_true(len(set(pages)) == 4 and all(0 <= p < 8 * S for p in pages),
                    "distinct pages in range: %r" % (pages,))
        p = stats_of(srv)
        expect_eq((p["free"], p["reserved"], p["owned"]), (8 * (S - 1) + 4, 4, 0),
                  "(free, reserved, owned)")


def test_vllm_batch_allocate_of_no_keys_answers_empty_results():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 2)
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": []})
        expect_json(r, 200, {"rank": 0, "results": []})


def test_vllm_owned_key_allocated_again_is_a_hit_on_its_page():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        owned = alloc_confirm(c, 0, ["a"])
        hits_before = stats_of(srv)["hits"]
        pages = v_alloc(c, 0, ["a", "a", ["a", "x"]])
        expect_eq(pages, [owned["a"]] * 3, "hit pages")
        p = stats_of(srv)
        expect_eq((p["reserved"], p["owned"], p["free"]), (0, 1, 3), "no new page for a hit")
        expect_true(p["hits"] > hits_before, "hits counter should grow: %r" % p)


def test_vllm_reserved_key_allocated_again_gets_another_page():
    with four_pages() as (srv, c, _):
        p1 = v_alloc(c, 0, [A])[0]
        p2 = v_alloc(c, 0, [A])[0]
        expect_true(p1 >= 0 and p2 >= 0 and p1 != p2, "two reservations: %r %r" % (p1, p2))
        expect_eq(stats_of(srv)["reserved"], 2, "reserved pages")


def test_vllm_repeated_key_in_one_request_gets_one_page():
    with four_pages() as (srv, c, _):
        pages = v_alloc(c, 0, [A, B, A, [A, "p"]])
        expect_eq(pages[0], pages[2], "repeated key")
        expect_eq(pages[0], pages[3], "repeated key")
        expect_true(pages[0] != pages[1], "distinct keys, distinct pages: %r" % pages)
        expect_eq(stats_of(srv)["reserved"], 2, "reserved pages")


def test_vllm_repeated_new_key_needs_only_one_free_page():
    with Server("--eviction", "none") as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        alloc_confirm(c, 0, [X])
        pages = v_alloc(c, 0, [N, N, N])
        expect_true(pages[0] >= 0 and pages == [pages[0]] * 3,
                    "one free page is enough for one key repeated: %r" % (pages,))


def test_vllm_allocate_is_all_or_nothing_when_pool_too_small_without_eviction():
    with four_pages("--eviction", "none", owned=[K1, K2, K3]) as (srv, c, owned):
        pages = v_alloc(c, 0, [K1, N1, N2])
        expect_eq(pages, [owned[K1], -1, -1], "hit keeps its page, new keys all -1")
        p = stats_of(srv)
        expect_eq((p["free"], p["reserved"], p["owned"]), (4 * (S - 1) + 1, 0, 3),
                  "nothing reserved by a refused all-or-nothing request")
        pages = v_alloc(c, 0, [N1])
        expect_true(pages[0] >= 0 and pages[0] not in owned.values(),
                    "the free page is still available: %r" % pages)


def test_vllm_allocate_is_all_or_nothing_when_owned_keys_are_read_leased():
    with four_pages("--eviction", "lru", owned=[K1, K2, K3]) as (srv, c, owned):
        expect_eq(v_exists(c, [K1, K2]), [True, True], "exists")           # read leases
        expect_eq(v_locations(c, 0, [K3]), [owned[K3]], "locations")       # read lease
        pages = v_alloc(c, 0, [N1, N2])
        expect_eq(pages, [-1, -1], "1 free page, 3 leased: two new keys cannot both fit")
        p = stats_of(srv)
        expect_eq((p["free"], p["reserved"], p["owned"], p["evictions"]),
                  (4 * (S - 1) + 1, 0, 3, 0), "(free, reserved, owned, evictions)")
        expect_eq(v_locations(c, 0, [K1, K2, K3]),
                  [owned[K1], owned[K2], owned[K3]], "leased keys kept")
        pages = v_alloc(c, 0, [N1])
        expect_true(pages[0] >= 0, "one key fits in the free page: %r" % pages)


def test_vllm_allocate_never_evicts_hits_of_the_same_request():
    with four_pages("--eviction", "lru", owned=[A, B, C, D]) as (srv, c, owned):
        # a is the least recently used, and a hit of this request: b, c, d can
        # be evicted (3 pages) but four new keys need 4 -> all -1.
        pages = v_alloc(c, 0, [A, N1, N2, N3, N4])
        expect_eq(pages, [owned[A], -1, -1, -1, -1], "all or nothing with a hit")
        p = stats_of(srv)
        expect_eq((p["reserved"], p["free"] + p["owned"]), (0, 4 * S), "no page leaked")
        expect_eq(v_locations(c, 0, [A]), [owned[A]], "hit not evicted")
        # three new keys fit by evicting b, c, d but never a
        pages = v_alloc(c, 0, [A, N1, N2, N3])
        expect_eq(pages[0], owned[A], "hit page")
        expect_true(sorted(pages[1:]) == sorted([owned[B], owned[C], owned[D]]),
                    "new keys take the pages of b, c, d: %r vs %r" % (pages, owned))
        expect_eq(v_locations(c, 0, [A, B, C, D]), [owned[A], None, None, None],
                  "a kept, b c d evicted")


def test_vllm_refused_all_or_nothing_allocation_evicts_nothing():
    with four_pages("--eviction", "lru", owned=[A, B, C, D]) as (srv, c, owned):
        pages = v_alloc(c, 0, [N1, N2, N3, N4, N5])
        expect_eq(pages, [-1] * 5, "five new keys never fit in four pages")
        expect_eq(v_locations(c, 0, [A, B, C, D]),
                  [owned[k] for k in (A, B, C, D)], "a refused request must not evict owned keys")
        expect_eq(stats_of(srv)["evictions"], 0, "evictions")


def test_vllm_allocate_evicts_least_recently_used_keys_first():
    with four_pages("--eviction", "lru", owned=[A, B, C, D]) as (srv, c, owned):
        v_alloc(c, 0, [A])                        # a hit is a use: b, c, d are now unused since
        pages = v_alloc(c, 0, [N1, N2])
        expect_true(sorted(pages) == sorted([owned[B], owned[C]]),
                    "n1, n2 take the pages of b and c: %r vs %r" % (pages, owned))
        # locations of a single rank: every key owned by rank 0 is complete
        expect_eq(v_locations(c, 0, [A, B, C, D]), [owned[A], None, None, owned[D]],
                  "b and c evicted")
        expect_eq(stats_of(srv)["evictions"], 2, "evictions")


def test_vllm_allocate_fits_exactly_the_free_pages():
    with four_pages("--eviction", "none", owned=[A, B]) as (srv, c, owned):
        pages = v_alloc(c, 0, [B, N1, N2])
        expect_eq(pages[0], owned[B], "hit")
        expect_true(len(set(pages)) == 3 and all(0 <= p < 4 * S for p in pages)
                    and not set(pages[1:]) & set(owned.values()),
                    "two new keys take the two free pages: %r" % pages)
        expect_eq(v_alloc(c, 0, [N3]), [-1], "pool full, no eviction")


def test_vllm_reserved_pages_are_never_evicted():
    with Server("--eviction", "lru") as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        pages = v_alloc(c, 0, [R1, R2])
        expect_true(sorted(pages) == [0, S], "both pages reserved: %r" % pages)
        expect_eq(v_alloc(c, 0, [N]), [-1], "reserved pages are not evictable")


# -- confirm_write and release -------------------------------------------------

def test_vllm_confirm_write_answers_204_and_makes_key_owned():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        p = v_alloc(c, 0, ["a"])[0]
        r = c.post("/keys/confirm_write", {"rank": 0, "confirmations": [["a", p]]})
        expect_no_body(r, 204)
        expect_eq(v_locations(c, 0, ["a"]), [p], "location after confirm")
        st = stats_of(srv)
        expect_eq((st["owned"], st["reserved"], st["keys"], st["confirmations"]), (1, 0, 1, 1),
                  "(owned, reserved, keys, confirmations)")


def test_vllm_batch_exists_true_only_when_every_worker_rank_owns_the_key():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        v_init(c, 1, 8)
        on0 = alloc_confirm(c, 0, ["both", "only0"])
        expect_eq(v_exists(c, ["both", "only0", "none"]), [False, False, False],
                  "nothing complete with only rank 0 owning")
        expect_eq(v_locations(c, 0, ["both", "only0"]), [None, None],
                  "locations null unless complete")
        on1 = alloc_confirm(c, 1, ["both"])
        expect_eq(v_exists(c, ["both", "only0", "none"]), [True, False, False], "exists")
        expect_eq(v_locations(c, 0, ["both", "only0", "none"]), [on0["both"], None, None],
                  "rank 0 locations")
        expect_eq(v_locations(c, 1, ["both", "only0", "none"]), [on1["both"], None, None],
                  "rank 1 locations")
        # a third rank joining makes nothing complete until it owns the key too
        v_init(c, 2, 8)
        expect_eq(v_exists(c, ["both"]), [False], "incomplete after rank 2 joined")
        alloc_confirm(c, 2, ["both"])
        expect_eq(v_exists(c, ["both"]), [True], "complete again")


def test_vllm_get_locations_is_null_for_reserved_unconfirmed_keys():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        v_alloc(c, 0, ["r"])
        expect_eq(v_locations(c, 0, ["r", "missing"]), [None, None], "locations")
        expect_eq(v_exists(c, ["r"]), [False], "exists")


def test_vllm_pages_to_release_frees_reserved_pages_after_the_release_grace():
    def scenario(grace):
        with Server("--eviction", "none", "--release-grace", str(grace)) as srv:
            c = srv.client()
            v_init(c, 0, 2 * S)
            pa, pb = v_alloc(c, 0, [A, B])
            w = LeaseWindow(grace)
            v_confirm(c, 0, [(A, pa)], release=[pb])
            st = stats_of(srv)
            during = v_alloc(c, 0, [C])
            w.fits()
            expect_eq((st["free"] + st["draining"], st["reserved"], st["owned"],
                       st["releases"]), (2 * (S - 1) + 1, 0, 1, 1),
                      "(free, reserved, owned, releases)")
            expect_eq(during, [-1], "the released page is not reused during the grace")
            w.sleep_past()
            expect_eq(v_alloc(c, 0, [C]), [pb], "the released page is the only free one")
            expect_eq(v_exists(c, [B]), [False], "released key is not present")
    with_lease(scenario, 0.3)


def test_vllm_confirm_write_without_pages_to_release_is_accepted():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        p = v_alloc(c, 0, [A])[0]
        r = c.post("/keys/confirm_write", {"rank": 0, "confirmations": [[A, p]]})
        expect_no_body(r, 204)
        r = c.post("/keys/confirm_write", {"rank": 0, "confirmations": [],
                                          "pages_to_release": []})
        expect_no_body(r, 204)
        expect_eq(v_locations(c, 0, [A]), [p], "location")


def test_vllm_release_of_owned_or_free_page_changes_nothing():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        owned = alloc_confirm(c, 0, ["a"])
        free_page = [p for p in range(4) if p != owned["a"]][0]
        v_confirm(c, 0, [], release=[owned["a"], free_page])
        expect_eq(v_locations(c, 0, ["a"]), [owned["a"]], "owned key kept")
        st = stats_of(srv)
        expect_eq((st["free"], st["owned"], st["reserved"]), (3, 1, 0), "(free, owned, reserved)")
        expect_eq(st["refused_releases"]["owned"], 1, "refused release of an owned page")
        expect_eq(st["refused_releases"]["not_reserved"], 1, "refused release of a free page")


def test_vllm_confirmations_are_applied_before_releases():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        p = v_alloc(c, 0, [A])[0]
        v_confirm(c, 0, [(A, p)], release=[p])
        expect_eq(v_locations(c, 0, [A]), [p], "confirmed in the same request it is released")
        expect_eq(stats_of(srv)["refused_releases"]["owned"], 1, "release refused as owned")


def test_vllm_confirming_a_second_page_for_an_owned_key_keeps_the_first():
    with four_pages() as (srv, c, _):
        p1 = v_alloc(c, 0, [A])[0]
        p2 = v_alloc(c, 0, [A])[0]
        expect_true(p1 != p2, "two reservations")
        v_confirm(c, 0, [(A, p1)])
        v_confirm(c, 0, [(A, p2)])
        expect_eq(v_locations(c, 0, [A]), [p1], "the first confirmed page is kept")
        st = stats_of(srv)
        expect_eq((st["owned"], st["reserved"], st["free"]), (1, 0, 4 * (S - 1) + 3),
                  "the other page freed")
        # and the freed page is really free: it can be handed out and confirmed
        pb = v_alloc(c, 0, [B, C, D])
        expect_true(-1 not in pb and p1 not in pb, "three free pages: %r" % pb)


def test_vllm_reconfirming_an_owned_page_is_a_harmless_noop():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        owned = alloc_confirm(c, 0, ["a"])
        before = pool_states(srv.stats(), "kv", 0)
        v_confirm(c, 0, [("a", owned["a"])])
        pages = v_alloc(c, 0, ["a"])          # the client rewrites and re-confirms hits
        v_confirm(c, 0, [("a", pages[0])])
        expect_eq(pool_states(srv.stats(), "kv", 0), before, "pool unchanged")
        expect_eq(v_locations(c, 0, ["a"]), [owned["a"]], "location")
        st = stats_of(srv)
        expect_eq(sum(st["refused_confirmations"].values()), 0, "nothing refused")


def test_vllm_confirm_for_a_page_reserved_for_another_key_is_refused():
    with four_pages() as (srv, c, _):
        pa, pb = v_alloc(c, 0, [A, B])
        v_confirm(c, 0, [(B, pa)])
        expect_eq(v_locations(c, 0, [A, B]), [None, None], "nobody owns anything")
        st = stats_of(srv)
        expect_eq((st["reserved"], st["owned"]), (2, 0), "(reserved, owned)")
        expect_eq(st["refused_confirmations"]["other_key"], 1, "refused other_key")
        v_confirm(c, 0, [(A, pa), (B, pb)])
        expect_eq(v_locations(c, 0, [A, B]), [pa, pb], "the right pairs are accepted")


def test_vllm_confirm_for_an_owned_page_of_another_key_is_refused():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        owned = alloc_confirm(c, 0, ["a"])
        v_confirm(c, 0, [("b", owned["a"])])
        expect_eq(v_locations(c, 0, ["a", "b"]), [owned["a"], None], "a keeps its page")
        st = stats_of(srv)
        expect_eq(sum(st["refused_confirmations"].values()), 1, "one refusal counted")


def test_vllm_confirm_of_out_of_range_or_free_page_is_refused_and_counted():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        v_confirm(c, 0, [("a", 4), ("b", 1000), ("c", -1)])
        st = stats_of(srv)
        expect_eq(st["refused_confirmations"]["out_of_range"], 3, "out of range refusals")
        v_confirm(c, 0, [("d", 0)])                   # page 0 is free: not reserved
        st = stats_of(srv)
        expect_eq(st["refused_confirmations"]["not_reserved"], 1, "not_reserved refusals")
        expect_eq(pool_states(srv.stats(), "kv", 0), (4, 4, 0, 0, 0, 0), "pool unchanged")
        v_confirm(c, 0, [], release=[4, -1])
        expect_eq(stats_of(srv)["refused_releases"]["out_of_range"], 2, "refused releases")


def test_vllm_clear_forgets_every_pool_and_key():
    with four_pages() as (srv, c, _):
        v_init(c, 1, 4 * S)
        a0 = alloc_confirm(c, 0, [A])
        alloc_confirm(c, 1, [A])
        r0 = v_alloc(c, 0, [R])[0]
        expect_eq(v_exists(c, [A]), [True], "complete before clear")
        expect_no_body(c.post("/clear"), 204)
        expect_eq(srv.stats(), {}, "pools after clear")
        expect_error(c.post("/keys/batch_allocate", {"rank": 0, "keys": ["a"]}), 404,
                     not_initialized(0))
        expect_error(c.post("/keys/get_locations", {"rank": 1, "keys": ["a"]}), 404,
                     not_initialized(1))
        expect_eq(v_exists(c, [A]), [False], "exists after clear")
        # workers initialize again: the old confirmation is refused
        v_init(c, 0, 4 * S)
        v_confirm(c, 0, [(R, r0), (A, a0[A])])
        expect_eq(v_locations(c, 0, [R, A]), [None, None], "old pages are not confirmable")
        expect_eq(pool_states(srv.stats(), "kv", 0), (4 * S, 4 * S, 0, 0, 0, 0), "fresh pool")
        expect_no_body(c.post("/clear", {}), 204)


def test_vllm_format_errors_have_exact_details():
    need_keys = "Invalid request format: need 'rank' and 'keys'"
    need_conf = "Invalid request format: need 'rank' and 'confirmations'"
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4)
        cases = [
            ("/keys/batch_allocate", {"keys": ["a"]}, need_keys),
            ("/keys/batch_allocate", {"rank": 0}, need_keys),
            ("/keys/batch_allocate", {"rank": 0, "keys": "a"}, need_keys),
            ("/keys/batch_allocate", {"rank": 0, "keys": None}, need_keys),
            ("/keys/batch_allocate", {"rank": 0, "keys": {"a": 1}}, need_keys),
            ("/keys/get_locations", {"keys": ["a"]}, need_keys),
            ("/keys/get_locations", {"rank": 0, "keys": "a"}, need_keys),
            ("/keys/confirm_write", {"confirmations": []}, need_conf),
            ("/keys/confirm_write", {"rank": 0}, need_conf),
            ("/keys/confirm_write", {"rank": 0, "confirmations": "a"}, need_conf),
            ("/keys/batch_exists", {"keys": "a"}, "Invalid keys format"),
            ("/keys/batch_exists", {"keys": 5}, "Invalid keys format"),
            ("/keys/batch_exists", {"keys": {"a": True}}, "Invalid keys format"),
        ]
        for path, body, detail in cases:
            try:
                expect_error(c.post(path, body), 400, detail)
            except AssertionError as e:
                raise AssertionError("POST %s %r: %s" % (path, body, e))
        expect_eq(pool_states(srv.stats(), "kv", 0), (4, 4, 0, 0, 0, 0), "pool unchanged")


def test_vllm_true_false_a_fraction_or_a_string_is_refused_as_a_page_number():
    """A confirmation's page or a page to release of true, false, 1.5 or "3" is a
    400 naming the field, and confirms or releases nothing."""
    with four_pages() as (srv, c, _):
        pa, pb = v_alloc(c, 0, [A, B])
        harness.expect_page_numbers_refused(c, "/keys/confirm_write", {"rank": 0},
                                            "confirmations", A)
        expect_eq(pool_states(srv.stats(), "kv", 0)[2:5], (2, 0, 0),
                  "(reserved, owned, draining) after the refusals")
        v_confirm(c, 0, [(A, pa)], release=[pb])
        expect_eq(v_locations(c, 0, [A, B]), [pa, None], "the same with integers")


def test_vllm_rank_outside_configured_range_is_400():
    with Server("--max-ranks", "4") as srv:
        c = srv.client()
        v_init(c, 3, 2)
        for path, body in [
            ("/rank/4/initialize", {"role": "worker", "num_pages": 2}),
            ("/initialize", {"rank": 4, "role": "worker", "num_pages": 2}),
            ("/initialize", {"rank": -1, "role": "worker", "num_pages": 2}),
            ("/keys/batch_allocate", {"rank": 4, "keys": ["a"]}),
            ("/keys/batch_allocate", {"rank": -1, "keys": ["a"]}),
            ("/keys/confirm_write", {"rank": 4, "confirmations": []}),
            ("/keys/get_locations", {"rank": 4, "keys": ["a"]}),
        ]:
            try:
                expect_error(c.post(path, body), 400)
            except AssertionError as e:
                raise AssertionError("POST %s %r: %s" % (path, body, e))
        expect_eq(sorted(srv.stats()), [("kv", 3)], "pools")


def test_vllm_incomplete_keys_are_evicted_before_older_complete_ones():
    # docs/protocol.md: when one rank loses a key, the other ranks' pages for it are
    # dead weight and go first on eviction.
    with Server("--eviction", "lru", "--read-lease", "0") as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        v_init(c, 1, 2 * S)
        on1 = {}
        for rank in (0, 1):
            on1 = alloc_confirm(c, rank, [OLD, DEAD])    # "old" is the least recently used key
        expect_eq(v_exists(c, [OLD, DEAD]), [True, True], "both complete")
        expect_no_body(c.post("/0/delete_keys", {"keys": [DEAD]}), 204)
        expect_eq(v_exists(c, [OLD, DEAD]), [True, False], "dead is incomplete")
        pages = v_alloc(c, 1, [NEW])
        expect_eq(pages, [on1[DEAD]], "the incomplete key's page is reused first")
        expect_eq(v_exists(c, [OLD]), [True], "the complete key survives")


def test_vllm_keys_are_echoed_exactly_and_never_collide():
    # keys that differ only after a NUL, in case, in Unicode normalization,
    # or by escapes: each is its own key with its own page, echoed exactly
    keys = ["a", "A", "a\u0000b", "a\u0000c", "\u00e9t\u00e9", "e\u0301t\u00e9",
            "\U0001F600", "tab\there", 'quote"back\\slash', "/", "\u2028"]
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 32)
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": keys})
        body = expect_json(r, 200)
        expect_eq([x[0] for x in body["results"]], keys, "keys echoed exactly")
        r2 = c.post("/keys/batch_allocate",
                    json.dumps({"rank": 0, "keys": keys}, ensure_ascii=False).encode("utf-8"))
        expect_eq([x[0] for x in expect_json(r2, 200)["results"]], keys,
                  "keys sent as raw UTF-8 echoed exactly")
        pages = [x[1] for x in body["results"]]
        expect_true(len(set(pages)) == len(keys) and min(pages) >= 0,
                    "distinct keys, distinct pages: %r" % pages)
        v_confirm(c, 0, list(zip(keys, pages)))
        expect_eq(v_locations(c, 0, keys), pages, "each key finds its own page")
        expect_eq(v_locations(c, 0, ["a\u0000", "a\u0000bc", "\u00e9t", "a "]), [None] * 4,
                  "prefixes and extensions are other keys")


def test_vllm_limits_accept_exactly_max_keys_and_max_key_bytes():
    with Server("--max-keys", "4", "--max-key-bytes", "8") as srv:
        c = srv.client()
        v_init(c, 0, 16)
        pages = v_alloc(c, 0, ["k1", "k2", "k3", "12345678"])
        expect_true(min(pages) >= 0, "4 keys of up to 8 bytes: %r" % pages)
        pages = v_alloc(c, 0, ["\u00e9" * 4])            # 8 bytes of UTF-8
        expect_true(pages[0] >= 0, "a key of 4 two-byte characters is 8 bytes")
        for keys in (["a", "b", "c", "d", "e"], ["123456789"], ["\u00e9" * 4 + "x"]):
            expect_error(c.post("/keys/batch_allocate", {"rank": 0, "keys": keys}), (400, 413))
            expect_error(c.post("/keys/batch_exists", {"keys": keys}), (400, 413))
        expect_eq(stats_of(srv)["reserved"], 5, "rejected requests reserved nothing")


def test_vllm_successful_answers_are_json():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 2)
        for path, body in [("/keys/batch_allocate", {"rank": 0, "keys": ["a"]}),
                           ("/keys/batch_exists", {"keys": ["a"]}),
                           ("/keys/get_locations", {"rank": 0, "keys": ["a"]}),
                           ("/rank/0/initialize", {"role": "scheduler"})]:
            expect_json(c.post(path, body), 200)
        srv.check()


if __name__ == "__main__":
    harness.main(globals())

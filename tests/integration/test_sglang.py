#!/usr/bin/python3
"""The SGLang dialect (docs/protocol.md "The SGLang dialect"): every route,
namespaces, existed flags, partial allocation, delete and clear, 404 text,
and the state it shares with the vLLM dialect in namespace "kv".

Over Redis with stripes, the tests that count pages or expect page numbers
use keys of stripe 0 and pools S times as large (harness.in_stripe0)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (Server, expect_eq, expect_error, expect_json, expect_no_body,  # noqa: E402
                     expect_true, pool_states, s_alloc, s_clear, s_confirm, s_delete,
                     s_exists, s_init, s_pages, raw_request, v_alloc, v_confirm, v_exists, v_init,
                     v_locations)

S = harness.STRIPES
# Keys of stripe 0 (each is its own name at S = 1).
A, B, C, D, E, K, R, X, Y, Z = (harness.in_stripe0(k) for k in "abcdekrxyz")
O1, O2, N1, N2, N3, ONLY_A, RESERVED = (
    harness.in_stripe0(k) for k in ("o1", "o2", "n1", "n2", "n3", "only-a", "reserved"))


def not_initialized(rank, ns="kv"):
    return ("Rank %d namespace '%s' not initialized. Please call /%d/initialize first."
            % (rank, ns, rank))


def alloc_confirm(c, rank, keys, ns=None):
    got = s_alloc(c, rank, keys, ns)
    pages = [p for _, p in got]
    expect_true(all(p >= 0 for p in pages), "allocation failed: %r" % (got,))
    s_confirm(c, rank, list(zip(keys, pages)), ns=ns)
    return dict(zip(keys, pages))


def test_sglang_initialize_answers_204_without_body():
    with Server() as srv:
        c = srv.client()
        r = c.post("/0/initialize", {"num_pages": 8})
        expect_no_body(r, 204)
        r = c.post("/5/initialize", {"num_pages": 3, "namespace": "other"})
        expect_no_body(r, 204)
        st = srv.stats()
        expect_eq(sorted(st), [("kv", 0), ("other", 5)], "pools")
        expect_eq(pool_states(st, "kv", 0), (8, 8, 0, 0, 0, 0), "kv/0")
        expect_eq(pool_states(st, "other", 5), (3, 3, 0, 0, 0, 0), "other/5")


def test_sglang_initialize_with_zero_pages_gives_a_pool_that_allocates_nothing():
    with Server() as srv:
        c = srv.client()
        expect_no_body(c.post("/0/initialize", {"num_pages": 0}), 204)
        expect_eq(s_alloc(c, 0, ["a", "b"]), [(False, -1), (False, -1)], "allocation")
        expect_eq(s_exists(c, 0, ["a"]), [False], "exists")
        expect_eq(s_pages(c, 0, ["a"]), [None], "get_page_indices")


def test_sglang_initialize_rejects_invalid_num_pages():
    with Server("--max-pages", "100") as srv:
        c = srv.client()
        for body in [{"num_pages": -1}, {"num_pages": 1.5}, {"num_pages": "8"},
                     {"num_pages": True}, {"num_pages": None}, {"num_pages": [8]},
                     {"num_pages": 101}, {"num_pages": 10 ** 30},
                     {"num_pages": 8, "namespace": 5}, {"num_pages": 8, "namespace": ["a"]}]:
            try:
                expect_error(c.post("/0/initialize", body), 400)
            except AssertionError as e:
                raise AssertionError("%r: %s" % (body, e))
        expect_eq(srv.stats(), {}, "no pool created")


def test_sglang_initialize_is_idempotent_and_keeps_state():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        owned = alloc_confirm(c, 0, ["a"])
        s_init(c, 0, 4)
        s_init(c, 0, 16)
        expect_eq(pool_states(srv.stats(), "kv", 0), (4, 3, 0, 1, 0, 1), "pool unchanged")
        expect_eq(s_pages(c, 0, ["a"]), [owned["a"]], "key kept")


def test_sglang_allocation_reports_existed_flags_for_hits():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 8 * S)
        first = s_alloc(c, 0, [[A, ""], [B, A]])
        expect_eq([e for e, _ in first], [False, False], "existed flags of new keys")
        pa, pb = [p for _, p in first]
        expect_true(pa != pb and 0 <= pa < 8 * S and 0 <= pb < 8 * S, "pages %r" % first)
        s_confirm(c, 0, [(A, pa), (B, pb)])
        second = s_alloc(c, 0, [A, C, B])
        expect_eq(second[0], (True, pa), "a is a hit")
        expect_eq(second[2], (True, pb), "b is a hit")
        expect_true(second[1][0] is False and second[1][1] not in (-1, pa, pb),
                    "c is new: %r" % (second,))
        st = srv.stats()[("kv", 0)]
        expect_eq((st["owned"], st["reserved"]), (2, 1), "(owned, reserved)")


def test_sglang_allocation_is_partial_when_pool_too_small():
    with Server("--eviction", "none") as srv:
        c = srv.client()
        s_init(c, 0, 3 * S)
        got = s_alloc(c, 0, [A, B, C, D, E])
        pages = [p for _, p in got]
        expect_true(all(e is False for e, _ in got), "no hits: %r" % got)
        expect_true(sorted(pages[:3]) == [0, S, 2 * S] and pages[3:] == [-1, -1],
                    "keys in order take the 3 pages, the rest -1: %r" % pages)
        st = srv.stats()[("kv", 0)]
        expect_eq((st["free"], st["reserved"]), (3 * (S - 1), 3), "(free, reserved)")
        # the client releases what it does not use; nothing leaks
        s_confirm(c, 0, [(A, pages[0])], release=pages[1:3])
        # released pages drain for the release grace (a replayed release finds them
        # DRAINING), then become free
        expect_eq(pool_states(srv.stats(), "kv", 0), (3 * S, 3 * (S - 1), 0, 1, 2, 1),
                  "after release")


def test_sglang_partial_allocation_evicts_unused_keys_for_what_it_can():
    with Server("--eviction", "clock") as srv:
        c = srv.client()
        s_init(c, 0, 3 * S)
        owned = alloc_confirm(c, 0, [O1, O2])
        s_exists(c, 0, [O2])                      # read lease on o2
        got = s_alloc(c, 0, [N1, N2, N3])
        pages = [p for _, p in got]
        expect_eq(pages.count(-1), 1, "one free + one evictable page for three keys: %r" % got)
        expect_eq(pages[2], -1, "keys are served in order")
        expect_true(owned[O1] in pages, "o1 was evicted for a new key: %r" % got)
        expect_eq(s_pages(c, 0, [O1, O2]), [None, owned[O2]], "leased key kept")


def test_sglang_repeated_key_in_one_request_gets_one_page():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        got = s_alloc(c, 0, [A, B, A, A])
        expect_eq(got[0], got[2], "repeated key")
        expect_eq(got[0], got[3], "repeated key")
        expect_true(got[0][1] != got[1][1] and got[0][1] >= 0, "distinct keys: %r" % got)
        expect_eq(srv.stats()[("kv", 0)]["reserved"], 2, "reserved")


def test_sglang_exists_is_per_pool_and_true_only_for_owned_keys():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        s_init(c, 1, 4 * S)
        alloc_confirm(c, 0, [A])
        s_alloc(c, 0, [RESERVED])
        expect_eq(s_exists(c, 0, [A, RESERVED, "missing"]), [True, False, False], "rank 0")
        expect_eq(s_exists(c, 1, [A]), [False], "rank 1 does not own a")
        expect_eq(s_exists(c, 0, []), [], "no keys")


def test_sglang_get_page_indices_gives_pages_and_nulls():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        owned = alloc_confirm(c, 0, [A, B])
        s_alloc(c, 0, [RESERVED])
        expect_eq(s_pages(c, 0, [B, "missing", RESERVED, A, B]),
                  [owned[B], None, None, owned[A], owned[B]], "indices")


def test_sglang_namespaces_with_the_same_rank_are_isolated():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S, ns="A")
        s_init(c, 0, 4 * S, ns="B")
        a = alloc_confirm(c, 0, [K, ONLY_A], ns="A")
        expect_eq(s_exists(c, 0, [K, ONLY_A], ns="B"), [False, False], "B sees nothing")
        expect_eq(s_pages(c, 0, [K], ns="B"), [None], "B has no page for k")
        got = s_alloc(c, 0, [K], ns="B")
        expect_eq(got[0][0], False, "k is new in B")
        s_confirm(c, 0, [(K, got[0][1])], ns="B")
        s_delete(c, 0, [K], ns="B")
        expect_eq(s_pages(c, 0, [K, ONLY_A], ns="A"), [a[K], a[ONLY_A]],
                  "delete in B leaves A alone")
        alloc_confirm(c, 0, [X], ns="B")
        s_clear(c, 0, ns="B")
        expect_eq(s_exists(c, 0, [K, ONLY_A], ns="A"), [True, True],
                  "clear of B leaves A alone")
        st = srv.stats()
        expect_eq(pool_states(st, "A", 0)[3], 2, "A owned")
        expect_eq(pool_states(st, "B", 0)[3], 0, "B owned")
        expect_true(("kv", 0) not in st, "no kv pool was created: %r" % sorted(st))
        # a namespace that was not initialized is a 404 naming it
        expect_error(c.post("/0/exists", {"keys": ["k"], "namespace": "C"}), 404,
                     not_initialized(0, "C"))


def test_sglang_uninitialized_pool_answers_404_with_exact_text_on_every_route():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4, ns="other")
        routes = [
            ("exists", {"keys": ["a"]}),
            ("reserve_and_allocate_page_indices", {"keys": [["a", ""]]}),
            ("confirm_write", {"written_keys_to_confirm": [["a", 0]], "pages_to_release": []}),
            ("delete_keys", {"keys": ["a"]}),
            ("clear", {}),
            ("get_page_indices", {"keys": ["a"]}),
        ]
        for route, body in routes:
            for rank, ns in ((3, None), (0, None), (0, "missing")):
                b = dict(body)
                if ns is not None:
                    b["namespace"] = ns
                r = c.post("/%d/%s" % (rank, route), b)
                try:
                    expect_error(r, 404, not_initialized(rank, ns or "kv"))
                except AssertionError as e:
                    raise AssertionError("/%d/%s %r: %s" % (rank, route, b, e))
        expect_eq(sorted(srv.stats()), [("other", 0)], "no pool created by 404 requests")


def test_sglang_delete_keys_frees_their_pages():
    with Server("--eviction", "none") as srv:
        c = srv.client()
        s_init(c, 0, 3 * S)
        owned = alloc_confirm(c, 0, [A, B, C])
        expect_no_body(c.post("/0/delete_keys", {"keys": [A, "missing", C, A]}), 204)
        st = srv.stats()
        expect_eq(pool_states(st, "kv", 0), (3 * S, 3 * (S - 1) + 2, 0, 1, 0, 1),
                  "after delete")
        expect_eq(s_pages(c, 0, [A, B, C]), [None, owned[B], None], "indices")
        got = s_alloc(c, 0, [X, Y])
        expect_eq(sorted(p for _, p in got), sorted([owned[A], owned[C]]),
                  "the deleted pages are free again")


def test_sglang_clear_frees_every_page_with_empty_object_or_empty_body():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        for body in ({}, b"", None):
            alloc_confirm(c, 0, [A, B])
            s_alloc(c, 0, [R])
            if body is not None:
                expect_no_body(c.post("/0/clear", body), 204)
            else:
                # no Content-Length and no Transfer-Encoding at all: an empty body
                with srv.raw() as raw:
                    raw.send(raw_request("POST", "/0/clear", content_length=False))
                    resp = raw.read_response()
                    expect_eq(resp.status, 204, "clear without Content-Length")
            expect_eq(pool_states(srv.stats(), "kv", 0), (4 * S, 4 * S, 0, 0, 0, 0),
                      "pool after clear with body %r" % (body,))
            expect_eq(s_exists(c, 0, [A, B, R]), [False] * 3, "exists after clear")
        # still initialized: no 404
        expect_eq(s_alloc(c, 0, [Z])[0][0], False, "allocation after clear")


def test_sglang_late_confirm_after_clear_is_refused():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 2 * S)
        p = s_alloc(c, 0, [A])[0][1]
        s_clear(c, 0)
        s_confirm(c, 0, [(A, p)])
        expect_eq(s_pages(c, 0, [A]), [None], "late confirm refused")
        st = srv.stats()[("kv", 0)]
        expect_eq(st["refused_confirmations"]["not_reserved"], 1, "refusal counted")
        expect_eq(pool_states(srv.stats(), "kv", 0), (2 * S, 2 * S, 0, 0, 0, 0), "pool")


def test_sglang_confirm_write_lists_are_optional():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        pa, pb = [p for _, p in s_alloc(c, 0, [A, B])]
        expect_no_body(c.post("/0/confirm_write", {}), 204)
        expect_no_body(c.post("/0/confirm_write", {"written_keys_to_confirm": [[A, pa]]}), 204)
        expect_no_body(c.post("/0/confirm_write", {"pages_to_release": [pb]}), 204)
        expect_eq(pool_states(srv.stats(), "kv", 0), (4 * S, 4 * (S - 1) + 2, 0, 1, 1, 1),
                  "pool (released: draining)")
        expect_eq(s_pages(c, 0, [A, B]), [pa, None], "indices")


def test_sglang_true_false_a_fraction_or_a_string_is_refused_as_a_page_number():
    """written_keys_to_confirm's page or a page to release of true, false, 1.5 or
    "3" is a 400 naming the field, and confirms or releases nothing."""
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        pa, pb = [p for _, p in s_alloc(c, 0, [A, B])]
        harness.expect_page_numbers_refused(c, "/0/confirm_write", {},
                                            "written_keys_to_confirm", A)
        states = pool_states(srv.stats(), "kv", 0)
        expect_eq((states[2], states[3], states[4]), (2, 0, 0),
                  "reserved, owned and draining pages after the refusals")
        s_confirm(c, 0, [(A, pa)], release=[pb])
        expect_eq(s_pages(c, 0, [A, B]), [pa, None], "confirmed and released with integers")


def test_sglang_confirm_then_release_in_one_request():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        pa, pb = [p for _, p in s_alloc(c, 0, [A, B])]
        s_confirm(c, 0, [(A, pa)], release=[pa, pb])
        expect_eq(s_pages(c, 0, [A, B]), [pa, None], "a confirmed, b released")
        st = srv.stats()[("kv", 0)]
        expect_eq((st["owned"], st["free"], st["reserved"], st["draining"]),
                  (1, 4 * (S - 1) + 2, 0, 1),
                  "(owned, free, reserved, draining: the released page)")
        expect_eq(st["refused_releases"]["owned"], 1, "release of an owned page refused")


def test_sglang_and_vllm_share_the_kv_namespace():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        # vLLM writes, SGLang sees
        vp = v_alloc(c, 0, ["v"])[0]
        v_confirm(c, 0, [("v", vp)])
        expect_eq(s_exists(c, 0, ["v"]), [True], "SGLang exists sees the vLLM key")
        expect_eq(s_pages(c, 0, ["v"]), [vp], "SGLang get_page_indices")
        expect_eq(s_alloc(c, 0, ["v"]), [(True, vp)], "SGLang hit on the vLLM key")
        # SGLang writes, vLLM sees (rank 0 is the only worker rank: complete)
        s = alloc_confirm(c, 0, ["s"])
        expect_eq(v_exists(c, ["s", "v"]), [True, True], "vLLM exists")
        expect_eq(v_locations(c, 0, ["s"]), [s["s"]], "vLLM locations")
        expect_eq(v_alloc(c, 0, ["s"]), [s["s"]], "vLLM hit on the SGLang key")
        # an SGLang initialize of rank 1 in kv is a worker rank for completeness
        s_init(c, 1, 4)
        expect_eq(v_exists(c, ["s"]), [False], "incomplete after SGLang initialized rank 1")
        alloc_confirm(c, 1, ["s"])
        expect_eq(v_exists(c, ["s"]), [True], "complete again")
        # another namespace does not count for completeness
        s_init(c, 2, 4, ns="elsewhere")
        expect_eq(v_exists(c, ["s"]), [True], "other namespaces do not matter")
        # SGLang delete on kv makes the key incomplete for vLLM
        s_delete(c, 1, ["s"])
        expect_eq(v_exists(c, ["s"]), [False], "incomplete after delete on rank 1")
        expect_eq(v_locations(c, 0, ["s"]), [None], "no location when incomplete")
        # vLLM /clear forgets every pool of every namespace
        expect_no_body(c.post("/clear"), 204)
        expect_error(c.post("/0/exists", {"keys": ["v"]}), 404, not_initialized(0))
        expect_error(c.post("/2/exists", {"keys": ["v"], "namespace": "elsewhere"}), 404,
                     not_initialized(2, "elsewhere"))
        srv.check()


def test_sglang_successful_answers_are_json():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 2)
        for route, body in [("exists", {"keys": ["a"]}),
                            ("get_page_indices", {"keys": ["a"]}),
                            ("reserve_and_allocate_page_indices", {"keys": [["a", ""]]})]:
            expect_json(c.post("/0/" + route, body), 200)
        srv.check()


if __name__ == "__main__":
    harness.main(globals())

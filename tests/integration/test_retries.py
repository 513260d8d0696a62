#!/usr/bin/python3
"""Requests that arrive more than once.

Both stock clients mount Retry(total=3, backoff_factor=0.3,
status_forcelist=[500, 502, 503, 504], allowed_methods=["GET", "POST"]): a
POST is sent again after a 5xx of that list and after a connection that
broke once the server had answered. Here each change is sent, its answer
thrown away with the connection, and sent again, as such a client would:
the second copy must change nothing that matters.

Over Redis with stripes (HF3FS_TEST_STRIPES) the keys are all of stripe 0
and the pools S times as large, so that stripe 0 has the pages each test
counts and the replays meet the same stripe (harness.in_stripe0).
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (LeaseWindow, Server, expect_eq, expect_true, pool_states,  # noqa: E402
                     raw_request, s_alloc, s_confirm, s_init, s_pages, v_alloc, v_confirm,
                     v_init, v_locations, with_lease)

S = harness.STRIPES
A, B, C, X, Y = (harness.in_stripe0(k) for k in "abcxy")


def send_and_drop(srv, path, body):
    """Send a POST, let the server answer, and close without reading: the
    client saw a broken connection and will send it again."""
    with srv.raw() as conn:
        conn.send(raw_request("POST", path, body, {"Content-Type": "application/json"}))
        conn.read_response()  # the server answered; the client never saw it


def test_a_replayed_confirmation_is_harmless():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 4 * S)
        page = v_alloc(c, 0, [A])[0]
        body = {"rank": 0, "confirmations": [[A, page]]}
        send_and_drop(srv, "/keys/confirm_write", body)
        before = pool_states(srv.stats(), "kv", 0)
        v_confirm(c, 0, [(A, page)])  # the retry
        expect_eq(pool_states(srv.stats(), "kv", 0), before, "pool after the replay")
        expect_eq(v_locations(c, 0, [A]), [page], "a keeps its page")
        srv.check()


def test_a_replayed_release_cannot_free_the_page_of_a_later_writer():
    def scenario(grace):
        with Server("--release-grace", str(grace)) as srv:
            c = srv.client()
            s_init(c, 0, 1 * S)
            page = s_alloc(c, 0, [A])[0][1]
            body = {"written_keys_to_confirm": [], "pages_to_release": [page]}
            w = LeaseWindow(grace)
            send_and_drop(srv, "/0/confirm_write", body)
            during = s_alloc(c, 0, [B])
            s_confirm(c, 0, release=[page])  # the replay
            after_replay = pool_states(srv.stats(), "kv", 0)[1:5]
            w.fits()
            # During the grace nobody gets the page, and the replay is refused.
            expect_eq(during, [(False, -1)], "the released page waits for the grace")
            expect_eq(after_replay, (S - 1, 0, 0, 1),
                      "(free, reserved, owned, draining) after the replay")
            w.sleep_past()
            expect_eq(s_alloc(c, 0, [B]), [(False, page)], "after the grace the page is reused")
            s_confirm(c, 0, [(B, page)])
            expect_eq(s_pages(c, 0, [B]), [page], "b owns it")
            srv.check()
    with_lease(scenario, 0.5)


def test_a_replayed_allocation_only_reserves_pages_that_expire():
    def scenario(lease):
        with Server("--reservation-timeout", str(lease)) as srv:
            c = srv.client()
            v_init(c, 0, 4 * S)
            w = LeaseWindow(lease)
            send_and_drop(srv, "/keys/batch_allocate", {"rank": 0, "keys": [A, B]})
            pages = v_alloc(c, 0, [A, B])  # the retry: other pages, the first ones leak...
            states = pool_states(srv.stats(), "kv", 0)[1:3]
            v_confirm(c, 0, [(A, pages[0]), (B, pages[1])])
            w.fits()
            expect_eq(states, (4 * (S - 1), 4), "(free, reserved) after the retry")
            srv.check()
            w.sleep_past()  # ...until their reservation lease runs out
            expect_eq(v_alloc(c, 0, [C]) != [-1], True, "a page is free again")
            st = srv.stats()[("kv", 0)]
            expect_eq(st["expired_reservations"], 2, "the replay's reservations expired")
            expect_eq(v_locations(c, 0, [A, B]), pages, "what the client confirmed stays")
            srv.check()
    with_lease(scenario, 0.3)


def test_a_replayed_vllm_allocation_with_hits_keeps_them_protected_until_the_lease_bound():
    def scenario(lease):
        with Server("--write-lease", str(lease), "--read-lease", "0") as srv:
            c = srv.client()
            v_init(c, 0, 2 * S)
            pa = v_alloc(c, 0, [A])[0]
            v_confirm(c, 0, [(A, pa)])
            w = LeaseWindow(lease)
            send_and_drop(srv, "/keys/batch_allocate", {"rank": 0, "keys": [A]})
            retry = v_alloc(c, 0, [A])
            leased = srv.stats()[("kv", 0)]["write_leased"]
            v_confirm(c, 0, [(A, pa)])  # one confirmation for two answers
            # The dropped answer's writer may still be writing: a stays protected.
            new_keys = v_alloc(c, 0, [X, Y])
            w.fits()
            expect_eq(retry, [pa], "the retry: a hit again")
            expect_eq(leased, 1, "a is being written")
            expect_eq(new_keys, [-1, -1], "a is not evicted for new keys")
            w.sleep_past()
            got = v_alloc(c, 0, [X, Y])
            expect_true(pa in got, "after the lease bound a's page can go: %r" % (got,))
            srv.check()
    with_lease(scenario, 0.5)


def test_no_change_is_answered_with_a_status_that_the_stock_clients_retry():
    # The one case where a change met a failure after it took effect (the
    # log failed) answers 507, which Retry(status_forcelist=[500, 502, 503,
    # 504]) does not resend; see test_durability.py for that path. Here:
    # every answer of a busy run of both dialects is below 500.
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        s_init(c, 0, 8, ns="sg")
        statuses = set()
        for i in range(200):
            k = "k%d" % (i % 20)
            r = c.post("/keys/batch_allocate", {"rank": 0, "keys": [k, "x%d" % i]})
            statuses.add(r.status)
            res = r.json()["results"]
            if all(p >= 0 for _, p in res):
                statuses.add(c.post("/keys/confirm_write",
                                    {"rank": 0, "confirmations": res}).status)
            r = c.post("/0/reserve_and_allocate_page_indices",
                       {"keys": [[k, None]], "namespace": "sg"})
            statuses.add(r.status)
            idx = r.json()["indices"]
            statuses.add(c.post("/0/confirm_write", {"written_keys_to_confirm": [],
                                                     "pages_to_release": [idx[0][1]],
                                                     "namespace": "sg"}).status)
        expect_true(max(statuses) < 500, "statuses seen: %r" % sorted(statuses))
        srv.check()


if __name__ == "__main__":
    harness.main(globals())

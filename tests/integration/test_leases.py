#!/usr/bin/python3
"""Leases (docs/protocol.md "Leases"): reservations expire and late confirmations
are refused; read leases protect present keys from eviction and their pages
from reuse; a delete during a read lease drains the page, then frees it.

Servers run with --reservation-timeout and --read-lease of LEASE (0.3 s). A
test whose steps must happen inside a lease times them (harness.LeaseWindow)
and runs again with longer leases when a loaded machine made them late; the
tests wait well past a lease for it to end."""

import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (LeaseWindow, Server, expect_eq, expect_true, pool_states,  # noqa: E402
                     s_alloc, s_clear, s_confirm, s_delete, s_exists, s_init, s_pages,
                     v_alloc, v_confirm, v_exists, v_init, v_locations, with_lease)

LEASE = 0.3
LEASE_WAIT = LEASE + 0.25 * harness.SLOWDOWN


def lease_server(*extra, lease=LEASE):
    return Server("--reservation-timeout", str(lease), "--read-lease", str(lease), *extra)


def leased_scenario(*extra):
    """The test it decorates, scenario(srv, c, lease): on a fresh
    lease_server(*extra, lease=lease) with a client c, run again with
    longer leases when its steps did not fit in one (with_lease)."""
    def wrap(scenario):
        @functools.wraps(scenario)
        def test():
            def run(lease):
                with lease_server(*extra, lease=lease) as srv:
                    scenario(srv, srv.client(), lease)
            with_lease(run, LEASE)
        return test
    return wrap


def pool(srv, rank=0, ns="kv"):
    return srv.stats()[(ns, rank)]


def v_own(c, rank, keys, lease):
    """Allocate `keys` and confirm the pages handed out (vLLM dialect); the
    confirmation must come inside the reservation lease, else the scenario
    is rerun (TooSlow). Returns the pages (-1: none)."""
    w = LeaseWindow(lease)
    pages = v_alloc(c, rank, keys)
    v_confirm(c, rank, [(k, p) for k, p in zip(keys, pages) if p >= 0])
    w.fits()
    return pages


def s_own(c, rank, keys, lease):
    """The same in the SGLang dialect; returns the pages."""
    w = LeaseWindow(lease)
    pages = [p for _, p in s_alloc(c, rank, keys)]
    s_confirm(c, rank, [(k, p) for k, p in zip(keys, pages) if p >= 0])
    w.fits()
    return pages


def test_expired_reservation_frees_its_page_and_late_confirm_is_refused():
    with lease_server("--eviction", "none") as srv:
        c = srv.client()
        v_init(c, 0, 2)
        pa = v_alloc(c, 0, ["a"])[0]
        expect_true(pa >= 0, "allocation")
        time.sleep(LEASE_WAIT)
        v_confirm(c, 0, [("a", pa)])
        expect_eq(v_locations(c, 0, ["a"]), [None], "late confirmation must not own")
        expect_eq(v_exists(c, ["a"]), [False], "exists after late confirmation")
        st = pool(srv)
        expect_eq(st["refused_confirmations"]["not_reserved"], 1, "refused not_reserved")
        expect_true(st["expired_reservations"] >= 1, "expired_reservations: %r" % st)
        expect_eq((st["free"], st["reserved"], st["owned"]), (2, 0, 0),
                  "(free, reserved, owned) after expiry")


@leased_scenario("--eviction", "none")
def test_expired_reservation_page_is_reused_and_late_confirm_cannot_take_it(srv, c, lease):
    s_init(c, 0, 1)
    w = LeaseWindow(lease)
    p = s_alloc(c, 0, ["a"])[0][1]
    b_first = s_alloc(c, 0, ["b"])
    w.fits()
    expect_eq(p, 0, "the only page")
    expect_eq(b_first, [(False, -1)], "reserved pages are not reused")
    w.sleep_past()
    w = LeaseWindow(lease)                        # b's reservation
    b_got = s_alloc(c, 0, ["b"])
    s_confirm(c, 0, [("a", 0)])                   # late: page now reserved for b
    between = s_pages(c, 0, ["a", "b"])
    st = pool(srv)
    s_confirm(c, 0, [("b", 0)])
    w.fits()
    expect_eq(b_got, [(False, 0)], "the expired page goes to b")
    expect_eq(between, [None, None], "nobody owns page 0 yet")
    expect_eq(st["refused_confirmations"]["other_key"], 1, "refused other_key")
    expect_eq(s_pages(c, 0, ["a", "b"]), [None, 0], "b's confirmation is accepted")
    srv.check()


@leased_scenario()
def test_reservation_confirmed_within_timeout_is_kept_and_owned_keys_never_expire(srv, c, lease):
    s_init(c, 0, 4)
    w = LeaseWindow(lease)
    p = s_alloc(c, 0, ["a"])[0][1]
    time.sleep(lease * 0.2)
    s_confirm(c, 0, [("a", p)])
    w.fits()
    w.sleep_past()
    expect_eq(s_pages(c, 0, ["a"]), [p], "owned key after the reservation timeout")
    st = pool(srv)
    expect_eq((st["owned"], st["expired_reservations"]), (1, 0),
              "(owned, expired_reservations)")


def _read_lease_blocks_eviction(lookup):
    """Pool of 1 page with lru: A owned and just looked up with `lookup` (which
    answers whether it found A); allocating B gets -1 while the lease lasts,
    then B evicts A."""
    @leased_scenario("--eviction", "clock")
    def scenario(srv, c, lease):
        v_init(c, 0, 1)
        pa = v_own(c, 0, ["A"], lease)[0]
        w = LeaseWindow(lease)
        found = lookup(c)
        whole = v_alloc(c, 0, ["B"])
        partial = s_alloc(c, 0, ["B"])
        evictions = pool(srv)["evictions"]
        w.fits()
        expect_true(found, "the lookup finds A")
        expect_eq(whole, [-1], "A is read-leased: B must not evict it")
        expect_eq(partial, [(False, -1)], "also not for partial allocation")
        expect_eq(evictions, 0, "evictions during the lease")
        w.sleep_past()
        expect_eq(v_own(c, 0, ["B"], lease), [pa], "after the lease B evicts A")
        expect_eq(pool(srv)["evictions"], 1, "evictions")
        expect_eq(s_pages(c, 0, ["A", "B"]), [None, pa], "A evicted, B owns the page")
        srv.check()
    scenario()


def test_read_lease_from_batch_exists_protects_from_eviction():
    _read_lease_blocks_eviction(lambda c: v_exists(c, ["A"]) == [True])


def test_read_lease_from_get_locations_protects_from_eviction():
    _read_lease_blocks_eviction(lambda c: v_locations(c, 0, ["A"])[0] is not None)


def test_read_lease_from_sglang_exists_protects_from_eviction():
    _read_lease_blocks_eviction(lambda c: s_exists(c, 0, ["A"]) == [True])


def test_read_lease_from_get_page_indices_protects_from_eviction():
    _read_lease_blocks_eviction(lambda c: s_pages(c, 0, ["A"])[0] is not None)


@leased_scenario("--eviction", "clock")
def test_unleased_owned_key_is_evicted_when_pool_is_full(srv, c, lease):
    s_init(c, 0, 1)
    p = s_own(c, 0, ["A"], lease)[0]
    expect_eq(s_alloc(c, 0, ["B"]), [(False, p)],
              "B evicts A: writes give no read lease")
    expect_eq(pool(srv)["evictions"], 1, "evictions")


@leased_scenario("--eviction", "clock")
def test_batch_exists_leases_the_key_in_every_rank(srv, c, lease):
    v_init(c, 0, 1)
    v_init(c, 1, 1)
    for rank in (0, 1):
        v_own(c, rank, ["A"], lease)
    w = LeaseWindow(lease)
    exists = v_exists(c, ["A"])
    rank1 = v_alloc(c, 1, ["B"])
    rank0 = v_alloc(c, 0, ["B"])
    w.fits()
    expect_eq(exists, [True], "A complete")
    expect_eq(rank1, [-1], "rank 1 copy of A is leased too")
    expect_eq(rank0, [-1], "rank 0 copy of A is leased")


@leased_scenario("--eviction", "clock")
def test_delete_during_read_lease_drains_the_page_then_frees_it(srv, c, lease):
    s_init(c, 0, 1)
    p = s_own(c, 0, ["A"], lease)[0]
    w = LeaseWindow(lease)
    exists = s_exists(c, 0, ["A"])    # read lease
    s_delete(c, 0, ["A"])
    after_delete = s_exists(c, 0, ["A"])
    draining = pool_states(srv.stats(), "kv", 0)
    b_first = s_alloc(c, 0, ["B"])
    w.fits()
    expect_eq(exists, [True], "exists")
    expect_eq(after_delete, [False], "deleted key is gone at once")
    expect_eq(draining, (1, 0, 0, 0, 1, 0),
              "(num_pages, free, reserved, owned, draining, keys) while draining")
    expect_eq(b_first, [(False, -1)], "a draining page is not reused")
    srv.check()
    w.sleep_past()
    expect_eq(s_alloc(c, 0, ["B"]), [(False, p)], "the drained page is free again")
    st = srv.stats()
    expect_eq(pool_states(st, "kv", 0), (1, 0, 1, 0, 0, 0), "after the lease")
    srv.check()


@leased_scenario("--eviction", "clock")
def test_clear_during_read_lease_drains_the_leased_pages(srv, c, lease):
    s_init(c, 0, 2)
    got = s_own(c, 0, ["A", "B"], lease)
    w = LeaseWindow(lease)
    leased = s_pages(c, 0, ["A"])
    s_clear(c, 0)
    cleared = pool_states(srv.stats(), "kv", 0)
    handed = s_alloc(c, 0, ["C", "D"])
    w.fits()
    expect_eq(leased, [got[0]], "lease A only")
    expect_eq(cleared, (2, 1, 0, 0, 1, 0), "B's page free, A's page draining")
    expect_eq(handed, [(False, got[1]), (False, -1)],
              "only the unleased page is handed out")
    w.sleep_past()
    expect_eq(s_alloc(c, 0, ["D"]), [(False, got[0])], "the drained page")
    srv.check()


def test_missing_keys_get_no_lease_and_do_not_block_allocation():
    with lease_server("--eviction", "none") as srv:
        c = srv.client()
        s_init(c, 0, 1)
        expect_eq(s_exists(c, 0, ["X"]), [False], "missing")
        expect_eq(s_pages(c, 0, ["X"]), [None], "missing")
        expect_eq(s_alloc(c, 0, ["X"]), [(False, 0)], "the free page")


if __name__ == "__main__":
    harness.main(globals())

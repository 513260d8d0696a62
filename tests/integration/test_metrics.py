"""test_metrics.py: GET /metrics and GET /v1/stats follow what the server does,
and the Prometheus text passes `promtool check metrics`.

Over Redis with stripes, the tests that count pages use keys of stripe 0
and pools S times as large (harness.in_stripe0)."""

import time

import harness
from harness import (Server, expect_eq, expect_json, expect_status, expect_true, s_alloc,
                     s_confirm, s_exists, s_init, v_alloc, v_confirm, v_exists, v_init, wait_for)
import metrics_text
from metrics_text import total, value

S = harness.STRIPES
# Keys of stripe 0 (each is its own name at S = 1).
A, B, C, D = (harness.in_stripe0(k) for k in "abcd")
K1, K2 = harness.in_stripe0("k1"), harness.in_stripe0("k2")


def scrape(srv):
    c = srv.client()
    r = c.get("/metrics")
    expect_status(r, 200)
    ctype = r.header("Content-Type") or ""
    expect_true(ctype.startswith("text/plain; version=0.0.4"),
                "GET /metrics Content-Type should be the Prometheus text format, got %r" % ctype)
    text = r.body.decode("utf-8")
    return text, metrics_text.parse(text)


def pool(samples, name, ns="kv", rank=0, tenant="default", **labels):
    return value(samples, name, 0, tenant=tenant, namespace=ns, rank=str(rank), **labels)


def pages(samples, state, ns="kv", rank=0):
    return pool(samples, "hf3fs_metad_pool_pages", ns, rank, state=state)


def test_promtool_check_metrics_passes_on_the_real_output_of_a_busy_server():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        v_init(c, 1, 8)
        pages_ = v_alloc(c, 0, ["a", "b", ["c", "prefix"]])
        v_confirm(c, 0, [("a", pages_[0]), ("zz", 7)], release=[pages_[2]])
        v_exists(c, ["a", "nope"])
        # A namespace with every character a label value must escape.
        odd = 'ns "quoted" back\\slash\nnew line'
        s_init(c, 3, 4 * S, ns=odd)
        s_alloc(c, 3, [K1, K2], ns=odd)
        s_exists(c, 3, [K1], ns=odd)
        c.get("/no/such/path")
        c.post("/keys/batch_allocate", b"{not json")
        c.request("DELETE", "/health")
        text, samples = scrape(srv)
        ok, out = metrics_text.promtool_check(text)
        expect_true(ok, "promtool check metrics failed:\n%s\n--- the text:\n%s"
                    % (out, text[:3000]))
        expect_eq(pages(samples, "owned", odd, 3), 0, "pool with an odd namespace is labelled")
        expect_eq(pages(samples, "reserved", odd, 3), 2, "its reservations")


def test_request_counters_and_latency_histograms_grow_with_each_request():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 64)
        _, before = scrape(srv)
        route = "/keys/batch_allocate"
        for i in range(10):
            v_alloc(c, 0, ["key-%d" % i])
        _, after = scrape(srv)
        got = value(after, "hf3fs_metad_requests_total", 0, route=route, status="200")
        expect_eq(got - value(before, "hf3fs_metad_requests_total", 0, route=route,
                              status="200"), 10, "requests_total of batch_allocate")
        count = value(after, "hf3fs_metad_request_duration_seconds_count", 0, route=route,
                      status="200")
        expect_eq(count, 10, "latency histogram _count")
        inf = value(after, "hf3fs_metad_request_duration_seconds_bucket", 0, route=route,
                    status="200", le="+Inf")
        expect_eq(inf, 10, "latency histogram +Inf bucket")
        buckets = sorted((float(dict(ls)["le"]), v) for (n, ls), v in after.items()
                         if n == "hf3fs_metad_request_duration_seconds_bucket"
                         and dict(ls).get("route") == route and dict(ls)["le"] != "+Inf")
        expect_true(len(buckets) >= 10, "at least 10 latency buckets: %r" % buckets)
        counts = [v for _, v in buckets]
        expect_true(counts == sorted(counts), "buckets are cumulative: %r" % buckets)
        total_s = value(after, "hf3fs_metad_request_duration_seconds_sum", 0, route=route,
                        status="200")
        expect_true(0 < total_s < 10, "latency sum in seconds is plausible: %r" % total_s)


def test_errors_are_counted_under_their_route_and_status():
    with Server("--max-body-bytes", "1024") as srv:
        c = srv.client()
        c.get("/no/such/path")
        c.request("DELETE", "/health")
        c.post("/keys/batch_allocate", b"{not json")
        c.post("/keys/batch_allocate", {"rank": 0, "keys": ["x" * 2000]})  # 413
        c.close()
        _, s = scrape(srv)
        expect_eq(value(s, "hf3fs_metad_requests_total", 0, route="unmatched", status="404"), 1,
                  "unknown path: unmatched/404")
        expect_eq(value(s, "hf3fs_metad_requests_total", 0, route="unmatched", status="405"), 1,
                  "wrong method: unmatched/405")
        expect_eq(value(s, "hf3fs_metad_requests_total", 0, route="/keys/batch_allocate",
                        status="400"), 1, "malformed body: batch_allocate/400")
        expect_eq(value(s, "hf3fs_metad_requests_total", 0, route="unmatched", status="413"), 1,
                  "body over the limit: unmatched/413")


def test_pool_page_gauges_and_keys_follow_allocate_confirm_and_release():
    with Server("--eviction", "none") as srv:
        c = srv.client()
        v_init(c, 0, 4 * S)
        _, s = scrape(srv)
        expect_eq([pages(s, st) for st in ("free", "reserved", "owned", "draining")],
                  [4 * S, 0, 0, 0], "fresh pool")
        expect_eq(pool(s, "hf3fs_metad_pool_num_pages"), 4 * S, "num_pages")
        expect_eq(value(s, "hf3fs_metad_pools"), 1, "pools")
        p = v_alloc(c, 0, [A, B, C])
        _, s = scrape(srv)
        expect_eq([pages(s, "free"), pages(s, "reserved")], [4 * (S - 1) + 1, 3],
                  "after allocating 3")
        v_confirm(c, 0, [(A, p[0]), (B, p[1])], release=[p[2]])
        _, s = scrape(srv)
        expect_eq([pages(s, st) for st in ("free", "reserved", "owned", "draining")],
                  [4 * (S - 1) + 1, 0, 2, 1],
                  "after confirming 2 and releasing 1 (it drains for the grace)")
        expect_eq(pool(s, "hf3fs_metad_pool_keys"), 2, "keys")
        expect_eq(pool(s, "hf3fs_metad_pool_reservations_total"), 3, "reservations")
        expect_eq(pool(s, "hf3fs_metad_pool_confirmations_total"), 2, "confirmations")
        expect_eq(pool(s, "hf3fs_metad_pool_releases_total"), 1, "releases")


def test_hits_and_misses_are_counted():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        p = v_alloc(c, 0, ["a"])
        v_confirm(c, 0, [("a", p[0])])
        _, before = scrape(srv)
        v_alloc(c, 0, ["a"])            # a hit
        v_exists(c, ["a", "b", "c"])    # one hit, two misses
        _, after = scrape(srv)
        hits = pool(after, "hf3fs_metad_pool_hits_total") - pool(before,
                                                                 "hf3fs_metad_pool_hits_total")
        misses = (pool(after, "hf3fs_metad_pool_misses_total")
                  - pool(before, "hf3fs_metad_pool_misses_total"))
        expect_eq(hits, 2, "hits")
        expect_eq(misses, 2, "misses")


def test_evictions_are_counted():
    with Server("--read-lease", "0") as srv:
        c = srv.client()
        v_init(c, 0, 2 * S)
        for keys in ([A, B], [C, D]):
            p = v_alloc(c, 0, keys)
            v_confirm(c, 0, list(zip(keys, p)))
        _, s = scrape(srv)
        expect_eq(pool(s, "hf3fs_metad_pool_evictions_total"), 2, "evictions")
        expect_eq(pool(s, "hf3fs_metad_pool_keys"), 2, "keys after eviction")


def test_expired_reservations_are_counted():
    with Server("--reservation-timeout", "0.2") as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        s_alloc(c, 0, [A, B])
        time.sleep(0.4)
        s_exists(c, 0, [A])  # an operation on the pool (its stripe) expires old reservations
        _, s = scrape(srv)
        expect_eq(pool(s, "hf3fs_metad_pool_expired_reservations_total"), 2,
                  "expired reservations")
        expect_eq(pages(s, "reserved"), 0, "reserved pages after expiry")


def test_refused_confirmations_and_releases_are_counted_by_reason():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4 * S)
        got = s_alloc(c, 0, [A, B])
        pa, pb = got[0][1], got[1][1]
        free_page = (set(range(0, 4 * S, S)) - {pa, pb}).pop()  # one of stripe 0's
        s_confirm(c, 0, [(A, pb)])            # other_key
        s_confirm(c, 0, [(A, free_page)])     # not_reserved
        s_confirm(c, 0, [(A, 99)])            # out_of_range (99 >= 4 * S)
        s_confirm(c, 0, [(A, pa)])            # accepted
        s_confirm(c, 0, release=[pa])         # release of an owned page
        s_confirm(c, 0, release=[free_page])  # release of a free page
        s_confirm(c, 0, release=[-1])         # out of range
        _, s = scrape(srv)
        name = "hf3fs_metad_pool_refused_confirmations_total"
        expect_eq({r: pool(s, name, reason=r) for r in
                   ("other_key", "not_reserved", "out_of_range", "owned")},
                  {"other_key": 1, "not_reserved": 1, "out_of_range": 1, "owned": 0},
                  "refused confirmations by reason")
        name = "hf3fs_metad_pool_refused_releases_total"
        expect_eq({r: pool(s, name, reason=r) for r in ("owned", "not_reserved", "out_of_range")},
                  {"owned": 1, "not_reserved": 1, "out_of_range": 1},
                  "refused releases by reason")


def test_connections_are_counted_open_total_and_shed_at_the_limit():
    with Server("--max-connections", "2", "--threads", "1") as srv:
        def served():
            # The harness's start-up probe may still hold a slot for a moment.
            conn = srv.raw()
            try:
                conn.send(harness.raw_request("GET", "/health"))
                if conn.read_response().status == 200:
                    return conn
            except (OSError, EOFError):
                pass
            conn.close()
            return None
        c1 = wait_for(served, 5 * harness.SLOWDOWN, what="a first connection served")
        c2 = wait_for(served, 5 * harness.SLOWDOWN, what="a second connection served")
        # Past the limit: admitted, and the least recently active of the
        # idle connections (c1) is shed to make room.
        third = served()
        expect_true(third is not None, "a connection over --max-connections is served")
        expect_true(c1.closed_by_peer(5 * harness.SLOWDOWN), "the least recently active shed")
        third.close()
        c1.close()
        s = scrape(srv)[1]
        expect_true(value(s, "hf3fs_metad_connections_shed_total", 0) >= 1,
                    "shed connections counted")
        expect_eq(value(s, "hf3fs_metad_connections_refused_total", 0), 0,
                  "refused: none, while a connection could be shed")
        expect_true(value(s, "hf3fs_metad_connections_total", 0) >= 4,
                    "accepted connections counted")
        expect_true(value(s, "hf3fs_metad_connections_open") <= 2,
                    "open: at most the limit")
        c2.close()


def test_stats_has_every_figure_of_every_pool_and_the_server():
    with Server() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        s_init(c, 2, 16, ns="other")
        body = expect_json(c.get("/v1/stats"), 200)
        server = body.get("server")
        expect_true(isinstance(server, dict), "stats has a server object: %r" % body)
        for field in ("started_at", "uptime_seconds", "accepting_changes", "requests",
                      "connections", "persistence"):
            expect_true(field in server, "server.%s in /v1/stats: %r" % (field, server))
        expect_eq(server["accepting_changes"], True, "accepting_changes")
        expect_true(server["connections"]["open"] >= 1, "open connections include ours")
        pools = {(p["namespace"], p["rank"]): p for p in body["pools"]}
        expect_eq(sorted(pools), [("kv", 0), ("other", 2)], "one entry per pool")
        fields = ("num_pages", "free", "reserved", "owned", "draining", "keys", "touched",
                  "hits", "misses", "reservations", "confirmations", "releases", "evictions",
                  "expired_reservations", "duplicate_confirmations")
        for key, p in pools.items():
            for field in fields:
                expect_true(type(p.get(field)) is int, "%s of pool %r: %r" % (field, key, p))
            for group in ("refused_confirmations", "refused_releases"):
                expect_eq(sorted(p[group]), ["not_reserved", "other_key", "out_of_range", "owned"],
                          "%s reasons" % group)
        expect_eq(pools[("other", 2)]["num_pages"], 16, "num_pages")
        expect_eq(pools[("other", 2)]["free"], 16, "free")


def test_stats_and_metrics_name_the_release_and_the_versions_it_speaks():
    want = harness.release_versions()
    with Server() as srv:
        server = expect_json(srv.client().get("/v1/stats"), 200)["server"]
        for field in ("version", "module_version", "value_encoding_version",
                      "data_format_version"):
            expect_eq(str(server.get(field)), want[field], "server.%s of /v1/stats" % field)
        expect_true(isinstance(server["module_version"], int), "module_version is a number")
        text, samples = scrape(srv)
    # Prometheus' *_build_info: one gauge sample of value 1, the versions as labels
    info = {labels: v for (name, labels), v in samples.items()
            if name == "hf3fs_metad_build_info"}
    labels = tuple(sorted((k, want[k]) for k in ("version", "module_version",
                                                "value_encoding_version",
                                                "data_format_version")))
    expect_eq(info, {labels: 1.0}, "hf3fs_metad_build_info samples")
    expect_true("# TYPE hf3fs_metad_build_info gauge\n" in text
                and "# HELP hf3fs_metad_build_info " in text,
                "hf3fs_metad_build_info has its HELP and TYPE lines")


def test_persistence_figures_appear_when_the_state_is_logged():
    with Server() as srv:  # the harness gives every server a data directory
        c = srv.client()
        _, before = scrape(srv)
        if value(before, "hf3fs_metad_persistence_enabled") != 1:
            print("  (skipped: this build keeps no log yet: hf3fs_metad_persistence_enabled "
                  "is %r)" % value(before, "hf3fs_metad_persistence_enabled"))
            return
        v_init(c, 0, 8)
        p = v_alloc(c, 0, ["a"])
        v_confirm(c, 0, [("a", p[0])])
        text, after = scrape(srv)
        grew = (value(after, "hf3fs_metad_log_bytes_total", 0)
                - value(before, "hf3fs_metad_log_bytes_total", 0))
        expect_true(grew > 0, "log bytes grow with changes")
        expect_true(value(after, "hf3fs_metad_log_records_total", 0)
                    > value(before, "hf3fs_metad_log_records_total", 0), "log records grow")
        expect_true(value(after, "hf3fs_metad_log_sync_duration_seconds_count") is not None,
                    "sync latency histogram present")
        ok, out = metrics_text.promtool_check(text)
        expect_true(ok, "promtool check metrics with persistence:\n%s" % out)
    with Server("--in-memory", persistence=False) as srv:
        _, s = scrape(srv)
        expect_eq(value(s, "hf3fs_metad_persistence_enabled"), 0, "--in-memory")
        expect_eq(value(s, "hf3fs_metad_log_bytes_total"), None, "no log families in memory")


if __name__ == "__main__":
    harness.main(globals())

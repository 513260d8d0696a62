#!/usr/bin/python3
"""Concurrency: client threads with their own keep-alive connections hammer
small pools with eviction, through both dialects, on overlapping keys, for a
few seconds. Every answer is recorded and checked; meanwhile a checker thread
runs the server's invariant checker; at the end no two keys own the same
page (through the API), nothing leaked, and every page any thread was told
about is in range."""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (Server, expect_eq, expect_true, s_init, s_pages, v_init)  # noqa: E402

DURATION = 3.0
THREADS_PER_DIALECT = 4
KV_PAGES = {0: 12, 1: 12}
SG_PAGES = {0: 10, 1: 6}
KEYS = ["key-%02d" % i for i in range(40)]


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.errors = []
        self.requests = 0
        self.statuses = {}

    def error(self, msg):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(msg)

    def count(self, status):
        with self.lock:
            self.requests += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1

    def expect_none(self):
        expect_true(not self.errors, "%d problems during the run (%d requests):\n  %s"
                    % (len(self.errors), self.requests, "\n  ".join(self.errors[:20])))


def busy_server(lease):
    """Clock eviction, 4 threads, read and write leases and the release
    grace of `lease` seconds."""
    return Server("--eviction", "clock", "--read-lease", lease, "--release-grace", lease,
                  "--write-lease", lease, "--threads", "4")


def run_threads(threads, stop, seconds):
    """Start threads, stop them after seconds; each must end."""
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=30 * harness.SLOWDOWN)
        expect_true(not t.is_alive(), "a client thread hung (no answer within the timeout)")


def call(rec, c, path, body):
    """POST; record; return the parsed JSON (or None for 204). Any transport
    error, 5xx or unexpected status is recorded as an error."""
    try:
        r = c.post(path, body)
    except Exception as e:  # noqa: BLE001
        rec.error("%s: no answer: %s: %s" % (path, type(e).__name__, e))
        raise
    rec.count(r.status)
    if r.status >= 500:
        rec.error("%s %r -> %d %r" % (path, body, r.status, r.body[:200]))
        return None
    if r.status == 204:
        return None
    if r.status != 200:
        rec.error("%s %r -> unexpected %d %r" % (path, body, r.status, r.body[:200]))
        return None
    return r.json()


def check_pages_in_range(rec, what, pages, num_pages, allow_none=False):
    for p in pages:
        if p is None and allow_none:
            continue
        if p is None or type(p) is not int or not (p == -1 or 0 <= p < num_pages):
            rec.error("%s: page %r out of range 0..%d" % (what, p, num_pages - 1))


def check_distinct(rec, what, keys, pages):
    seen = {}
    for k, p in zip(keys, pages):
        if p is None or p < 0:
            continue
        if p in seen and seen[p] != k:
            rec.error("%s: keys %r and %r got the same page %d" % (what, seen[p], k, p))
        seen[p] = k


def answer_list(rec, c, path, body, field, n):
    """The list `field` (n items) of the answer to POST path, or None: no
    JSON answer (call() recorded why) or a wrong one (recorded here)."""
    got = call(rec, c, path, body)
    if got is None:
        return None
    items = got.get(field)
    if not isinstance(items, list) or len(items) != n:
        rec.error("%s answer %r for %r" % (path, got, body))
        return None
    return items


def read_pages(rec, c, path, body, field, keys, num_pages, what):
    """A read of a page (or null) per key: in range, no page for two keys."""
    pages = answer_list(rec, c, path, body, field, len(keys))
    if pages is not None:
        check_pages_in_range(rec, path, pages, num_pages, allow_none=True)
        check_distinct(rec, what, keys, pages)


def run_client(port, rec, seed, stop, step):
    """step(rec, c, rnd) over one connection until stop; an exception ends
    the client (call() has recorded it)."""
    rnd = random.Random(seed)
    c = harness.Client(port)
    try:
        while not stop.is_set():
            step(rec, c, rnd)
    except Exception:  # noqa: BLE001 - recorded in call()
        pass
    finally:
        c.close()


def vllm_step(rec, c, rnd):
    rank = rnd.choice([0, 1])
    n = KV_PAGES[rank]
    keys = rnd.sample(KEYS, rnd.randint(1, 4))
    if rnd.random() < 0.2:
        keys.append(keys[0])                         # a repeated key
    results = answer_list(rec, c, "/keys/batch_allocate",
                          {"rank": rank, "keys": [[k, ""] for k in keys]}, "results", len(keys))
    if results is None:
        return
    if [x[0] for x in results] != keys:
        rec.error("batch_allocate answer %r for %r" % (results, keys))
        return
    pages = [x[1] for x in results]
    check_pages_in_range(rec, "batch_allocate", pages, n)
    check_distinct(rec, "batch_allocate rank %d" % rank, keys, pages)
    got = {}
    for k, p in zip(keys, pages):
        if p >= 0:
            got[k] = p
    confirm = []
    release = []
    for k, p in got.items():
        if rnd.random() < 0.75:
            confirm.append([k, p])
        else:
            release.append(p)
    if rnd.random() < 0.1 and len(confirm) >= 2:         # a wrong pair: refused
        confirm[0] = [confirm[1][0], confirm[0][1]]
        release.append(confirm[0][1])
    call(rec, c, "/keys/confirm_write",
         {"rank": rank, "confirmations": confirm, "pages_to_release": release})
    probe = rnd.sample(KEYS, 5)
    answer_list(rec, c, "/keys/batch_exists", {"keys": probe}, "exists", 5)
    read_pages(rec, c, "/keys/get_locations", {"rank": rank, "keys": probe}, "locations", probe,
               n, "get_locations rank %d" % rank)
    if rnd.random() < 0.1:
        # cross-dialect delete in namespace kv: makes keys incomplete
        call(rec, c, "/%d/delete_keys" % rank, {"keys": rnd.sample(KEYS, 2)})


def sglang_step(rec, c, rnd):
    rank = rnd.choice([0, 1])
    n = SG_PAGES[rank]
    ns = {"namespace": "sg"}
    keys = rnd.sample(KEYS, rnd.randint(1, 5))
    if rnd.random() < 0.2:
        keys.append(keys[-1])
    idx = answer_list(rec, c, "/%d/reserve_and_allocate_page_indices" % rank,
                      dict(ns, keys=[[k, ""] for k in keys]), "indices", len(keys))
    if idx is None:
        return
    pages = [x[1] for x in idx]
    check_pages_in_range(rec, "reserve", pages, n)
    check_distinct(rec, "reserve sg/%d" % rank, keys, pages)
    confirm = []
    release = []
    done = set()
    for k, (existed, p) in zip(keys, idx):
        if p < 0 or existed or (k, p) in done:
            continue
        done.add((k, p))
        if rnd.random() < 0.7:
            confirm.append([k, p])
        else:
            release.append(p)
    call(rec, c, "/%d/confirm_write" % rank,
         dict(ns, written_keys_to_confirm=confirm, pages_to_release=release))
    probe = rnd.sample(KEYS, 5)
    answer_list(rec, c, "/%d/exists" % rank, dict(ns, keys=probe), "exists", 5)
    read_pages(rec, c, "/%d/get_page_indices" % rank, dict(ns, keys=probe), "indices", probe, n,
               "get_page_indices sg/%d" % rank)
    x = rnd.random()
    if x < 0.15:
        call(rec, c, "/%d/delete_keys" % rank, dict(ns, keys=rnd.sample(KEYS, 3)))
    elif x < 0.17 and rank == 1:
        call(rec, c, "/1/clear", ns)


def checker(srv, rec, stop):
    runs = 0
    while not stop.is_set():
        try:
            srv.check()
            runs += 1
        except AssertionError as e:
            rec.error("invariant checker during the run: %s" % e)
            return
        except Exception as e:  # noqa: BLE001
            rec.error("invariant checker: no answer: %s" % e)
            return
        time.sleep(0.05)
    rec.checks = runs


def final_pool_checks(srv, c):
    """Through the API: distinct pages, states that add up, nothing reserved
    or draining once every client resolved its pages and leases ended."""
    problems = []
    pools = [("kv", r, n) for r, n in KV_PAGES.items()] + [("sg", r, n) for r, n in SG_PAGES.items()]
    st = srv.stats()
    for ns, rank, n in pools:
        pages = s_pages(c, rank, KEYS, ns=None if ns == "kv" else ns)
        owned = {}
        for k, p in zip(KEYS, pages):
            if p is None:
                continue
            if not (0 <= p < n):
                problems.append("%s/%d: key %s owns page %r out of range" % (ns, rank, k, p))
            if p in owned:
                problems.append("%s/%d: keys %s and %s own the same page %d"
                                % (ns, rank, owned[p], k, p))
            owned[p] = k
        p = srv.stats()[(ns, rank)]
        total = p["free"] + p["reserved"] + p["owned"] + p["draining"]
        if total != n or p["num_pages"] != n:
            problems.append("%s/%d: states add up to %d of %d pages: %r" % (ns, rank, total, n, p))
        if p["owned"] != len(owned) or p["keys"] != len(owned):
            problems.append("%s/%d: stats say %d owned / %d keys, the API shows %d"
                            % (ns, rank, p["owned"], p["keys"], len(owned)))
        if p["reserved"] != 0:
            problems.append("%s/%d: %d pages still reserved after every client confirmed or"
                            " released its pages (leak)" % (ns, rank, p["reserved"]))
        if p["draining"] != 0:
            problems.append("%s/%d: %d pages still draining after the read leases ended"
                            % (ns, rank, p["draining"]))
    del st
    return problems


def test_concurrent_clients_of_both_dialects_never_break_page_ownership():
    with busy_server("0.2") as srv:
        c = srv.client()
        for rank, n in KV_PAGES.items():
            v_init(c, rank, n)
        for rank, n in SG_PAGES.items():
            s_init(c, rank, n, ns="sg")
        rec = Recorder()
        stop = threading.Event()
        threads = []
        for i in range(THREADS_PER_DIALECT):
            for seed, step in ((100 + i, vllm_step), (200 + i, sglang_step)):
                threads.append(threading.Thread(target=run_client,
                                                args=(srv.port, rec, seed, stop, step)))
        threads.append(threading.Thread(target=checker, args=(srv, rec, stop)))
        run_threads(threads, stop, DURATION)
        rec.expect_none()
        expect_true(rec.requests > 200, "too few requests made: %d" % rec.requests)
        expect_true(getattr(rec, "checks", 0) >= 1, "the invariant checker never ran")
        srv.check()
        time.sleep(0.5)                      # read leases end; the next calls expire them
        problems = final_pool_checks(srv, c)
        expect_true(not problems, "\n  ".join(problems))
        srv.check()
        st = srv.stats()
        evictions = sum(p["evictions"] for p in st.values())
        expect_true(evictions > 0, "the run never evicted: the test did not stress the pools")
        sys.stdout.write("# %d requests, statuses %r, %d evictions, %d checker runs\n"
                         % (rec.requests, rec.statuses, evictions, rec.checks))


def test_concurrent_clear_and_reinitialize_never_crash_or_corrupt():
    # /clear forgets every pool while other threads are using them; requests
    # that arrive in between get 404 (not initialized), never a 5xx or a crash;
    # two clients clear and initialize, so one's initialize meets the other's
    # clear between its steps (over Redis: the anchor made, then gone)
    with busy_server("0.1") as srv:
        c = srv.client()
        for rank, n in KV_PAGES.items():
            v_init(c, rank, n)
        rec = Recorder()
        stop = threading.Event()
        allowed = {200, 204, 404}

        def worker(seed):
            rnd = random.Random(seed)
            cl = harness.Client(srv.port)
            try:
                while not stop.is_set():
                    rank = rnd.choice([0, 1])
                    keys = rnd.sample(KEYS, 3)
                    for path, body in (
                            ("/keys/batch_allocate", {"rank": rank, "keys": keys}),
                            ("/keys/confirm_write", {"rank": rank,
                                                     "confirmations": [[keys[0], rnd.randrange(12)]],
                                                     "pages_to_release": [rnd.randrange(12)]}),
                            ("/keys/batch_exists", {"keys": keys}),
                            ("/keys/get_locations", {"rank": rank, "keys": keys}),
                            ("/%d/delete_keys" % rank, {"keys": keys[:1]}),
                            ("/%d/get_page_indices" % rank, {"keys": keys})):
                        r = cl.post(path, body)
                        rec.count(r.status)
                        if r.status not in allowed:
                            rec.error("%s -> %d %r" % (path, r.status, r.body[:200]))
            except Exception as e:  # noqa: BLE001
                rec.error("worker: no answer: %s: %s" % (type(e).__name__, e))
            finally:
                cl.close()

        def clearer():
            cl = harness.Client(srv.port)
            try:
                while not stop.is_set():
                    for path, body in (("/clear", None),
                                       ("/rank/0/initialize", {"role": "worker", "num_pages": 12}),
                                       ("/rank/1/initialize", {"role": "worker", "num_pages": 12})):
                        r = cl.post(path, body)
                        rec.count(r.status)
                        if r.status not in (200, 204):
                            rec.error("%s -> %d %r" % (path, r.status, r.body[:200]))
                    for path in ("/v1/stats", "/metrics", "/v1/check"):
                        r = cl.get(path)
                        if r.status != 200:
                            rec.error("GET %s -> %d %r" % (path, r.status, r.body[:300]))
                    time.sleep(0.01)
            except Exception as e:  # noqa: BLE001
                rec.error("clearer: no answer: %s: %s" % (type(e).__name__, e))
            finally:
                cl.close()
        threads = [threading.Thread(target=worker, args=(300 + i,)) for i in range(6)]
        threads += [threading.Thread(target=clearer) for _ in range(2)]
        run_threads(threads, stop, DURATION * 0.6)
        rec.expect_none()
        expect_true(rec.statuses.get(404, 0) > 0 and rec.statuses.get(200, 0) > 0,
                    "the run should see both served and cleared pools: %r" % rec.statuses)
        srv.check()


def test_concurrent_allocations_of_the_same_key_end_with_one_owned_page():
    with Server("--eviction", "none") as srv:
        c = srv.client()
        s_init(c, 0, 64)
        rec = Recorder()
        barrier = threading.Barrier(8)
        results = {}

        def racer(i):
            cl = harness.Client(srv.port)
            try:
                barrier.wait()
                for round_ in range(10):
                    key = "same-%d" % round_
                    body = call(rec, cl, "/0/reserve_and_allocate_page_indices",
                                {"keys": [[key, ""]]})
                    existed, page = body["indices"][0]
                    results[(i, round_)] = (existed, page)
                    if page >= 0 and not existed:
                        call(rec, cl, "/0/confirm_write",
                             {"written_keys_to_confirm": [[key, page]]})
            except Exception as e:  # noqa: BLE001
                rec.error("racer %d: %s" % (i, e))
            finally:
                cl.close()
        threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30 * harness.SLOWDOWN)
        expect_true(not rec.errors, "\n".join(rec.errors[:10]))
        pages = s_pages(c, 0, ["same-%d" % r for r in range(10)])
        expect_true(all(p is not None for p in pages) and len(set(pages)) == 10,
                    "each key owns one page, all distinct: %r" % pages)
        p = srv.stats()[("kv", 0)]
        expect_eq((p["owned"], p["reserved"], p["free"]), (10, 0, 54),
                  "duplicate reservations of a key were freed when it was confirmed")
        srv.check()


if __name__ == "__main__":
    harness.main(globals())

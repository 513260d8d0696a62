"""Load and soak: many concurrent clients on every route of both dialects.

Short form (make test): 32 clients for 10 seconds against the default server
(persistent, fsync always), then the invariant through the API: GET /v1/check,
and no two keys own the same page of any pool (get_page_indices over the whole
key space). Zero 5xx, zero connection errors, zero unexpected answers.

    python3 tests/integration/test_load.py                   short form
    python3 tests/integration/test_load.py --seconds 120 --clients 64
    python3 tests/integration/test_load.py --soak 30         30-minute soak

Soak (--soak MINUTES): mixed load with eviction and lease expiry happening all
the time (small pools, --reservation-timeout 1, --read-lease 0.2, clients
that abandon reservations); every minute a line with the server's RSS
(/proc/<pid>/status VmRSS) and open descriptors (/proc/<pid>/fd), requests,
evictions and expired reservations. Passes if RSS levels off (the last third
of the run grows less than 10% and 8 MiB over the middle third), the
descriptor count comes back to where it was, and the load test's own checks
hold. Add --in-memory to either form to run without the data directory.
"""

import hashlib
import json
import os
import random
import sys
import threading
import time

import harness
from harness import Server, expect_eq, expect_true

# -- options (taken out of argv before harness.main sees it) --------------------

OPTS = {"seconds": 10.0, "clients": 32, "soak": 0.0, "in_memory": False}


def _take_options():
    argv = sys.argv[1:]
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--seconds", "--clients", "--soak") and i + 1 < len(argv):
            OPTS[a[2:]] = float(argv[i + 1]) if a != "--clients" else int(argv[i + 1])
            i += 2
            continue
        if a == "--in-memory":
            OPTS["in_memory"] = True
        else:
            rest.append(a)
        i += 1
    sys.argv[1:] = rest


_take_options()

VLLM_RANKS = 4
SG_POOLS = [("sg-a", 0), ("sg-a", 1), ("sg-b", 0)]
KEYS = [hashlib.sha256(b"key-%d" % i).hexdigest() for i in range(1500)]
OK_STATUSES = {200, 204}


def proc_figures(pid):
    """(RSS in KiB, open descriptors) of a process."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid))


class Tally:
    """Counts shared by the client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.status = {}
        self.unexpected = []
        self.conn_errors = []
        self.latencies = []
        self.server_errors = []  # (route, status, body) of the first 5xx answers

    def add(self, route, status, took, expected, body=b""):
        with self.lock:
            if status >= 500 and len(self.server_errors) < 10:
                self.server_errors.append((route, status, body[:300]))
            self.requests += 1
            self.status[status] = self.status.get(status, 0) + 1
            if len(self.latencies) < 200000:
                self.latencies.append(took)
            if status not in expected and len(self.unexpected) < 20:
                self.unexpected.append((route, status))

    def error(self, what):
        with self.lock:
            if len(self.conn_errors) < 20:
                self.conn_errors.append(what)

    def fivexx(self):
        return sum(n for s, n in self.status.items() if s >= 500)


class LoadClient(threading.Thread):
    """One engine worker: a random mix of every route of both dialects."""

    def __init__(self, srv, tally, seed, stop, abandon=0.0, clear_rate=0.0002):
        super().__init__(daemon=True)
        self.srv = srv
        self.tally = tally
        self.rng = random.Random(seed)
        self.stop = stop
        self.abandon = abandon  # share of reservations left to expire
        self.clear_rate = clear_rate  # chance of a POST /clear per operation
        self.conn = None

    # -- plumbing --

    def post(self, route, body, expected=OK_STATUSES | {404}):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        t0 = time.monotonic()
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = harness.Client(self.srv.port, timeout=30 * harness.SLOWDOWN)
                r = self.conn.post(route, data)
                break
            except OSError as e:
                self.conn = None
                if attempt == 1:
                    self.tally.error("%s: %r" % (route, e))
                    return None
        self.tally.add(route, r.status, time.monotonic() - t0, expected, r.body)
        return r

    def get(self, route):
        t0 = time.monotonic()
        try:
            if self.conn is None:
                self.conn = harness.Client(self.srv.port, timeout=30 * harness.SLOWDOWN)
            r = self.conn.get(route)
        except OSError as e:
            self.conn = None
            self.tally.error("%s: %r" % (route, e))
            return None
        self.tally.add(route, r.status, time.monotonic() - t0, {200}, r.body)
        return r

    def keys(self, n):
        # Hot keys (a prefix shared by many requests) and a long tail.
        return [KEYS[min(int(self.rng.expovariate(1 / 300.0)), len(KEYS) - 1)] for _ in range(n)]

    # -- the dialects --

    def vllm(self):
        rank = self.rng.randrange(VLLM_RANKS)
        keys = self.keys(self.rng.randrange(1, 9))
        r = self.post("/keys/batch_allocate", {"rank": rank, "keys": [[k, ""] for k in keys]})
        if r is None or r.status == 404:
            self.post("/rank/%d/initialize" % rank, {"role": "worker", "num_pages": self.pages})
            return
        if r.status != 200:
            return
        results = r.json()["results"]
        expect_eq(len(results), len(keys), "batch_allocate results")
        confirm = [[k, p] for k, p in results if p >= 0 and self.rng.random() >= self.abandon]
        release = [p for _, p in confirm if self.rng.random() < 0.1]
        confirm = [c for c in confirm if c[1] not in release]
        self.post("/keys/confirm_write", {"rank": rank, "confirmations": confirm,
                                          "pages_to_release": release})
        if self.rng.random() < 0.5:
            self.post("/keys/batch_exists", {"keys": keys})
        if self.rng.random() < 0.5:
            self.post("/keys/get_locations", {"rank": rank, "keys": keys})

    def sglang(self):
        ns, rank = self.rng.choice(SG_POOLS)
        keys = self.keys(self.rng.randrange(1, 9))
        r = self.post("/%d/reserve_and_allocate_page_indices" % rank,
                      {"keys": [[k, ""] for k in keys], "namespace": ns})
        if r is None or r.status == 404:
            self.post("/%d/initialize" % rank, {"num_pages": self.pages, "namespace": ns})
            return
        if r.status != 200:
            return
        got = r.json()["indices"]
        expect_eq(len(got), len(keys), "reserve_and_allocate_page_indices answers")
        new = [(k, p) for k, (existed, p) in zip(keys, got) if p >= 0 and not existed]
        confirm = [[k, p] for k, p in new if self.rng.random() >= self.abandon]
        release = [p for k, p in new if [k, p] not in confirm and self.rng.random() < 0.5]
        self.post("/%d/confirm_write" % rank, {"written_keys_to_confirm": confirm,
                                               "pages_to_release": release, "namespace": ns})
        roll = self.rng.random()
        if roll < 0.4:
            self.post("/%d/exists" % rank, {"keys": keys, "namespace": ns})
        elif roll < 0.8:
            self.post("/%d/get_page_indices" % rank, {"keys": keys, "namespace": ns})
        elif roll < 0.95:
            self.post("/%d/delete_keys" % rank, {"keys": keys[:2], "namespace": ns})
        elif roll < 0.951:
            self.post("/%d/clear" % rank, {"namespace": ns})

    def admin(self):
        route = self.rng.choice(["/health", "/metrics", "/v1/stats", "/v1/check"])
        self.get(route)

    def malformed(self):
        route, body = self.rng.choice([
            ("/keys/batch_allocate", b'{"rank": 0, "keys": [1, 2]}'),
            ("/0/exists", b'{"keys": "nope"'),
            ("/keys/confirm_write", b'{"rank": 0, "confirmations": [["k", "x"]]}'),
            ("/0/reserve_and_allocate_page_indices", b'[]'),
        ])
        self.post(route, body, expected={400})

    def run(self):
        ops = [self.vllm] * 40 + [self.sglang] * 40 + [self.admin] * 2 + [self.malformed] * 2
        try:
            while not self.stop.is_set():
                self.rng.choice(ops)()
                if self.rng.random() < self.clear_rate:  # every pool forgotten; re-initialize
                    self.post("/clear", b"")
        except AssertionError as e:
            self.tally.error("wrong answer: %s" % e)
        finally:
            if self.conn is not None:
                self.conn.close()


def initialize(srv, pages):
    c = srv.client()
    for rank in range(VLLM_RANKS):
        harness.v_init(c, rank, pages)
    for ns, rank in SG_POOLS:
        harness.s_init(c, rank, pages, ns=ns)
    c.close()


POOLS = [("kv", r) for r in range(VLLM_RANKS)] + SG_POOLS


def owned_pages(c, ns, rank):
    """{page: key} of one pool from one get_page_indices over the whole key
    space (one request: one consistent view); fails if a page has two keys."""
    r = c.post("/%d/get_page_indices" % rank, {"keys": KEYS, "namespace": ns})
    if r.status == 404:
        return {}  # cleared and not initialized again yet
    pages = harness.expect_json(r, 200)["indices"]
    owner = {}
    for key, page in zip(KEYS, pages):
        if page is None:
            continue
        expect_true(page not in owner, "pool %s/%d: page %d owned by two keys: %s and %s"
                    % (ns, rank, page, owner.get(page), key))
        owner[page] = key
    return owner


def check_ownership(srv):
    """Every pool: /v1/check, and no page owned by two keys."""
    srv.check()
    c = srv.client()
    owned_total = sum(len(owned_pages(c, ns, rank)) for ns, rank in POOLS)
    c.close()
    return owned_total


class OwnershipWatcher(threading.Thread):
    """Checks every pool's ownership every 2 s while the load runs."""

    def __init__(self, srv, stop):
        super().__init__(daemon=True)
        self.srv = srv
        self.stop = stop
        self.checks = 0
        self.error = None

    def run(self):
        c = harness.Client(self.srv.port, timeout=30 * harness.SLOWDOWN)
        try:
            while not self.stop.wait(2.0):
                for ns, rank in POOLS:
                    owned_pages(c, ns, rank)
                    self.checks += 1
        except BaseException as e:  # noqa: B902 - reported by run_load
            self.error = e
        finally:
            c.close()


def run_load(srv, seconds, clients, pages, abandon=0.0, clear_rate=0.0002, monitor=None):
    """Run the clients for `seconds`; monitor(tally, elapsed) is called about
    once a second."""
    tally = Tally()
    stop = threading.Event()
    LoadClient.pages = pages
    threads = [LoadClient(srv, tally, seed, stop, abandon, clear_rate) for seed in range(clients)]
    watcher = OwnershipWatcher(srv, stop)
    threads.append(watcher)
    t0 = time.monotonic()
    with harness.running(threads, stop, 60):
        while time.monotonic() - t0 < seconds:
            time.sleep(min(1.0, max(0.0, seconds - (time.monotonic() - t0))))
            expect_true(srv.alive(), "the server died under load")
            if monitor:
                monitor(tally, time.monotonic() - t0)
    took = time.monotonic() - t0
    lat = sorted(tally.latencies) or [0.0]
    ms = [1000 * lat[len(lat) // 2], 1000 * lat[int(len(lat) * 0.99)], 1000 * lat[-1]]
    print("# load: %d clients, %.1f s, %d requests (%.0f/s), statuses %s, p50 %.1f ms, p99 %.1f "
          "ms, max %.1f ms, 5xx %d, unexpected %d, connection errors %d, ownership checked "
          "%d times during the load"
          % (clients, took, tally.requests, tally.requests / took,
             dict(sorted(tally.status.items())), ms[0], ms[1], ms[2], tally.fivexx(),
             len(tally.unexpected), len(tally.conn_errors), watcher.checks), flush=True)
    if watcher.error is not None:
        raise AssertionError("ownership during the load: %s" % (watcher.error,))
    expect_eq(tally.fivexx(), 0, "5xx answers under load (the first: %r)" % (tally.server_errors,))
    expect_eq(tally.conn_errors, [], "connection errors and wrong answers under load")
    expect_eq(tally.unexpected, [], "unexpected statuses under load")
    expect_true(tally.requests > clients, "hardly any request was made")
    return tally


def server_flags(*flags):
    return flags + (("--in-memory",) if OPTS["in_memory"] else ())


def pool_counters(srv):
    """{(namespace, rank): (evictions, expired reservations)}."""
    return {k: (p.get("evictions", 0), p.get("expired_reservations", 0))
            for k, p in srv.stats().items()}


class CounterSum:
    """Evictions and expired reservations summed over samples, across the
    resets of a pool's counters when /clear forgets the pool."""

    def __init__(self):
        self.last = {}
        self.evictions = self.expired = 0

    def sample(self, srv):
        now = pool_counters(srv)
        for k, (ev, ex) in now.items():
            pev, pex = self.last.get(k, (0, 0))
            self.evictions += ev - pev if ev >= pev else ev
            self.expired += ex - pex if ex >= pex else ex
        self.last = now


def test_load_of_every_route_by_many_clients_keeps_page_ownership_with_zero_5xx():
    with Server(*server_flags("--read-lease", "0.5")) as srv:
        initialize(srv, 96)
        run_load(srv, OPTS["seconds"], OPTS["clients"], 96)
        owned = check_ownership(srv)
        print("# after the load: %d pages owned; /v1/check ok, no page owned twice" % owned,
              flush=True)


def test_soak_rss_levels_off_and_no_descriptor_leaks_under_constant_eviction_and_expiry():
    minutes = OPTS["soak"]
    with Server(*server_flags("--reservation-timeout", "1", "--read-lease", "0.2",
                              "--idle-timeout", "30")) as srv:
        pid = srv.proc.pid
        initialize(srv, 48)
        samples = []
        counters = CounterSum()
        base_rss, base_fds = proc_figures(pid)
        print("# soak: start rss %d KiB, fds %d" % (base_rss, base_fds), flush=True)
        ticks = {"sample": 5.0, "print": 60.0}

        def monitor(tally, elapsed):
            if elapsed >= ticks["sample"]:
                counters.sample(srv)
                ticks["sample"] += 5
            if elapsed < ticks["print"]:
                return
            ticks["print"] += 60
            rss, fds = proc_figures(pid)
            samples.append((elapsed / 60.0, rss, fds))
            print("# soak: t=%5.1f min rss %6d KiB fds %3d requests %8d evictions %8d expired "
                  "reservations %7d 5xx %d" % (elapsed / 60.0, rss, fds, tally.requests,
                                               counters.evictions, counters.expired,
                                               tally.fivexx()), flush=True)
        # /clear about once a minute: it forgets every pool (and its memory).
        run_load(srv, minutes * 60, min(OPTS["clients"], 16), 48, abandon=0.1,
                 clear_rate=0.00002, monitor=monitor)
        check_ownership(srv)
        time.sleep(1)
        end_rss, end_fds = proc_figures(pid)
        print("# soak: end rss %d KiB, fds %d" % (end_rss, end_fds), flush=True)
        expect_true(len(samples) >= 3, "too few samples for a curve")
        third = len(samples) // 3
        middle = sum(s[1] for s in samples[third:2 * third]) / max(1, third)
        last = sum(s[1] for s in samples[2 * third:]) / max(1, len(samples) - 2 * third)
        expect_true(last <= middle * 1.10 and last - middle < 8 * 1024,
                    "RSS still grows: middle third %.0f KiB, last third %.0f KiB" % (middle, last))
        # Once the clients are gone the descriptors come back to the start.
        harness.wait_for(lambda: proc_figures(pid)[1] <= base_fds + 2, 10,
                         what="descriptors back to %d (now %d)" % (base_fds, proc_figures(pid)[1]))


# One form per run: the soak replaces the short load.
if OPTS["soak"]:
    del test_load_of_every_route_by_many_clients_keeps_page_ownership_with_zero_5xx
else:
    del test_soak_rss_levels_off_and_no_descriptor_leaks_under_constant_eviction_and_expiry

if __name__ == "__main__":
    harness.main(globals())

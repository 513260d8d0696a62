#!/usr/bin/python3
"""Page integrity under the engines' real write and read paths.

3FS is simulated: per pool, page -> the key whose KV it holds, and who is
writing it right now. Workers behave like each engine and talk to the real
server through `requests` sessions with the stock clients' retry policy
(Retry(total=3, backoff_factor=0.3, status_forcelist=[500, 502, 503, 504],
allowed_methods=["GET", "POST"]), no timeout):

  vLLM save     batch_allocate a prefix chain; give up if any page is -1;
                write EVERY returned page (hits included), each after a random
                delay; confirm_write every (key, page).
  vLLM load     batch_exists on a prefix chain; get_locations of the existing
                prefix; read each page, with a random delay.
  SGLang save   reserve_and_allocate_page_indices; write only the new pages;
                confirm the written ones, release the rest (a write fails now
                and then).
  SGLang load   exists, get_page_indices, read.

Pools are tiny, so eviction never stops. The oracle, checked at every step:
no page is ever being written for two different keys at once, and a read
finds the content of the key that the server named for that page, both
before and after the read's delay.

HF3FS_INTEGRITY_SECONDS (default 4) sets the length of each run; the long
form is e.g. HF3FS_INTEGRITY_SECONDS=60.
"""

import hashlib
import os
import random
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Server, expect_true, v_init, s_init  # noqa: E402

from harness import stock_session  # noqa: E402

try:
    import requests
except ImportError:  # Debian's python3-requests, installed by `make deps`
    requests = None

SECONDS = float(os.environ.get("HF3FS_INTEGRITY_SECONDS", "4"))
PAGES = 48               # per rank: tiny, so that eviction never stops
RANKS = 2
CHAINS, CHAIN_LEN = 30, 10   # 300 distinct keys per dialect
VLLM_WORKERS = 6
SGLANG_WORKERS = 6
SG_NS = "sg"
WRITE_DELAY = 0.004      # seconds, upper bound of one page's write
READ_DELAY = 0.02        # seconds, upper bound of a read (well within the read lease)
# HF3FS_INTEGRITY_WRITE_LEASE=0 switches the write protection off, to show
# that this test fails without it ("omit": do not pass the flag at all).
WRITE_LEASE = os.environ.get("HF3FS_INTEGRITY_WRITE_LEASE", "10")
LEASE_FLAGS = ("--reservation-timeout", "10", "--read-lease", "5") + \
    (() if WRITE_LEASE == "omit" else ("--write-lease", WRITE_LEASE))


def chain_keys(dialect):
    """CHAINS prefix chains of CHAIN_LEN 64-hex keys (content hashes)."""
    return [[hashlib.sha256(("%s-%d-%d" % (dialect, c, i)).encode()).hexdigest()
             for i in range(CHAIN_LEN)] for c in range(CHAINS)]


class Files:
    """The simulated 3FS files and the oracle."""

    def __init__(self):
        self.lock = threading.Lock()
        self.content = {}   # (ns, rank, page) -> key last written there
        self.writing = {}   # (ns, rank, page) -> {key: writers now}
        self.breaches = []
        self.evictions_before_restart = 0
        self.counts = {"pages written": 0, "pages read": 0, "hits rewritten": 0,
                       "saves given up": 0, "requests failed": 0}

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] += n

    def breach(self, msg):
        if len(self.breaches) < 20:
            self.breaches.append(msg)
        else:
            self.breaches[-1] = "... and more"

    def write(self, ns, rank, page, key):
        slot = (ns, rank, page)
        with self.lock:
            active = self.writing.setdefault(slot, {})
            others = [k for k, n in active.items() if n > 0 and k != key]
            if others:
                self.breach("page %r written for %s while being written for %s"
                            % (slot, key[:12], others[0][:12]))
            active[key] = active.get(key, 0) + 1
            if self.content.get(slot) == key:
                self.counts["hits rewritten"] += 1  # the page held this key already
            self.content[slot] = key
            self.counts["pages written"] += 1
        time.sleep(random.uniform(0, WRITE_DELAY))
        with self.lock:
            self.content[slot] = key
            self.writing[slot][key] -= 1

    def _check_read(self, slot, key, when):
        found = self.content.get(slot)
        writers = [k for k, n in self.writing.get(slot, {}).items() if n > 0 and k != key]
        if found != key or writers:
            self.breach("read of %r for %s %s the delay found %s%s"
                        % (slot, key[:12], when, (found or "nothing")[:12],
                           " being written for %s" % writers[0][:12] if writers else ""))

    def read(self, ns, rank, page, key):
        slot = (ns, rank, page)
        with self.lock:
            self._check_read(slot, key, "before")
            self.counts["pages read"] += 1
        time.sleep(random.uniform(0, READ_DELAY))
        with self.lock:
            self._check_read(slot, key, "after")


class Worker(threading.Thread):
    def __init__(self, files, base, stop, seed):
        super().__init__(daemon=True)
        self.files, self.base, self.stop = files, base, stop
        self.rng = random.Random(seed)
        self.session = stock_session()
        self.error = None

    def post(self, path, body):
        r = self.session.post(self.base() + path, json=body)
        if r.status_code >= 400:  # the stock clients raise on any non-2xx
            raise RuntimeError("%s -> %d %s" % (path, r.status_code, r.text[:200]))
        return r.json() if r.status_code == 200 else None

    def run(self):
        try:
            while not self.stop.is_set():
                try:
                    self.step()
                except (requests.ConnectionError, requests.exceptions.RetryError,
                        RuntimeError) as e:
                    # A stock client raises (a non-2xx answer, its retries
                    # spent on 503s) and its engine goes on; during a restart
                    # or a failover that is expected, otherwise a failure
                    # (each printed: the log of a failed run says which).
                    self.files.count("requests failed")
                    print("# request failed: %s" % str(e)[:300], flush=True)
                    time.sleep(0.05)
        except BaseException as e:  # noqa: B902 - reported by the test
            self.error = e

    def chain(self, chains):
        c = self.rng.choice(chains)
        return c[:self.rng.randint(1, len(c))]

    def chain_to_save(self):
        """A chain of the class's chains, a rank, and the chain as a save
        sends it: each key with the key before it (None for the first)."""
        keys = self.chain(self.chains)
        rank = self.rng.randrange(RANKS)
        return keys, rank, [[k, keys[i - 1] if i else None] for i, k in enumerate(keys)]


class VllmSaver(Worker):
    chains = chain_keys("vllm")

    def step(self):
        keys, rank, items = self.chain_to_save()
        res = self.post("/keys/batch_allocate", {"rank": rank, "keys": items})["results"]
        if any(page == -1 for _, page in res):
            self.files.count("saves given up")
            return
        for key, page in res:  # every page, hits included
            self.files.write("kv", rank, page, key)
        self.post("/keys/confirm_write", {"rank": rank, "confirmations": res})


class VllmLoader(Worker):
    chains = VllmSaver.chains

    def step(self):
        keys = self.chain(self.chains)
        exists = self.post("/keys/batch_exists", {"keys": keys})["exists"]
        n = 0
        while n < len(keys) and exists[n]:
            n += 1
        if n == 0:
            return
        rank = self.rng.randrange(RANKS)
        locs = self.post("/keys/get_locations", {"rank": rank, "keys": keys[:n]})["locations"]
        for key, page in zip(keys, locs):
            if page is None:
                break  # no longer complete: the engine stops its prefix there
            self.files.read("kv", rank, page, key)


class SglangSaver(Worker):
    chains = chain_keys("sglang")

    def step(self):
        keys, rank, items = self.chain_to_save()
        idx = self.post("/%d/reserve_and_allocate_page_indices" % rank,
                        {"keys": items, "namespace": SG_NS})["indices"]
        written, release = [], []
        for key, (existed, page) in zip(keys, idx):
            if existed or page < 0:
                continue  # SGLang does not rewrite hits
            if self.rng.random() < 0.1:
                release.append(page)  # this write failed: give the page back
                continue
            self.files.write(SG_NS, rank, page, key)
            written.append([key, page])
        self.post("/%d/confirm_write" % rank, {"written_keys_to_confirm": written,
                                               "pages_to_release": release,
                                               "namespace": SG_NS})


class SglangLoader(Worker):
    chains = SglangSaver.chains

    def step(self):
        keys = self.chain(self.chains)
        rank = self.rng.randrange(RANKS)
        exists = self.post("/%d/exists" % rank, {"keys": keys, "namespace": SG_NS})["exists"]
        present = [k for k, e in zip(keys, exists) if e]
        if not present:
            return
        pages = self.post("/%d/get_page_indices" % rank,
                          {"keys": present, "namespace": SG_NS})["indices"]
        for key, page in zip(present, pages):
            if page is not None:
                self.files.read(SG_NS, rank, page, key)


def run_engines(srv_holder, seconds, restart_at=None, extra_flags=(), restarter=None,
                meanwhile=None):
    """Run every kind of worker against the server for `seconds`; with
    restart_at, kill -9 the server at that moment and start it again on the
    same port and data directory (or call restarter(), which restarts
    something else); meanwhile() runs on a thread of its own while the
    workers do (what it raises fails the run). Returns (files, pool stats)."""
    if requests is None:
        raise AssertionError("python3-requests is missing (make deps installs it)")
    files = Files()
    stop = threading.Event()
    kinds = [VllmSaver] * VLLM_WORKERS + [VllmLoader] * 2 + \
            [SglangSaver] * SGLANG_WORKERS + [SglangLoader] * 2

    def base_of(i):  # worker i talks to front end i % len(srv_holder)
        return lambda: srv_holder[i % len(srv_holder)].url

    workers = [kind(files, base_of(seed), stop, seed) for seed, kind in enumerate(kinds)]
    for w in workers:
        w.start()
    try:
        t0 = time.monotonic()
        side, side_errors = None, []
        if meanwhile:
            def side_run():
                try:
                    meanwhile()
                except BaseException as e:  # noqa: B902 - raised below
                    side_errors.append(e)
            side = threading.Thread(target=side_run, daemon=True)
            side.start()
        if restart_at is not None:
            time.sleep(restart_at)
            # pool counters start again at 0 after a restart: keep the first half's
            files.evictions_before_restart = sum(p["evictions"]
                                                 for p in srv_holder[0].stats().values())
            if restarter:
                restarter()
            else:
                srv_holder[0] = restart(srv_holder[0], extra_flags)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        if side:
            side.join(timeout=60 * harness.SLOWDOWN)
            expect_true(not side.is_alive(), "meanwhile() did not end")
            if side_errors:
                raise side_errors[0]
        # A loaded machine does less in those seconds: go on until the run has
        # exercised what check_run requires (or for four times as long). After
        # meanwhile(): the pools' eviction counts are a node's, volatile, and
        # a failover or a restart there can have counted them again from 0.
        limit = max(t0 + 4 * seconds * harness.SLOWDOWN,
                    time.monotonic() + seconds * harness.SLOWDOWN)
        while not exercised(files, srv_holder[0]) and time.monotonic() < limit:
            time.sleep(0.25)
    finally:
        stop.set()  # whatever failed above, the workers end
    for w in workers:
        w.join(timeout=60 * harness.SLOWDOWN)
        expect_true(not w.is_alive(), "a worker hung (no timeout, like the stock clients)")
        if w.error:
            raise w.error
    # the stats as a stock client would read them: sent again on a 503 (a
    # node of a cluster refused for a moment after a failover)
    deadline = time.monotonic() + 10 * harness.SLOWDOWN
    while True:
        try:
            return files, srv_holder[0].stats()
        except AssertionError as e:
            if "-> 503" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def restart(srv, extra_flags):
    """kill -9 and start again on the same port and data directory."""
    data, port = os.path.join(srv.workdir, "data"), srv.port
    keep = srv.workdir
    srv.workdir = None  # keep the data directory through _reap
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    srv._reap()
    # over Redis (HF3FS_TEST_ENGINE=redis): the same database, the front end restarted
    new = Server("--data-dir", data, *LEASE_FLAGS, *extra_flags, persistence=False, port=port,
                 store=srv.store)
    new.start()
    new.extra_dir = keep
    return new


def initialize(srv):
    c = srv.client()
    for rank in range(RANKS):
        v_init(c, rank, PAGES)
        s_init(c, rank, PAGES, ns=SG_NS)
    c.close()


def report(name, files, stats):
    evictions = evictions_of(files, stats)
    print("# %s: %s, evictions %d, breaches %d"
          % (name, ", ".join("%s %d" % kv for kv in files.counts.items()), evictions,
             len(files.breaches)), flush=True)
    return evictions


# What a run must have done to prove anything (more than these counts).
AT_LEAST = {"pages written": 100, "pages read": 50, "hits rewritten": 20}
AT_LEAST_EVICTIONS = 20


def evictions_of(files, stats):
    return files.evictions_before_restart + sum(p["evictions"] for p in stats.values())


def exercised(files, srv):
    if any(files.counts[what] <= n for what, n in AT_LEAST.items()):
        return False
    try:
        return evictions_of(files, srv.stats()) > AT_LEAST_EVICTIONS
    except (OSError, AssertionError):
        return False  # the server is restarting


def check_run(name, files, stats, no_failures=False):
    """The run kept every page's integrity and exercised it; with
    no_failures (a run without a fault), no request failed."""
    evictions = report(name, files, stats)
    expect_true(not files.breaches, "page integrity broken:\n  " + "\n  ".join(files.breaches))
    if no_failures:
        expect_true(files.counts["requests failed"] == 0,
                    "requests failed without a fault: %r" % files.counts)
    # The run must have exercised what it protects.
    for what, n in AT_LEAST.items():
        expect_true(files.counts[what] > n, "too few %s: %r" % (what, files.counts))
    expect_true(evictions > AT_LEAST_EVICTIONS,
                "the pools did not evict (%d): the run proves nothing" % evictions)


def test_no_page_is_written_for_two_keys_nor_read_stale_under_both_engines_write_paths():
    holder = [Server(*LEASE_FLAGS).start()]
    try:
        initialize(holder[0])
        files, stats = run_engines(holder, SECONDS)
        check_run("in memory and log", files, stats, no_failures=True)
        holder[0].check()
    finally:
        holder[0].stop()


@harness.redis_only
def test_no_page_is_written_for_two_keys_with_workers_split_across_two_front_ends():
    """Over Redis (or a Redis Cluster) two front ends serve one state: the
    workers of every kind alternate between them."""
    first = Server(*LEASE_FLAGS).start()
    holder = [first]
    try:
        holder.append(Server(*LEASE_FLAGS, store=first.store).start())
        initialize(first)
        files, stats = run_engines(holder, SECONDS)
        check_run("two front ends", files, stats, no_failures=True)
        first.check()
    finally:
        for srv in holder:
            srv.stop()


def test_no_page_is_shared_across_a_kill_9_restart_in_the_middle_of_writes_and_reads():
    holder = [Server(*LEASE_FLAGS).start()]
    try:
        initialize(holder[0])
        files, stats = run_engines(holder, SECONDS, restart_at=SECONDS / 2)
        check_run("with a kill -9 restart", files, stats)
        holder[0].check()
    finally:
        extra = getattr(holder[0], "extra_dir", None)
        holder[0].stop()
        if extra:
            shutil.rmtree(extra, ignore_errors=True)


@harness.embedded_only  # it starts a redis-server of its own, to restart it
def test_no_page_is_shared_across_a_redis_restart_from_its_aof_in_the_middle_of_the_load():
    """Over Redis, the read leases lived in the killed redis-server only: the
    pages read just before are leased again for one read lease after the
    AOF is loaded (docs/protocol.md, "What a read changes")."""
    from redis_server import RedisServer
    with RedisServer(appendonly=True) as redis:
        holder = [Server(*LEASE_FLAGS, store=redis.url).start()]
        try:
            initialize(holder[0])

            def restart_redis():
                redis.kill9()
                redis.start()
            files, stats = run_engines(holder, SECONDS, restart_at=SECONDS / 2,
                                       restarter=restart_redis)
            check_run("with a Redis restart from its AOF", files, stats)
            holder[0].check()
        finally:
            holder[0].stop()


if __name__ == "__main__":
    harness.main(globals())

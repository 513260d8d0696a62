#!/usr/bin/python3
"""Upgrades from the previous release (prev_release.py builds it from this
repository's history) with no outage, in either order
(docs/operations.md "Upgrading with no outage").

`make test` runs the short form: the tests that need only the previous
release's module (about 4 s of CPU to build once). `make test-upgrade` (HF3FS_UPGRADE_FULL=1) runs
everything: the previous release's front ends too, its data directory, and
the cluster's three shards in both orders under the stock clients'
page-integrity load (test_page_integrity.py's workers and oracle).
"""

import hashlib
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import prev_release  # noqa: E402
import test_page_integrity as pi  # noqa: E402
from harness import (Server, expect_eq, expect_true, s_alloc, s_confirm, s_exists,  # noqa: E402
                     s_init, s_pages, stock_session, v_alloc, v_confirm, v_exists, v_init,
                     v_locations, wait_for)
import redis_cluster  # noqa: E402
from redis_cluster import RedisCluster  # noqa: E402
from redis_server import RedisServer, module_path  # noqa: E402

FULL = os.environ.get("HF3FS_UPGRADE_FULL") == "1"
_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
with open(os.path.join(_ROOT, "VERSION")) as _f:
    RELEASE = _f.read().strip()


def full_only(fn):
    """A test of make test-upgrade only (it needs the previous release's
    front end, or runs for long)."""
    def run():
        if not FULL:
            raise harness.Skip("make test-upgrade runs it (HF3FS_UPGRADE_FULL=1)")
        fn()
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def keys_of(word, n):
    return [hashlib.md5(("%s-%d" % (word, i)).encode()).hexdigest() for i in range(n)]


def suffixed_keys():
    """SGLang's suffixed keys (`<64 hex>-k`, `-v`, `<32 hex>_<pool>`: this
    release packs them, the previous one kept them as text) and the shapes
    at the bounds of the packed form: upper case hex, 63 and 65 hex, a
    suffix of 16 and of 17 bytes, suffixes that look like hex."""
    h32, h64 = keys_of("sfx", 1)[0], "".join(keys_of("sfx64", 2))
    pairs = [k * 2 for k in keys_of("mha", 8)]
    return ([k + "-k" for k in pairs] + [k + "-v" for k in pairs]
            + [k + "_mamba" for k in keys_of("pool", 4)]
            + [h64.upper() + "-k", h64[:63] + "-k", h64 + "0", h64 + "ab", h32 + "abc",
               h32 + "ABCD", h64 + "_" + "p" * 15, h64 + "_" + "p" * 16,
               h32 + "_" + "p" * 15, h32 + "_" + "p" * 16])


def write_state(c):
    """Pools of both dialects with confirmed keys; what they hold."""
    vk, sk = keys_of("v", 40), [k * 2 for k in keys_of("s", 40)] + suffixed_keys()
    v_init(c, 0, 256)
    pages = v_alloc(c, 0, vk)
    v_confirm(c, 0, list(zip(vk, pages)))
    s_init(c, 0, 256, ns="sg")
    r = c.post("/0/reserve_and_allocate_page_indices",
               {"keys": [[k, ""] for k in sk], "namespace": "sg"})
    spages = [p for _, p in r.json()["indices"]]
    s_confirm(c, 0, list(zip(sk, spages)), ns="sg")
    return vk, sk


def expect_state(c, vk, sk, want):
    """Every key kept at its page (want: the pages read before)."""
    expect_eq(v_exists(c, vk), [True] * len(vk), "vLLM keys exist")
    expect_eq(s_exists(c, 0, sk, ns="sg"), [True] * len(sk), "SGLang keys exist")
    expect_eq((v_locations(c, 0, vk), s_pages(c, 0, sk, ns="sg")), want, "pages kept")


class Poller(threading.Thread):
    """A vLLM batch_exists every 20 ms (its own connection each time):
    (monotonic time, status) of every answer."""

    def __init__(self, srv, keys):
        super().__init__(daemon=True)
        self.srv, self.keys, self.seen = srv, keys, []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                status = self.srv.client(timeout=5).post("/keys/batch_exists",
                                                         {"keys": self.keys}).status
            except OSError:
                status = 0
            self.seen.append((time.monotonic(), status))
            time.sleep(0.02)


def restart_redis_under_load(redis, srv, keys, module):
    """Stop Redis (its AOF fsynced), start it with `module`, while a poller
    calls: every answer 200 but 503s between the stop and the front end's
    reconnection (within 3 s of Redis answering)."""
    poll = Poller(srv, keys)
    poll.start()
    time.sleep(0.2)
    t_stop = time.monotonic()
    redis.stop()
    redis.module = os.path.abspath(module)
    redis.start()
    t_up = time.monotonic()
    c = srv.client()
    wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
             what="/health 200 after Redis restarted")
    time.sleep(0.3)
    poll.stop.set()
    poll.join()
    bad = [(round(t - t_stop, 2), s) for t, s in poll.seen
           if s != 200 and not (s == 503 and t_stop <= t <= t_up + 3 * harness.SLOWDOWN)]
    expect_eq(bad, [], "answers other than 200, or 503 outside the restart (s after stop)")
    expect_true(any(s == 200 and t > t_up for t, s in poll.seen), "served after the restart")


def modules_seen(srv):
    """/v1/stats' redis_modules: what the front end learned of each node."""
    return srv.client().get("/v1/stats").json()["server"]["redis_modules"]


def expect_curve(srv, keys, coarse, advice=True):
    """After a few completeness reads, the namespace's estimate: at the 5
    scales 0.25 to 4 and advice marked coarse over a module without the
    capability fine-curve (the previous release's) or from a front end of
    the previous release (advice=False: it has none), at 21 scales
    otherwise."""
    c = srv.client()
    for _ in range(3):
        v_exists(c, keys)
    ns = [n for n in c.get("/v1/stats").json()["namespaces"] if n["namespace"] == "kv"][0]
    scales = sorted(ns["hit_ratio_at"] or {}, key=float)
    expect_eq((len(scales), ns["advice"]["coarse"] if advice else "advice" in ns),
              (5 if coarse else 21, coarse and advice), "the curve's scales: %r" % scales)
    if coarse:
        expect_eq(scales, ["0.25", "0.5", "1", "2", "4"], "the coarse curve's scales")


def test_a_front_end_serves_on_while_its_redis_restarts_from_the_aof_onto_the_new_module():
    """Front ends first, then Redis: this release's front end over the
    previous release's module, Redis restarted from its AOF with this
    release's module. Every key kept; calls refused only while Redis
    restarts; the front end learns the new module's release."""
    with RedisServer(appendonly=True, loadmodule=prev_release.module()) as redis:
        with Server(store=redis.url) as srv:
            c = srv.client()
            vk, sk = write_state(c)
            want = (v_locations(c, 0, vk), s_pages(c, 0, sk, ns="sg"))
            seen = modules_seen(srv)["127.0.0.1:%d" % redis.port]
            expect_eq((seen["release"], seen["lowest"], seen["highest"], seen["speaking"]),
                      (None, 5, 5, 5), "a module without HF3FS.VERSION speaks its baseline")
            expect_curve(srv, vk, coarse=True)
            restart_redis_under_load(redis, srv, vk, module_path())
            expect_state(srv.client(), vk, sk, want)
            seen = modules_seen(srv)["127.0.0.1:%d" % redis.port]
            expect_eq((seen["release"], seen["speaking"], seen["capabilities"]["version"],
                       seen["capabilities"]["fine-curve"]),
                      (RELEASE, 5, True, True), "the new module as the front end learned it")
            expect_curve(srv, vk, coarse=False)
            m = srv.client().get("/metrics").body.decode()
            expect_true(re.search(r'hf3fs_metad_store_module_info\{node="127\.0\.0\.1:%d",'
                                  r'release="%s",[^}]*speaking="5"' % (redis.port, RELEASE), m),
                        "hf3fs_metad_store_module_info of the node")
            srv.check()


def test_values_the_previous_module_saved_load_from_its_rdb_and_its_rewritten_aof_with_every_key():
    """The previous release's module saves its values (SGLang's suffixed
    keys among them, as text: encoding 3) to an RDB and to an AOF rewritten
    without an RDB preamble (HF3FS.REBUILD); this release's module, which
    packs those keys, loads each: the same digest (every key's bytes, its
    page, the free order) and every key at its page."""
    extra = ["--enable-debug-command", "yes", "--aof-use-rdb-preamble", "no"]
    with RedisServer(appendonly=True, loadmodule=prev_release.module(), extra=extra) as redis:
        with Server(store=redis.url) as srv:
            c = srv.client()
            vk, sk = write_state(c)
            want = (v_locations(c, 0, vk), s_pages(c, 0, sk, ns="sg"))
        digest = redis.cmd("DEBUG", "DIGEST")
        redis.cmd("SAVE")
        redis.cmd("BGREWRITEAOF")
        wait_for(lambda: all(b in redis.cmd("INFO", "persistence") for b in (
            b"aof_rewrite_in_progress:0", b"aof_rewrite_scheduled:0")),
            30 * harness.SLOWDOWN, what="the AOF rewritten")
        aof = b"".join(open(os.path.join(d, f), "rb").read() for d, _, fs in os.walk(redis.dir)
                       for f in fs if ".aof" in f)
        expect_true(b"HF3FS.REBUILD" in aof, "the rewritten AOF rebuilds the values")
        for appendonly, source in ((False, "the RDB"), (True, "the rewritten AOF")):
            redis.stop()
            redis.appendonly, redis.module = appendonly, module_path()
            redis.start()
            expect_eq(redis.cmd("DEBUG", "DIGEST"), digest, "the digest after a load of " + source)
            with Server(store=redis.url) as srv:
                expect_state(srv.client(), vk, sk, want)


def test_a_redis_whose_module_speaks_no_command_set_of_the_front_end_gets_no_command():
    """A module that pretends its baseline is a later command set (its
    test-version): the front end refuses to start over it (exit 6); a
    running front end over a Redis restarted with it answers 503, /health
    says why, and serves again once Redis has a module it speaks."""
    with RedisServer(appendonly=True, module_args=["test-version", "7", "8"]) as redis:
        srv = Server(store=redis.url)
        try:
            srv.start()
            raise AssertionError("the front end started over a module of sets 7 to 8")
        except harness.ServerError as e:
            expect_true("status 6" in str(e) and "command sets 7 to 8" in str(e),
                        "exit 6 naming the sets: %s" % str(e)[:600])
        redis.stop()
        redis.module_args = []
        redis.start()
        with Server(store=redis.url) as srv:
            c = srv.client()
            vk, sk = write_state(c)
            redis.stop()
            redis.module_args = ["test-version", "7", "8"]
            redis.start()
            wait_for(lambda: c.get("/health").status == 503, 10 * harness.SLOWDOWN,
                     what="/health 503 over a module it cannot speak")
            detail = c.get("/health").json()["detail"]
            expect_true("command sets 7 to 8" in detail and "sends that node nothing" in detail,
                        "/health says why: %r" % detail)
            expect_eq(c.post("/keys/batch_exists", {"keys": vk}).status, 503, "calls refused")
            redis.stop()
            redis.module_args = []
            redis.start()
            wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                     what="serving again")
            expect_eq(v_exists(c, vk), [True] * len(vk), "keys kept")


@full_only
def test_a_front_end_of_the_previous_release_serves_on_through_a_redis_restarted_onto_the_new_module():
    """Redis first, then the front ends: the previous release's front end
    keeps serving over this release's module (its MODULE LIST check sees
    the baseline it needs), then is replaced by this release's."""
    with RedisServer(appendonly=True, loadmodule=prev_release.module()) as redis:
        old = Server(store=redis.url, binary=prev_release.server()).start()
        try:
            c = old.client()
            vk, sk = write_state(c)
            want = (v_locations(c, 0, vk), s_pages(c, 0, sk, ns="sg"))
            restart_redis_under_load(redis, old, vk, module_path())
            expect_state(old.client(), vk, sk, want)
            # its HF3FS.STATS without FINE: the new module answers the rows it reads
            expect_curve(old, vk, coarse=True, advice=False)
        finally:
            old.stop()
        with Server(store=redis.url) as srv:
            expect_state(srv.client(), vk, sk, want)
            srv.check()


@full_only
def test_a_data_directory_of_the_previous_release_opens_with_every_key_and_lease_rule():
    """The previous release writes a snapshot (at its clean stop) and a log
    tail after it (killed -9); this release opens the directory: every key
    at its page, a reservation made before still confirmable, and every
    owned page read-leased for one read lease after recovery (a full pool
    evicts nothing until it ends)."""
    lease = ("--read-lease", "1", "--reservation-timeout", "30")
    old = Server(*lease, binary=prev_release.server()).start()
    data = os.path.join(old.workdir, "data")
    c = old.client()
    vk, sk = write_state(c)
    old.workdir = None  # keep the data directory
    old.stop()  # a snapshot
    old = Server(*lease, "--data-dir", data, persistence=False,
                 binary=prev_release.server()).start()
    c = old.client()
    s_init(c, 0, 8, ns="full")
    full = [k * 2 for k in keys_of("full", 8)]
    s_confirm(c, 0, [(k, p) for k, (_, p) in zip(full, s_alloc(c, 0, full, ns="full"))],
              ns="full")
    held = keys_of("held", 1)
    held_page = v_alloc(c, 0, held)
    want = (v_locations(c, 0, vk), s_pages(c, 0, sk, ns="sg"))
    before = {k: {f: p[f] for f in ("free", "reserved", "owned")} for k, p in old.stats().items()}
    old.proc.kill()  # the log's tail after the snapshot
    old.proc.wait()
    old._reap()
    with Server(*lease, "--data-dir", data, persistence=False) as srv:
        c = srv.client()
        expect_state(c, vk, sk, want)
        after = {k: {f: p[f] for f in ("free", "reserved", "owned")}
                 for k, p in srv.stats().items()}
        expect_eq(after, before, "every pool's free, reserved and owned pages")
        new = [k * 2 for k in keys_of("new", 1)]
        expect_eq(s_alloc(c, 0, new, ns="full"), [(False, -1)],
                  "a full pool evicts nothing within the read lease after recovery")
        expect_eq(v_confirm(c, 0, list(zip(held, held_page))), None,
                  "the reservation made before is confirmed")
        expect_eq(v_locations(c, 0, held), held_page, "the confirmed key")
        wait_for(lambda: s_alloc(c, 0, new, ns="full")[0][1] >= 0, 5 * harness.SLOWDOWN,
                 what="eviction again once the read lease ended")
        srv.check()
    import shutil
    shutil.rmtree(os.path.dirname(data), ignore_errors=True)


# ---- a Redis Cluster, rolled over shard by shard under load ----

class Witness(threading.Thread):
    """Allocations and confirmations of unique keys in a pool too large to
    evict (SGLang, namespace "witness"), through the stock clients' session,
    alternating between the front ends: every acknowledged confirmation,
    to be found at the end."""

    def __init__(self, holder):
        super().__init__(daemon=True)
        self.holder, self.acked, self.failed = holder, {}, []
        self.stop = threading.Event()

    def run(self):
        s, i = stock_session(), 0
        while not self.stop.is_set():
            base = "http://127.0.0.1:%d" % self.holder[i % len(self.holder)].port
            keys = [hashlib.sha256(b"w%d-%d" % (i, j)).hexdigest() for j in range(4)]
            i += 1
            try:
                r = s.post(base + "/0/reserve_and_allocate_page_indices",
                           json={"keys": [[k, ""] for k in keys], "namespace": "witness"})
                if r.status_code != 200:
                    raise RuntimeError("allocation: %d %s" % (r.status_code, r.text[:200]))
                got = [[k, p] for k, (_, p) in zip(keys, r.json()["indices"]) if p >= 0]
                r = s.post(base + "/0/confirm_write",
                           json={"written_keys_to_confirm": got, "pages_to_release": [],
                                 "namespace": "witness"})
                if r.status_code >= 400:
                    raise RuntimeError("confirmation: %d %s" % (r.status_code, r.text[:200]))
                self.acked.update(got)
            except Exception as e:  # noqa: B902 - a stock client's failure, counted
                self.failed.append("%.2f %s" % (time.monotonic() - T0[0], str(e)[:300]))
            time.sleep(0.03)


T0 = [time.monotonic()]


def step(what):
    print("# %.2f %s" % (time.monotonic() - T0[0], what), flush=True)


def ask_acknowledgements(rc, primary):
    """REPLCONF GETACK * to each replica of primary: each sends the primary
    its acknowledgement at once (it answers nothing to the sender)."""
    for port in rc.replicas_of(primary):
        c = redis_cluster.Conn(port, rc.password, host=rc.host(port))
        try:
            c.sock.sendall(c.encode(("REPLCONF", "GETACK", "*")))
        finally:
            c.close()


def failover(rc, replica, primary):
    """The runbook's step 3: writes paused on the primary, its replicas
    asked for their acknowledgements (Redis sends them no GETACK while
    writes are paused, and a replica acknowledges on its own only once a
    second: a WAIT pending when the pause began would wait that long, and
    one pending when the failover demotes the primary is refused, which a
    front end of the previous release answers 507), then CLUSTER FAILOVER
    on the replica until it is the primary, and the pause lifted. Redis
    drops a manual failover without a word after 5 s (seen when another
    node's bus link to the replica was not up yet, which wait_bus_linked
    waits for), so the step is asked again while the replica is still
    one."""
    deadline = time.monotonic() + 30
    while True:
        rc.call(primary, "CLIENT", "PAUSE", str(PAUSE_MS), "WRITE")
        for _ in range(3):
            time.sleep(0.1)
            ask_acknowledgements(rc, primary)
        rc.call(replica, "CLUSTER", "FAILOVER")
        try:
            wait_for(lambda: rc.role(replica) == "master" and rc.role(primary) == "slave",
                     6, what="failover to %d" % replica)
            rc.call(primary, "CLIENT", "UNPAUSE")
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            step("failover to %d not done in 6 s: asked again" % replica)


# the runbook's pause (docs/operations.md): shorter than a change's deadline
# in a front end (--redis-timeout plus --redis-wait-timeout, 3 s by default)
PAUSE_MS = 2000


def upgrade_shard(rc, primary, spare, module):
    """The runbook's steps for one shard (docs/operations.md): the spare
    (on the new module) follows its primary, so that WAIT always has a
    replica; the replica restarted with the new module; CLUSTER FAILOVER
    to it; the old primary restarted with the new module."""
    replica = [p for p in rc.replicas_of(primary) if p != spare][0]
    rc.call(spare, "CLUSTER", "REPLICATE", rc.node_id(primary))
    rc.wait_replicas_online(primary, 2)
    step("spare %d follows %d" % (spare, primary))
    rc.kill9(replica)
    rc.restart(replica, module)
    rc.wait_replicas_online(primary, 2)
    rc.wait_bus_linked(replica)
    step("replica %d upgraded" % replica)
    failover(rc, replica, primary)
    rc.wait_replicas_online(replica, 2)
    step("failed over to %d" % replica)
    # the front ends' slot maps name the new primary within a second (their
    # monitors take the map every second): after that no change goes to the
    # old one, so none is in flight on it when it stops
    time.sleep(2)
    rc.kill9(primary)
    rc.restart(primary, module)
    rc.wait_replicas_online(replica, 2)
    rc.wait_ok()
    step("old primary %d upgraded" % primary)


def error_lines(srv):
    """A front end's error and warning lines (why a call failed)."""
    with open(srv._stderr_path, errors="replace") as f:
        return ["# front end %d: %s" % (srv.port, line.rstrip()[:400])
                for line in f if " error: " in line or " warn: " in line]


RETIRED = []  # the lines of the front ends replaced (their logs go as they stop)


def replace_front_end(holder, i, binary):
    """Stop front end i and start `binary` on its port and store."""
    old = holder[i]
    new = Server(*pi.LEASE_FLAGS, store=old.store, port=old.port, default_wait=True,
                 binary=binary)
    RETIRED.extend(error_lines(old))
    old.stop()
    holder[i] = new.start()


def rolling_upgrade(front_ends_first, shards):
    """Two front ends and a 3 + 3 cluster of the previous release (front
    ends of this one in the short form) under both dialects' load; the
    front ends replaced one at a time and `shards` shards upgraded, in the
    order asked. 0 pages written for two keys (the oracle), no stock call
    failing after its retries, 0 acknowledged confirmations lost."""
    old_bin = prev_release.server() if FULL else None
    new_mod = module_path()
    with RedisCluster(loadmodule=prev_release.module()) as rc:
        store = "redis-cluster://" + rc.seeds()
        holder = [Server(*pi.LEASE_FLAGS, store=store, default_wait=True,
                         binary=old_bin).start()]
        holder.append(Server(*pi.LEASE_FLAGS, store=store, default_wait=True,
                             binary=old_bin).start())
        witness = Witness(holder)
        try:
            pi.initialize(holder[0])
            s_init(holder[0].client(), 0, 16384, ns="witness")
            spare = rc.add_node(new_mod)

            def front_ends():
                for i in range(len(holder)):
                    if FULL:
                        replace_front_end(holder, i, None)

            def upgrade():
                time.sleep(0.5)
                if front_ends_first:
                    front_ends()
                for primary in rc.primaries_ports()[:shards]:
                    upgrade_shard(rc, primary, spare, new_mod)
                if not front_ends_first:
                    front_ends()
                time.sleep(0.5)

            T0[0] = time.monotonic()
            witness.start()
            files, stats = pi.run_engines(holder, pi.SECONDS, meanwhile=upgrade)
            witness.stop.set()
            witness.join()
            pi.check_run("rolling upgrade", files, stats)
            expect_eq(files.counts["requests failed"], 0, "stock calls failed after retries")
            expect_eq(witness.failed, [], "witness calls failed after retries")
            keys = sorted(witness.acked)
            expect_true(len(keys) > 20, "acknowledged confirmations: %d" % len(keys))
            c = holder[0].client()
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                expect_eq(s_pages(c, 0, chunk, ns="witness"), [witness.acked[k] for k in chunk],
                          "acknowledged confirmations kept")
            print("# %s: %d acknowledged confirmations, all kept" % (
                "front ends first" if front_ends_first else "shards first", len(keys)))
            holder[0].check()
        finally:
            witness.stop.set()
            for line in RETIRED + sum((error_lines(srv) for srv in holder), []):
                print(line)
            del RETIRED[:]
            for srv in holder:
                srv.stop()


def test_a_cluster_shard_rolls_onto_the_new_module_under_both_dialects_load_with_no_failed_call():
    """This release's two front ends, one shard upgraded by the runbook's
    steps: the short form of the two below, in make test."""
    rolling_upgrade(front_ends_first=True, shards=1)


@full_only
def test_front_ends_then_every_shard_upgrade_with_no_page_shared_and_no_failed_call():
    rolling_upgrade(front_ends_first=True, shards=3)


@full_only
def test_every_shard_then_the_front_ends_upgrade_with_no_page_shared_and_no_failed_call():
    rolling_upgrade(front_ends_first=False, shards=3)


if __name__ == "__main__":
    harness.main(globals())

"""The Redis engine over a Redis Cluster: a primary's death and a slot's move
under load.

A local cluster of 3 primaries + 3 replicas (redis_cluster.py,
cluster-node-timeout 2 s) is started once and shared by the tests, in
definition order (the failover test kills a primary, then restarts it as a
replica). A front end runs with --store redis-cluster://SEEDS; a load
generator allocates and confirms fresh keys in one pool (vLLM dialect, one
worker rank) and records every confirmation that was acknowledged (204).

After the fault, each test checks:
  - every acknowledged confirmation is there with its page (get_locations);
  - no page is owned by two keys, and GET /v1/check (each pool's invariants)
    holds;
  - the service came back (the bound: 5 s after the promotion).
and prints the figures: seconds of 5xx answers, kill -> promotion,
promotion -> first success.

A primary starved of CPU (SIGSTOP for a moment) under load: no 500.

Without --redis-wait, a front end over primaries that each have a replica
waits for one; over a cluster of its own with two primaries without
replicas, it waits on neither and says so, until a replica attached to one
makes that shard's changes wait for it. Concurrent requests share each
primary's pipelined connections.

Pages read on a primary just before it dies are kept by its promoted replica
for one read lease (read leases are volatile: the replica never saw them).

HF3FS_CLUSTER_LONG=1: three failovers in a row, and three slot moves.
These tests run whatever HF3FS_TEST_ENGINE says (they start their own cluster).
"""

import contextlib
import os
import random
import signal
import threading
import time

import harness
from harness import Server, expect_eq, expect_true, wait_for
import redis_cluster

LONG = os.environ.get("HF3FS_CLUSTER_LONG") == "1"
RANK = 0
PAGES = 1 << 20
FAILOVER_BOUND_S = 5.0

def cluster():
    return redis_cluster.shared(node_timeout_ms=2000)  # failovers under test


def pool_slot(rc, ns="kv", rank=RANK):
    key = "hf3fs:{%s}" % ns.encode().hex()  # the namespace's value: all its ranks
    return rc.call(rc.ports()[0], "CLUSTER", "KEYSLOT", key)


def front_end(rc, *flags):
    from redis_cluster import flush
    rc.wait_ok()
    flush(rc)
    return Server("--redis-wait", "1", "--redis-timeout", "1", *flags,
                  store="redis-cluster://" + rc.seeds()).start()


def init_pool(srv):
    """v_init, once every shard acknowledges with a replica again (a node
    restarted by the previous test may still be syncing)."""
    c = srv.client()
    deadline = time.monotonic() + 30
    while True:
        r = c.post("/rank/%d/initialize" % RANK, {"role": "worker", "num_pages": PAGES})
        if r.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    expect_eq(r.status, 200, "initialize status")


class Load(threading.Thread):
    """Allocates 8 fresh keys and confirms them, again and again; records
    (time, status) of every request and key -> page of every acknowledged
    confirmation."""

    def __init__(self, srv, seed):
        super().__init__(daemon=True)
        self.srv = srv
        self.rng = random.Random(seed)
        self.acked = {}
        self.log = []  # (monotonic, status or 0 for a broken connection)
        self.stop_flag = threading.Event()
        self.error = None

    def post(self, c, path, body):
        try:
            r = c.post(path, body)
        except OSError:
            self.log.append((time.monotonic(), 0))
            return None
        self.log.append((time.monotonic(), r.status))
        return r

    def run(self):
        c = self.srv.client(timeout=10)
        try:
            while not self.stop_flag.is_set():
                keys = ["%064x" % self.rng.getrandbits(256) for _ in range(8)]
                r = self.post(c, "/keys/batch_allocate", {"rank": RANK, "keys": keys})
                if r is None:
                    c = self.srv.client(timeout=10)
                    continue
                if r.status != 200:
                    time.sleep(0.02)
                    continue
                res = r.json()["results"]
                if any(p == -1 for _, p in res):
                    continue
                r = self.post(c, "/keys/confirm_write",
                              {"rank": RANK, "confirmations": res})
                if r is None:
                    c = self.srv.client(timeout=10)
                    continue
                if r.status == 204:
                    for k, p in res:
                        self.acked[k] = p
        except Exception as e:  # reported by the test
            self.error = e

    def finish(self):
        self.stop_flag.set()
        self.join(30)
        if self.error:
            raise self.error

    def first_success_after(self, t):
        for when, status in self.log:
            if when >= t and status in (200, 204):
                return when
        return None

    def failure_span(self, t0):
        """Seconds from the first failed answer at or after t0 to the last
        failed answer before the service came back for good."""
        fails = [w for w, s in self.log if w >= t0 and s not in (200, 204)]
        return (fails[-1] - fails[0]) if fails else 0.0


def verify(srv, acked):
    """Every acknowledged key owns its page; no page has two keys."""
    c = srv.client(timeout=30)
    keys = list(acked)
    for i in range(0, len(keys), 500):
        part = keys[i:i + 500]
        r = c.post("/keys/get_locations", {"rank": RANK, "keys": part})
        expect_eq(r.status, 200, "get_locations status")
        locs = r.json()["locations"]
        for k, p in zip(part, locs):
            expect_eq(p, acked[k], "page of acknowledged key %s" % k)
    pages = list(acked.values())
    expect_eq(len(set(pages)), len(pages), "distinct pages of distinct acknowledged keys")
    srv.check()


def wait_until_serving(srv, seconds=30):
    c = srv.client(timeout=5)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if c.post("/keys/batch_exists", {"keys": ["0" * 64]}).status == 200:
                return
        except OSError:
            c = srv.client(timeout=5)
        time.sleep(0.05)
    raise AssertionError("the front end did not serve again within %ss" % seconds)


def test_without_redis_wait_a_front_end_waits_for_one_replica_as_every_primary_has_one():
    rc = cluster()
    rc.wait_ok()
    for primary in rc.primaries_ports():  # a node a test before restarted may still sync
        rc.wait_replicas_online(primary, 1)
    redis_cluster.flush(rc)
    with Server("--redis-timeout", "1", store="redis-cluster://" + rc.seeds(),
                default_wait=True) as srv:
        store = srv.client().get("/v1/stats").json()["server"]["store"]
        expect_eq(store["wait_replicas"], 1, "the default over primaries that each have a replica")
        expect_true("redis-wait (the default): a primary's changes wait for one replica "
                    "(WAIT 1) once it has one in sync; 3 of 3 primaries have one now"
                    in srv.stderr(), srv.stderr())
        expect_eq(srv.client().get("/health").json(), {"status": "ok"}, "/health")
        init_pool(srv)
        load = Load(srv, seed=7)
        load.start()
        time.sleep(0.5)
        load.finish()
        expect_true(len(load.acked) > 0, "changes acknowledged under the default WAIT")
        verify(srv, load.acked)


def _waits(rc, port):
    """WAIT commands the node at port has run (INFO commandstats)."""
    for line in rc.call(port, "INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_wait:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_by_default_a_shard_is_waited_on_once_it_has_a_replica_and_health_names_the_others():
    """A cluster of two primaries without replicas (its own): a front end
    without --redis-wait waits on neither, and its log, /health and the
    gauge name both. A replica attached to one (CLUSTER REPLICATE) and in
    sync: that shard's changes wait for it (WAIT runs there), the other's
    still do not, and /health and the gauge name the other alone."""
    import metrics_text
    with redis_cluster.RedisCluster(primaries=2, replicas=0) as rc:
        a, b = rc.primaries_ports()
        addr = {p: "127.0.0.1:%d" % p for p in (a, b)}
        # one namespace whose one stripe is on each primary
        ns = {}
        for i in range(64):
            name = "w%d" % i
            ns.setdefault(rc.slot_owner(rc.keyslot("hf3fs:{%s}" % name.encode().hex())), name)
        with Server("--stripes", "1", "--redis-timeout", "1",
                    "--redis-wait-timeout", str(5 * harness.SLOWDOWN),
                    store="redis-cluster://" + rc.seeds(), default_wait=True) as srv:
            c = srv.client()

            def health():
                body = c.get("/health").json()
                return body["status"], sorted(body.get("unreplicated", []))

            def unreplicated():
                m = metrics_text.parse(c.get("/metrics").body.decode())
                return metrics_text.value(m, "hf3fs_metad_store_unreplicated_primaries")

            for p in (a, b):
                expect_true("Redis primary %s has no replica: its changes are not waited on"
                            % addr[p] in srv.stderr(), srv.stderr())
            expect_eq(health(), ("ok", sorted(addr.values())), "/health without replicas")
            expect_eq(unreplicated(), 2.0, "the gauge without replicas")
            harness.s_init(c, 0, 8, ns=ns[a])
            expect_eq(_waits(rc, a), 0, "WAITs on a primary without a replica")

            r = rc.add_node()
            rc.call(r, "CLUSTER", "REPLICATE", rc.node_id(a))
            rc.wait_replicas_online(a, 1)
            wait_for(lambda: health() == ("ok", [addr[b]]), 10 * harness.SLOWDOWN,
                     interval=0.1, what="/health naming the other primary alone")
            expect_eq(unreplicated(), 1.0, "the gauge once one primary has a replica")
            expect_true("Redis primary %s has a replica in sync: its changes wait for one"
                        % addr[a] in srv.stderr(), srv.stderr())
            harness.s_init(c, 1, 8, ns=ns[a])
            harness.s_init(c, 1, 8, ns=ns[b])
            expect_true(rc.call(a, "EXISTS", "hf3fs:{%s}" % ns[a].encode().hex()) == 1
                        and rc.call(b, "EXISTS", "hf3fs:{%s}" % ns[b].encode().hex()) == 1,
                        "each namespace on its primary")
            expect_true(_waits(rc, a) > 0, "a change waited for the replica of its primary")
            expect_eq(_waits(rc, b), 0, "WAITs on the primary without a replica")


def _clients(rc, port):
    """Clients of the node at port, from CLIENT LIST (less the asker)."""
    return len([ln for ln in rc.call(port, "CLIENT", "LIST").splitlines() if ln.strip()]) - 1


def test_concurrent_requests_share_the_flag_s_pipelined_connections_to_each_primary():
    """24 threads read 64 keys a request over a namespace of 3 stripes (a
    read touches every primary that holds one): a primary gains at most one
    client under the load (the second of the front end's 2 connections to
    each, --redis-connections 2; a routing handle per thread would add up to
    24), the reads went out on the shared connections (commands_pipelined),
    none through a handle, and every answer was 200 with the keys found."""
    rc = cluster()
    with front_end(rc, "--redis-connections", "2", "--stripes", "3") as srv:
        init_pool(srv)
        c = srv.client()
        keys = ["%032x" % i for i in range(64)]
        r = c.post("/keys/batch_allocate", {"rank": RANK, "keys": keys})
        expect_eq(r.status, 200, "allocate status")
        res = r.json()["results"]
        expect_eq(c.post("/keys/confirm_write", {"rank": RANK, "confirmations": res}).status,
                  204, "confirm status")
        expect_eq(c.post("/keys/batch_exists", {"keys": keys}).status, 200, "a first read")
        time.sleep(1.5)  # the monitor's first probe has connected its routing handle
        idle = {port: _clients(rc, port) for port in rc.primaries_ports()}
        before = c.get("/v1/stats").json()["server"]["store"]["cluster"]
        stop, errors, done, lock = threading.Event(), [], [0], threading.Lock()

        def reader():
            cc = srv.client(timeout=30 * harness.SLOWDOWN)
            while not stop.is_set():
                resp = cc.post("/keys/batch_exists", {"keys": keys})
                with lock:
                    if resp.status != 200 or resp.json()["exists"] != [True] * 64:
                        errors.append(resp.status)
                    done[0] += 1

        threads = [threading.Thread(target=reader, daemon=True) for _ in range(24)]
        for t in threads:
            t.start()
        most = {}
        try:
            deadline = time.monotonic() + 3.0 * harness.SLOWDOWN
            while time.monotonic() < deadline:
                for port in rc.primaries_ports():
                    most[port] = max(most.get(port, 0), _clients(rc, port))
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        after = c.get("/v1/stats").json()["server"]["store"]["cluster"]
        print("  clients per primary idle %r, under load %r; %d requests; pipelined %d, by "
              "handles %d" % (idle, most, done[0], after["commands_pipelined"] - before["commands_pipelined"],
                 after["commands_by_routing_handles"] - before["commands_by_routing_handles"]))
        expect_eq(errors, [], "answers other than 200 with every key found")
        expect_true(done[0] > 100, "the load ran: %d requests" % done[0])
        for port, n in most.items():
            expect_true(n <= idle[port] + 1, "clients of primary %d: %d under load, %d idle "
                        "(the second shared connection opens under load)" % (port, n, idle[port]))
        expect_true(after["commands_pipelined"] - before["commands_pipelined"] >= done[0],
                    "the reads went out on the shared connections")
        expect_eq(after["commands_by_routing_handles"], before["commands_by_routing_handles"],
                  "no read needed a routing handle")


@contextlib.contextmanager
def pool_under_load():
    """The set-up of the load tests: a cluster, a front end over it with its
    pool, and the rounds to run (3 when LONG, else 1)."""
    rc = cluster()
    with front_end(rc) as srv:
        init_pool(srv)
        yield rc, srv, range(3 if LONG else 1)


def load_round(srv, total, seed, warm_s, disturb):
    """One round of a load test: a Load started warm_s before disturb(load)
    runs, finished 1 s after disturb returns the moment from which a success
    counts as the service back; that success came, the load was acknowledged,
    and every round's acknowledged confirmations (total) are still there.
    Returns the Load and the time of that first success."""
    load = Load(srv, seed=seed)
    load.start()
    time.sleep(warm_s)
    t_back = disturb(load)
    time.sleep(1.0)
    load.finish()
    back = load.first_success_after(t_back)
    expect_true(back is not None, "no success after the disturbance")
    expect_true(len(load.acked) > 0, "the load was acknowledged")
    total.update(load.acked)
    verify(srv, total)
    return load, back


def test_failover_of_the_pool_primary_under_load_loses_no_acknowledged_confirmation():
    with pool_under_load() as (rc, srv, rounds):
        total = {}
        for n in rounds:
            rc.wait_ok()
            victim = rc.slot_owner(pool_slot(rc))
            seen = {}

            def kill_the_primary(load):
                expect_true(load.acked, "the load was acknowledged before the kill")
                seen["kill"] = rc.kill9(victim)
                seen["promoted"], seen["promo"] = rc.wait_failover(victim)
                # --redis-wait 1 needs a replica: the killed node comes back as
                # the promoted one's (as a supervisor would restart it)
                rc.restart(victim)
                deadline = seen["promo"] + FAILOVER_BOUND_S + 5
                while (time.monotonic() < deadline
                       and load.first_success_after(seen["promo"]) is None):
                    time.sleep(0.05)
                return seen["promo"]

            load, back = load_round(srv, total, n, 1.0, kill_the_primary)
            t_kill, t_promo = seen["kill"], seen["promo"]
            print("  failover %d: primary %d -> %d; kill -> promotion %.2f s, promotion -> "
                  "first success %.2f s, 5xx/broken answers for %.2f s; %d confirmations "
                  "acknowledged" % (n + 1, victim, seen["promoted"], t_promo - t_kill,
                                    max(0.0, back - t_promo), load.failure_span(t_kill),
                                    len(load.acked)))
            expect_true(back - t_promo <= FAILOVER_BOUND_S,
                        "service back %.2f s after the promotion (bound %.0f s)"
                        % (back - t_promo, FAILOVER_BOUND_S))
            rc.wait_ok()
        # the front end's figures name the nodes and the errors of the dead one
        stats = srv.client().get("/v1/stats").json()
        cl = stats["server"]["store"]["cluster"]
        expect_true(cl["map_refreshes"] >= 2, "map refreshed after the failover: %r" % cl)
        expect_true(any(n["errors"] > 0 for n in cl["nodes"].values()),
                    "errors counted on the dead node: %r" % cl["nodes"])


def test_pages_read_before_a_cluster_failover_are_kept_for_one_read_lease_by_the_new_primary():
    """The module's commands on the slot's primary (read lease 1 s of the
    tests' clock): a and b fill a 2-page pool and are read; the primary dies;
    its promoted replica (which never saw the reads) hands neither page out
    within one read lease of its first command, and evicts after it."""
    import struct
    rc = cluster()
    rc.wait_ok()
    ns, t0 = "lease-failover", 1_700_000_000_000
    cfg = "5000,1000,3000,500,1,100000000,64"
    key = "hf3fs:{%s}" % ns.encode().hex()

    def kl(keys):
        return b"".join(struct.pack("<I", len(k)) + k.encode() for k in keys)

    def pages(reply):
        raw = reply.encode("latin-1")
        return list(struct.unpack("<%dq" % (len(raw) // 8), raw))
    owner = rc.slot_owner(rc.call(rc.ports()[0], "CLUSTER", "KEYSLOT", key))
    rc.call(owner, "HF3FS.INIT", key, t0, cfg, ns, 0, 2)
    got = pages(rc.call(owner, "HF3FS.ALLOC", key, t0, cfg, 0, 1, kl(["a", "b"]))[0])
    expect_eq(rc.call(owner, "HF3FS.CONFIRM", key, t0, cfg, 0, kl(["a", "b"]),
                      struct.pack("<2q", *got), b""), 0)
    rc.call(owner, "HF3FS.EXISTS", key, t0 + 10, cfg, 0, kl(["a", "b"]))
    expect_true(rc.call(owner, "WAIT", 1, 10000) >= 1, "the replica has the pages")
    rc.kill9(owner)
    promoted, _ = rc.wait_failover(owner)
    try:
        during = pages(rc.call(promoted, "HF3FS.ALLOC", key, t0 + 20, cfg, 0, 0, kl(["c"]))[0])
        expect_eq(during, [-1], "allocation within the read lease after the failover")
        after = pages(rc.call(promoted, "HF3FS.ALLOC", key, t0 + 1020, cfg, 0, 0, kl(["c"]))[0])
        expect_true(after[0] in got, "after the lease the clock evicts: %r" % after)
        expect_eq(rc.call(promoted, "HF3FS.CHECK", key), "OK")
    finally:
        rc.restart(owner)
        rc.wait_ok()


def test_moving_the_pool_slot_under_load_loses_no_acknowledged_confirmation():
    with pool_under_load() as (rc, srv, rounds):
        total = {}
        for n in rounds:
            rc.wait_ok()
            slot = pool_slot(rc)
            src = rc.slot_owner(slot)
            dst = [p for p in rc.primaries_ports() if p != src][n % 2]
            seen = {}

            def move_the_slot(load):
                seen["start"] = time.monotonic()
                rc.begin_migration(slot, src, dst)
                time.sleep(0.2)  # calls meet the slot half moved
                rc.move_keys(slot, src, dst)
                rc.end_migration(slot, dst)
                seen["moved"] = time.monotonic()
                rc.wait_ok()
                return seen["moved"]

            load, back = load_round(srv, total, 100 + n, 0.5, move_the_slot)
            t0, t_moved = seen["start"], seen["moved"]
            print("  move %d: slot %d %d -> %d in %.2f s; first success %.2f s after; 5xx "
                  "answers for %.2f s; %d confirmations acknowledged"
                  % (n + 1, slot, src, dst, t_moved - t0, back - t_moved,
                     load.failure_span(t0), len(load.acked)))
        stats = srv.client().get("/v1/stats").json()
        nodes = stats["server"]["store"]["cluster"]["nodes"]
        expect_true(sum(x["moved"] + x["ask"] for x in nodes.values()) > 0,
                    "redirects counted: %r" % nodes)
        cl = stats["server"]["store"]["cluster"]
        expect_true(cl["commands_pipelined"] > 0 and cl["commands_by_routing_handles"] > 0,
                    "the shared connections carried the load, the routing handles the "
                    "redirected commands: %r" % cl)
        text = srv.client().get("/metrics").body.decode()
        expect_true('hf3fs_metad_store_cluster_redirects_total{node="' in text,
                    "redirects in /metrics")


class Reader(threading.Thread):
    """The reads and the admin routes that span shards, in a loop: records
    every status."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv = srv
        self.statuses = {}
        self.stop_flag = threading.Event()

    def run(self):
        c = self.srv.client(timeout=10)
        rng = random.Random(7)
        while not self.stop_flag.is_set():
            keys = ["%064x" % rng.getrandbits(256) for _ in range(16)]
            for method, path, body in (("POST", "/keys/batch_exists", {"keys": keys}),
                                       ("POST", "/keys/get_locations",
                                        {"rank": RANK, "keys": keys}),
                                       ("GET", "/v1/stats", None), ("GET", "/metrics", None),
                                       ("GET", "/v1/check", None)):
                try:
                    r = c.post(path, body) if method == "POST" else c.get(path)
                    status = r.status
                except OSError:
                    status = 0
                    c = self.srv.client(timeout=10)
                self.statuses[status] = self.statuses.get(status, 0) + 1

    def finish(self):
        self.stop_flag.set()
        self.join(30)


def test_a_primary_starved_for_a_moment_under_load_answers_no_500():
    """SIGSTOP the pool's primary (no CPU for it) for 1.2 s, below the node
    timeout (no failover), twice, under changes and cross-shard reads: the
    calls to it time out or are refused (503, 507 for a change), nothing is
    answered 500, and every acknowledged confirmation is there."""
    rc = cluster()
    with front_end(rc) as srv:
        init_pool(srv)
        rc.wait_ok()
        victim = rc.slot_owner(pool_slot(rc))
        pid = rc.nodes[victim].proc.pid
        load, reader = Load(srv, seed=300), Reader(srv)
        load.start()
        reader.start()
        try:
            for _ in range(2):
                time.sleep(1.0)
                os.kill(pid, signal.SIGSTOP)
                time.sleep(1.2)
                os.kill(pid, signal.SIGCONT)
            time.sleep(1.5)
        finally:
            os.kill(pid, signal.SIGCONT)
            load.finish()
            reader.finish()
        statuses = dict(reader.statuses)
        for _, st in load.log:
            statuses[st] = statuses.get(st, 0) + 1
        print("  statuses while the primary was starved: %r" % sorted(statuses.items()))
        bad = {st: n for st, n in statuses.items() if st >= 500 and st not in (503, 507)}
        expect_eq(bad, {}, "5xx other than 503/507")
        expect_true(len(load.acked) > 0, "the load was acknowledged")
        rc.wait_ok()
        verify(srv, load.acked)


if __name__ == "__main__":
    harness.main(globals())  # the shared cluster is stopped at exit (redis_cluster.py)

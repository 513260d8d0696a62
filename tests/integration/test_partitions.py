#!/usr/bin/python3
"""test_partitions.py: the fleet's promise against a cut network.

A Redis Cluster of 3 primaries + 3 replicas (cluster-node-timeout 2 s) and
two front ends, each node and each front end in a network namespace of its
own (netns.py: a bridge, nftables drops inside the namespaces). The stock
clients' page-integrity workers of both dialects (test_page_integrity.py's
workers and oracle; the simulated 3FS files are the test process's, shared)
run on the machine and split between the two front ends, which they reach
whatever the cut, as a node's engines reach the front end on their own node.
Beside them an acknowledgement probe on each front end reserves and confirms
fresh keys in a pool that never evicts (namespace "acked", SGLang dialect)
and records every confirmation acknowledged (204).

The pools of the workers and the probe are moved onto one primary, P (its
replica R); front end F1 talks to P, F2 to the rest. Nemeses, one per test,
each under that load:

  cut_primary       P and F1 cut from everything else until R is promoted
                    and the majority serves, then healed
  front_end_alone   F1 cut from every Redis node: 503 at once, /health says
                    why; served again after the heal, the same process
  with_its_replica  P, R and F1 cut from the rest (nothing to promote)
  one_way           P's packets to the other Redis nodes dropped (P hears
                    them, they do not hear P)
  random            a new partition every 2-5 s (halves, a host alone, one
                    way, none), from HF3FS_PARTITION_SEED (printed: the same
                    seed replays the same schedule), for
                    HF3FS_PARTITION_RANDOM_SECONDS (default 60)

Checked after every heal: no page written for two keys and none changed
under a reader (the oracle), every acknowledged confirmation of the probe
there with its page through both front ends, /v1/check; the majority side
serves (F2 answers a read of P's pool) within SERVE_BOUND_S of the cut when
a replica was promoted; both front ends acknowledge a change within
HEAL_BOUND_S of the heal.

A WAIT that a demotion refuses (docs/many-nodes.md), without load: one
front end (--redis-wait 1) allocates on P with R's packets to P dropped,
so the WAIT stays pending on P; R is promoted and P demoted, which refuses
the WAIT; the cut healed, P syncs with R. With only R -> P cut, R has the
allocation, P resyncs partially, and the allocation is acknowledged (200)
and found on R; with both ways cut, R never has it, P resyncs in full, and
the answer is 507, nothing of it left on R. Over the cluster (CLUSTER
FAILOVER TAKEOVER on R) and over one Redis (two nodes of their own in
hosts of the same network; REPLICAOF on each).

HF3FS_PARTITION_REDIS_WAIT (default 1) is the front ends' --redis-wait: with
0 the cut primary takes acknowledged changes that its promoted replica never
receives, and cut_primary fails; with "default" they run without the flag
(each primary waited on once it has a replica in sync), and every nemesis
holds.
"""

import collections
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Server, expect_eq, expect_error, expect_true, wait_for  # noqa: E402
import netns  # noqa: E402
import redis_cluster  # noqa: E402
from redis_server import RedisServer, info_fields  # noqa: E402
import test_page_integrity as integrity  # noqa: E402

NODE_TIMEOUT_MS = 2000
NODE_TIMEOUT_S = NODE_TIMEOUT_MS / 1000.0
REDIS_WAIT = os.environ.get("HF3FS_PARTITION_REDIS_WAIT", "1")
RANDOM_SECONDS = float(os.environ.get("HF3FS_PARTITION_RANDOM_SECONDS", "60"))
SEED = int(os.environ.get("HF3FS_PARTITION_SEED") or random.SystemRandom().randrange(1 << 31))
FE_PORT = 18000
PROBE_NS = "acked"
PROBE_PAGES = 1 << 20
# The majority serves P's slots again, from the cut: the others count P
# failed after the node timeout and agree on it by gossip, R waits 0.5 to
# 1 s (its rank, 0 with one replica, adds nothing) and wins the vote (twice
# the node timeout in all: 3.99 to 4.51 s measured), then the front end
# meets the new map once its calls to P have timed out (--redis-timeout and
# --redis-connect-timeout, 1 s each here), plus 2 s for a machine that the
# other suites load: twice the node timeout plus 4 s plus 2 s.
SERVE_BOUND_S = (2 * NODE_TIMEOUT_S + 6.0) * harness.SLOWDOWN
# After a heal: the cut node meets the others again (a ping within half the
# node timeout), a former primary turns replica and syncs (a full sync of a
# small data set), and a front end that gave up on a node reconnects (its
# back-off reaches 2 s): a change acknowledged under WAIT 1.
HEAL_BOUND_S = (2 * NODE_TIMEOUT_S + 4.0) * harness.SLOWDOWN


class World:
    """The network, the cluster and the two front ends' hosts, started once
    and shared by the tests in definition order."""

    def __init__(self):
        t0 = time.monotonic()
        self.net = netns.Net()
        if self.net.stale:
            print("# removed what a killed run left: %s" % " ".join(self.net.stale), flush=True)
        self.rc = netns.NetCluster(self.net, node_timeout_ms=NODE_TIMEOUT_MS)
        self.rc.start()
        self.fe_hosts = [self.net.add("fe1"), self.net.add("fe2")]
        self._one = []
        print("# network 10.213.%d.0/24, cluster and hosts up in %.1f s"
              % (self.net.third, time.monotonic() - t0), flush=True)

    def redis_hosts(self):
        return [self.rc.node_host(p) for p in self.rc.nodes]

    def one_redis_hosts(self):
        """Two hosts for a primary and a replica outside the cluster, added
        once."""
        if not self._one:
            self._one = [self.net.add("one-p"), self.net.add("one-r")]
        return self._one

    def close(self):
        self.rc.stop()
        self.net.close()


_world = None


def world():
    global _world
    if _world is None:
        _world = World()
    return _world


def holders(rc):
    """{key: port of the primary holding it} of the front ends' values."""
    values = {}
    for port in rc.primaries_ports():
        for key in rc.call(port, "KEYS", "hf3fs:*"):
            values[key] = port
    return values


class Setup:
    """One test's front ends, pools and probe, with the pools on one
    primary."""

    def __init__(self, w):
        self.w = w
        rc = w.rc
        rc.wait_ok(timeout=60 * harness.SLOWDOWN)
        redis_cluster.flush(rc)
        self.fes = []
        try:
            wait = [] if REDIS_WAIT == "default" else ["--redis-wait", REDIS_WAIT]
            for h in w.fe_hosts:
                self.fes.append(Server(*integrity.LEASE_FLAGS, "--redis-timeout", "1",
                                       "--redis-connect-timeout", "1", *wait, "--stripes", "1",
                                       store="redis-cluster://" + rc.seeds(), host=h.ip,
                                       port=FE_PORT, prefix=h.prefix,
                                       default_wait=not wait).start())
            c = self.fes[0].client()
            # the first change once every shard acknowledges with a replica
            # (a node the previous test cut may still be syncing)
            wait_for(lambda: c.post("/0/initialize", {"num_pages": PROBE_PAGES,
                                                     "namespace": PROBE_NS}).status == 204,
                     30 * harness.SLOWDOWN, interval=0.2, what="the probe's pool initialized")
            integrity.initialize(self.fes[0])
            self.wait_acknowledging(30 * harness.SLOWDOWN, what="the fresh cluster")
            self.primary = self.colocate()
            # CLUSTER REPLICAS is another node's view: gossip may not have
            # told it of the replica yet
            self.replica = wait_for(lambda: (rc.replicas_of(self.primary) or [None])[0],
                                    10 * harness.SLOWDOWN, interval=0.1,
                                    what="the primary's replica known to the cluster")
        except BaseException:
            self.stop()
            raise

    def colocate(self):
        """Every value of the test's namespaces moved to the primary of the
        vLLM pool's: that primary is P."""
        rc = self.w.rc
        values = holders(rc)
        kv = [k for k in values if "{%s}" % b"kv".hex() in k or b"kv".hex() in k]
        expect_true(kv, "the vLLM pool's value among %r" % sorted(values))
        target = values[kv[0]]
        for key, port in values.items():
            if port != target:
                rc.migrate_slot(rc.keyslot(key), port, target)
        return target

    def host(self, port):
        return self.w.rc.node_host(port)

    def others(self, *keep):
        return [h for h in self.w.net.hosts if h not in keep]

    def acknowledged(self, srv, tag):
        """A change through srv acknowledged: a fresh key of the probe's pool
        reserved and confirmed (200, 204)."""
        try:
            c = harness.Client(srv.port, 5 * harness.SLOWDOWN, srv.host)
            try:
                key = "ack-%s-%f" % (tag, time.monotonic())
                r = c.post("/0/reserve_and_allocate_page_indices",
                           {"keys": [[key, ""]], "namespace": PROBE_NS})
                if r.status != 200:
                    return False
                page = r.json()["indices"][0][1]
                r = c.post("/0/confirm_write", {"written_keys_to_confirm": [[key, page]],
                                                "namespace": PROBE_NS})
                return r.status == 204
            finally:
                c.close()
        except OSError:
            return False

    def wait_acknowledging(self, timeout, what):
        """Until every front end acknowledges a change; seconds taken."""
        t0 = time.monotonic()
        for i, srv in enumerate(self.fes):
            wait_for(lambda: self.acknowledged(srv, "wait%d" % i), timeout, interval=0.1,
                     what="front end %d acknowledging a change after %s" % (i + 1, what))
        return time.monotonic() - t0

    def reads_pool(self, srv):
        """Whether srv answers a read of P's pool (the probe's namespace)."""
        try:
            c = harness.Client(srv.port, 3 * harness.SLOWDOWN, srv.host)
            try:
                return c.post("/0/exists", {"keys": ["x"], "namespace": PROBE_NS}).status == 200
            finally:
                c.close()
        except OSError:
            return False

    def stop(self):
        for srv in self.fes:
            srv.stop()


class Probe(threading.Thread):
    """Reserves and confirms 4 fresh keys at a time through one front end
    (no retry: a 503 is tried again with new keys, a 507 is given up);
    records key -> page of every confirmation acknowledged (204)."""

    def __init__(self, srv, name):
        super().__init__(daemon=True)
        self.srv, self.name_ = srv, name
        self.acked = {}
        self.ack_times = []  # time.monotonic() of each acknowledgement
        self.statuses = {}
        self.stop_flag = threading.Event()
        self.error = None

    def post(self, path, body):
        c = harness.Client(self.srv.port, 10 * harness.SLOWDOWN, self.srv.host)
        try:
            r = c.post(path, body)
        except OSError:
            self.statuses["broken"] = self.statuses.get("broken", 0) + 1
            return None
        finally:
            c.close()
        self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
        return r

    def run(self):
        n = 0
        try:
            while not self.stop_flag.is_set():
                keys = ["%s-%d-%d" % (self.name_, n, i) for i in range(4)]
                n += 1
                r = self.post("/0/reserve_and_allocate_page_indices",
                              {"keys": [[k, ""] for k in keys], "namespace": PROBE_NS})
                if r is None or r.status != 200:
                    time.sleep(0.05)
                    continue
                got = [[k, e[1]] for k, e in zip(keys, r.json()["indices"]) if e[1] >= 0]
                r = self.post("/0/confirm_write", {"written_keys_to_confirm": got,
                                                   "namespace": PROBE_NS})
                if r is not None and r.status == 204:
                    self.acked.update(dict(got))
                    self.ack_times.append(time.monotonic())
                time.sleep(0.01)
        except Exception as e:  # noqa: B902 - reported by finish()
            self.error = e

    def finish(self):
        self.stop_flag.set()
        self.join(60 * harness.SLOWDOWN)
        expect_true(not self.is_alive(), "the probe on %s hung" % self.name_)
        if self.error:
            raise self.error


def lost(setup, acked):
    """The acknowledged confirmations that a front end does not find with
    their page: [(front end, key, page acknowledged, page found)]."""
    out = []
    keys = sorted(acked)
    for i, srv in enumerate(setup.fes):
        c = harness.Client(srv.port, 30 * harness.SLOWDOWN, srv.host)
        for j in range(0, len(keys), 500):
            part = keys[j:j + 500]
            r = c.post("/0/get_page_indices", {"keys": part, "namespace": PROBE_NS})
            expect_eq(r.status, 200, "get_page_indices through front end %d" % (i + 1))
            for k, p in zip(part, r.json()["indices"]):
                if p != acked[k]:
                    out.append(("fe%d" % (i + 1), k, acked[k], p))
        c.close()
    return out


def under_load(name, nemesis):
    """Both front ends, the workers and the probes; nemesis(setup, fig) runs
    once the load has run a while and returns after its heal. Then every
    check of the module's docstring; fig's figures are printed."""
    if integrity.requests is None:
        raise AssertionError("python3-requests is missing (make deps installs it)")
    w = world()
    s = Setup(w)
    fig = {}
    probes = []
    try:
        probes = [Probe(srv, "p%d" % (i + 1)) for i, srv in enumerate(s.fes)]
        for p in probes:
            p.start()
        files, stats = integrity.run_engines(s.fes, integrity.SECONDS,
                                             restart_at=min(2.0, integrity.SECONDS / 2),
                                             restarter=lambda: nemesis(s, fig))
        for p in probes:
            p.finish()
        acked = {}
        for p in probes:
            acked.update(p.acked)
        gone = lost(s, acked)
        if "_cut" in fig and "_heal" in fig:  # what the cut side's front end acknowledged
            during = [t - fig["_cut"] for t in probes[0].ack_times
                      if fig["_cut"] <= t < fig["_heal"]]
            fig["F1 acknowledged changes during the cut"] = len(during)
            if during:
                fig["F1's last one after the cut"] = during[-1]
        print("# %s: %s" % (name, ", ".join(
            ("%s %.2f s" % kv) if isinstance(kv[1], float) else "%s %s" % kv
            for kv in fig.items() if not kv[0].startswith("_"))), flush=True)
        print("# %s: probe answers %s; %d confirmations acknowledged, %d lost"
              % (name, " | ".join("%s %r" % (p.name_, dict(sorted(p.statuses.items(), key=str)))
                                  for p in probes), len(acked), len(gone)), flush=True)
        integrity.check_run(name, files, stats)
        expect_eq(gone[:5], [], "acknowledged confirmations lost (%d of %d): (front end, key, "
                  "page acknowledged, page found)" % (len(gone), len(acked)))
        expect_true(len(acked) > 20, "the probe was acknowledged: %d" % len(acked))
        s.fes[0].check()
        for srv in s.fes:
            expect_true(srv.alive(), "the front end on %s was not restarted" % srv.host)
    finally:
        for p in probes:
            p.stop_flag.set()
        try:
            w.net.heal()
        finally:
            s.stop()


def promoted_and_served(s, fig, t_cut):
    """Until R is a primary and F2 (the majority's) reads P's pool from it;
    the figures and the bound."""
    rc = s.w.rc
    wait_for(lambda: rc.role(s.replica) == "master", 30 * harness.SLOWDOWN, interval=0.02,
             what="the replica promoted")
    fig["cut -> promotion"] = time.monotonic() - t_cut
    wait_for(lambda: s.reads_pool(s.fes[1]), 30 * harness.SLOWDOWN, interval=0.02,
             what="the majority's front end reading P's pool")
    served = time.monotonic() - t_cut
    fig["cut -> the majority serves P's pool"] = served
    expect_true(served <= SERVE_BOUND_S, "the majority served again %.2f s after the cut "
                "(bound %.1f s)" % (served, SERVE_BOUND_S))


def heal_and_recover(s, fig):
    t = fig["_heal"] = time.monotonic()
    s.w.net.heal()
    fig["heal -> both front ends acknowledge"] = s.wait_acknowledging(
        HEAL_BOUND_S, "the heal")
    fig["heal -> cluster ok"] = (s.w.rc.wait_ok(timeout=60 * harness.SLOWDOWN)
                                 or time.monotonic() - t)


# -- the nemeses ----------------------------------------------------------

def test_a_primary_cut_with_one_front_end_until_its_replica_is_promoted_loses_no_acknowledged_change():
    def nemesis(s, fig):
        p, f1 = s.host(s.primary), s.w.fe_hosts[0]
        t_cut = fig["_cut"] = time.monotonic()
        s.w.net.partition([p, f1], s.others(p, f1))
        promoted_and_served(s, fig, t_cut)
        time.sleep(1.0)  # the two sides side by side, each with a primary of the slots
        heal_and_recover(s, fig)
        expect_eq(s.w.rc.role(s.primary), "slave", "the old primary rejoined as a replica")
    under_load("primary and one front end cut off", nemesis)


def test_a_front_end_cut_from_every_redis_node_answers_503_at_once_and_serves_after_the_heal():
    def nemesis(s, fig):
        f1 = s.fes[0]
        pid = f1.proc.pid
        c = f1.client(timeout=10 * harness.SLOWDOWN)
        t_cut = fig["_cut"] = time.monotonic()
        s.w.net.cut([s.w.fe_hosts[0]], s.w.redis_hosts())
        h = wait_for(lambda: (lambda r: r if r.status == 503 else None)(c.get("/health")),
                     10 * harness.SLOWDOWN, interval=0.05, what="/health 503")
        fig["cut -> /health 503"] = time.monotonic() - t_cut
        detail = h.json()["detail"]
        fig["/health says"] = repr(detail)
        expect_true("unavailable" in h.body.decode() and detail,
                    "/health says why: %r" % h.body)
        t = time.monotonic()
        r = c.post("/0/reserve_and_allocate_page_indices",
                   {"keys": [["during-the-cut", ""]], "namespace": PROBE_NS})
        took = time.monotonic() - t
        fig["a change while cut: status"] = r.status
        fig["a change while cut: answered in"] = took
        expect_eq(r.status, 503, "a change while cut off: %r" % (r,))
        expect_true(took < 0.25 * harness.SLOWDOWN, "503 at once: %.3f s" % took)
        expect_true(s.acknowledged(s.fes[1], "fe2-during"),
                    "the other front end acknowledges changes meanwhile")
        time.sleep(max(0.0, 2 * NODE_TIMEOUT_S - (time.monotonic() - t_cut)))
        heal_and_recover(s, fig)
        expect_eq(f1.proc.pid, pid, "the same front end process")
        expect_eq(c.get("/health").status, 200, "/health after the heal")
    under_load("front end cut from Redis", nemesis)


def test_a_primary_cut_off_with_its_replica_keeps_what_it_acknowledged():
    def nemesis(s, fig):
        p, r, f1 = s.host(s.primary), s.host(s.replica), s.w.fe_hosts[0]
        t_cut = fig["_cut"] = time.monotonic()
        s.w.net.partition([p, r, f1], s.others(p, r, f1))
        # the majority cannot promote a replica it does not reach: no
        # failover however long the cut
        time.sleep(2 * NODE_TIMEOUT_S + 1.5)
        expect_eq(s.w.rc.role(s.replica), "slave", "no promotion without the replica")
        fig["cut held"] = time.monotonic() - t_cut
        heal_and_recover(s, fig)
        expect_eq(s.w.rc.role(s.primary), "master", "P is still the primary")
    under_load("primary cut off with its replica", nemesis)


def test_a_primary_that_the_cluster_no_longer_hears_loses_no_acknowledged_change():
    def nemesis(s, fig):
        p = s.host(s.primary)
        t_cut = fig["_cut"] = time.monotonic()
        s.w.net.cut([p], [h for h in s.w.redis_hosts() if h is not p], one_way=True)
        promoted_and_served(s, fig, t_cut)
        time.sleep(1.0)
        heal_and_recover(s, fig)
        expect_eq(s.w.rc.role(s.primary), "slave", "the old primary rejoined as a replica")
    under_load("one-way cut of a primary", nemesis)


# -- a WAIT that a demotion refuses (no load: one call, its outcome) ------

DEMOTED_NS = "demoted"
DEMOTED_PAGES = 16
DEMOTED_KEYS = ["d1", "d2"]
# The front end's --redis-wait-timeout: its WAIT is still pending when P is
# demoted (within a second of R's promotion), and the front end asks P for
# up to this plus --redis-timeout while P syncs with R after the heal.
DEMOTED_FLAGS = ("--redis-wait", "1", "--redis-wait-timeout", "10", "--redis-timeout", "2",
                 "--redis-connect-timeout", "1", "--stripes", "1")
# P's repl-ping-replica-period while the WAIT is pending: no PING of P's
# between R's catching up and P's demotion, which R, promoted meanwhile,
# would not have (P's PSYNC then refused: a full resync). Redis pings when
# its cron's count of seconds is a multiple of the period: with INT_MAX,
# only at the first second after its start.
NO_PING = str((1 << 31) - 1)

# A Redis node of these tests: its host (netns.Host) and what sends it a
# command.
Node = collections.namedtuple("Node", "host cmd")


def info(node, section):
    """INFO section of node: {field: value}, both strings."""
    return info_fields(node.cmd("INFO", section))


def demoted_pool(srv):
    """srv's client once its pool (DEMOTED_NS) is initialized: the first
    change once the shard acknowledges it with a replica (a node an earlier
    test cut may still be syncing)."""
    c = srv.client(timeout=30 * harness.SLOWDOWN)
    wait_for(lambda: c.post("/0/initialize", {"num_pages": DEMOTED_PAGES,
                                             "namespace": DEMOTED_NS}).status == 204,
             30 * harness.SLOWDOWN, interval=0.2, what="the pool initialized")
    return c


def allocated_while_demoted(net, srv, p, r, promote, kept, fig):
    """Front end srv (DEMOTED_FLAGS: WAIT 1) allocates DEMOTED_KEYS on P, the
    primary of its pool, with R's packets to P dropped: P never hears R's
    acknowledgement, so the WAIT blocks. kept: R still receives P's stream
    and has the allocation; else the cut is both ways and R never has it.
    Once P holds the WAIT (and R has caught up, if kept), promote() makes R
    the primary and P its replica, which refuses the WAIT; the cut is healed
    and P syncs with R: partially if R holds everything P applied, else in
    full. The allocation's answer; fig gets the figures."""
    period = p.cmd("CONFIG", "GET", "repl-ping-replica-period")[1]
    p.cmd("CONFIG", "SET", "repl-ping-replica-period", NO_PING)
    try:
        net.cut([r.host], [p.host], one_way=kept)
        answer = []
        c = srv.client(timeout=30 * harness.SLOWDOWN)
        call = threading.Thread(target=lambda: answer.append(c.post(
            "/0/reserve_and_allocate_page_indices",
            {"keys": [[k, ""] for k in DEMOTED_KEYS], "namespace": DEMOTED_NS})), daemon=True)
        t0 = time.monotonic()
        call.start()
        wait_for(lambda: info(p, "clients")["blocked_clients"] == "1", 5 * harness.SLOWDOWN,
                 interval=0.02, what="the allocation's WAIT pending on P")
        if kept:
            wait_for(lambda: info(r, "replication")["slave_repl_offset"]
                     == info(p, "replication")["master_repl_offset"],
                     5 * harness.SLOWDOWN, interval=0.02, what="R has P's stream")
        fig["P's offset"] = int(info(p, "replication")["master_repl_offset"])
        fig["R's offset"] = int(info(r, "replication")["slave_repl_offset"])
        t = time.monotonic()
        promote()
        wait_for(lambda: info(p, "replication")["role"] == "slave", 10 * harness.SLOWDOWN,
                 interval=0.02, what="P demoted")
        fig["promotion -> P demoted"] = time.monotonic() - t
        net.heal()
        call.join(30 * harness.SLOWDOWN)
        expect_true(answer, "the allocation answered")
        fig["the allocation answered"] = "%d in %.2f s" % (answer[0].status,
                                                           time.monotonic() - t0)
        fig["P then"] = ", ".join("%s %s" % (k, v) for k, v in info(p, "replication").items()
                                  if k in ("role", "master_link_status", "second_repl_offset"))
        return answer[0]
    finally:
        net.heal()
        p.cmd("CONFIG", "SET", "repl-ping-replica-period", period)


def logged(srv, line):
    """Until the front end's log has line (its log writer is a thread)."""
    wait_for(lambda: line in srv.stderr(), 5 * harness.SLOWDOWN,
             what="%r in the front end's log:\n%s" % (line, srv.stderr()[-3000:]))


def demoted_stats(srv):
    return srv.stats()[(DEMOTED_NS, 0)]


def expect_kept(answer, srv, reader):
    """The allocation acknowledged (200, a page per key; srv's log says
    why), and reader, a front end on the new primary, finds its
    reservations there: confirmed, the keys have those pages."""
    expect_eq(answer.status, 200, "the allocation: %r" % (answer,))
    pages = [e[1] for e in answer.json()["indices"]]
    expect_true(len(set(pages)) == len(DEMOTED_KEYS) and min(pages) >= 0,
                "a page per key: %r" % pages)
    logged(srv, "continued from its new primary's history (partial resync)")
    c = reader.client(timeout=30 * harness.SLOWDOWN)
    expect_eq(demoted_stats(reader)["reservations"], len(DEMOTED_KEYS),
              "reservations on the new primary")
    harness.s_confirm(c, 0, zip(DEMOTED_KEYS, pages), ns=DEMOTED_NS)
    expect_eq(harness.s_pages(c, 0, DEMOTED_KEYS, ns=DEMOTED_NS), pages,
              "the keys' pages, through the front end")
    st = demoted_stats(reader)
    expect_eq((st["owned"], st["reserved"]), (len(DEMOTED_KEYS), 0), "owned, reserved")
    reader.check()


def expect_lost(answer, srv, reader):
    """507 (outcome unknown; srv's log says the node resynced in full), and
    reader, a front end on the new primary, finds no reservation there (the
    change went with P's history): the keys allocated again get pages."""
    expect_error(answer, 507)
    expect_true("unknown" in answer.json()["detail"], answer.json()["detail"])
    logged(srv, "did not show it kept the change (role slave, master_link_status up, "
           "second_repl_offset -1)")
    c = reader.client(timeout=30 * harness.SLOWDOWN)
    st = demoted_stats(reader)
    expect_eq((st["reservations"], st["free"]), (0, DEMOTED_PAGES),
              "reservations, free pages on the new primary")
    got = harness.s_alloc(c, 0, DEMOTED_KEYS, ns=DEMOTED_NS)
    expect_eq([e[0] for e in got], [False] * len(DEMOTED_KEYS), "the keys existed")
    harness.s_confirm(c, 0, [(k, e[1]) for k, e in zip(DEMOTED_KEYS, got)], ns=DEMOTED_NS)
    expect_eq(demoted_stats(reader)["owned"], len(DEMOTED_KEYS), "owned once allocated again")
    reader.check()


def print_figures(name, fig):
    print("# %s: %s" % (name, ", ".join(
        ("%s %.2f s" % kv) if isinstance(kv[1], float) else "%s %s" % kv
        for kv in fig.items() if not kv[0].startswith("_"))), flush=True)


def demoted_in_the_cluster(kept, expect):
    """P and R of the World's cluster: R takes over (CLUSTER FAILOVER
    TAKEOVER: no vote, so the cut does not stop it), and P hears of it from
    the other nodes and turns replica. The front end on fe1 then reads the
    new primary itself."""
    w = world()
    rc = w.rc
    rc.wait_ok(timeout=60 * harness.SLOWDOWN)
    redis_cluster.flush(rc)
    fe = w.fe_hosts[0]
    srv = Server(*DEMOTED_FLAGS, store="redis-cluster://" + rc.seeds(), host=fe.ip,
                 port=FE_PORT, prefix=fe.prefix).start()
    fig = {}
    try:
        demoted_pool(srv)
        ports = sorted(set(holders(rc).values()))
        expect_eq(len(ports), 1, "primaries holding the pool")
        p = ports[0]
        r = wait_for(lambda: (rc.replicas_of(p) or [None])[0], 10 * harness.SLOWDOWN,
                     interval=0.1, what="P's replica known to the cluster")

        def node(port):
            return Node(rc.node_host(port), lambda *a: rc.call(port, *a))
        answer = allocated_while_demoted(w.net, srv, node(p), node(r),
                                         lambda: rc.call(r, "CLUSTER", "FAILOVER", "TAKEOVER"),
                                         kept, fig)
        expect(answer, srv, srv)
    finally:
        print_figures("cluster, %s" % ("kept" if kept else "lost"), fig)
        srv.stop()


def demoted_over_one_redis(kept, expect):
    """P and R, two Redis of their own in hosts of the World's network, the
    front end on the machine: REPLICAOF NO ONE on R, then REPLICAOF R on P.
    A second front end on R reads the new primary."""
    w = world()
    hp, hr = w.one_redis_hosts()
    fig = {}
    quick = ["--repl-diskless-sync-delay", "0"]  # a sync at once, as in the cluster
    with RedisServer(host=hp.ip, prefix=hp.prefix, extra=quick) as rp, \
            RedisServer(host=hr.ip, prefix=hr.prefix, extra=quick) as rr:
        rr.replicate(rp, 10 * harness.SLOWDOWN)
        with Server(*DEMOTED_FLAGS, store=rp.url) as srv:
            try:
                demoted_pool(srv)

                def promote():
                    rr.cmd("REPLICAOF", "NO", "ONE")
                    rp.cmd("REPLICAOF", hr.ip, rr.port)
                answer = allocated_while_demoted(w.net, srv, Node(hp, rp.cmd), Node(hr, rr.cmd),
                                                 promote, kept, fig)
                with Server(*DEMOTED_FLAGS, store=rr.url) as reader:
                    expect(answer, srv, reader)
            finally:
                print_figures("one Redis, %s" % ("kept" if kept else "lost"), fig)


def test_a_change_whose_wait_a_demotion_refuses_is_acknowledged_when_the_new_primary_has_it():
    demoted_in_the_cluster(True, expect_kept)


def test_a_change_whose_wait_a_demotion_refuses_answers_507_when_the_demoted_node_resyncs_in_full():
    demoted_in_the_cluster(False, expect_lost)


def test_over_one_redis_a_change_whose_wait_a_demotion_refuses_is_acknowledged_when_the_new_primary_has_it():
    demoted_over_one_redis(True, expect_kept)


def test_over_one_redis_a_change_whose_wait_a_demotion_refuses_answers_507_when_the_demoted_node_resyncs_in_full():
    demoted_over_one_redis(False, expect_lost)


def random_schedule(seed, seconds, hosts):
    """[(start second, kind, sides)]: a new partition every 2 to 5 s from
    the seed alone (the hosts by name), so that a seed replays it."""
    rng = random.Random(seed)
    out, t = [], 0.0
    names = [h.name for h in hosts]
    while t < seconds:
        kind = rng.choice(["halves", "alone", "one-way", "none"])
        if kind == "halves":
            shuffled = names[:]
            rng.shuffle(shuffled)
            k = rng.randint(1, len(names) - 1)
            sides = (sorted(shuffled[:k]), sorted(shuffled[k:]))
        elif kind in ("alone", "one-way"):
            one = rng.choice(names)
            sides = ([one], [n for n in names if n != one])
        else:
            sides = ()
        out.append((t, kind, sides))
        t += rng.uniform(2.0, 5.0)
    return out


def test_random_partitions_from_a_seed_lose_no_acknowledged_change_nor_share_a_page():
    def nemesis(s, fig):
        net = s.w.net
        by_name = {h.name: h for h in net.hosts}
        schedule = random_schedule(SEED, RANDOM_SECONDS, s.w.redis_hosts() + s.w.fe_hosts)
        print("# random partitions: HF3FS_PARTITION_SEED=%d, %d steps over %.0f s"
              % (SEED, len(schedule), RANDOM_SECONDS), flush=True)
        t0 = time.monotonic()
        for at, kind, sides in schedule:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            hosts = [[by_name[n] for n in side] for side in sides]
            if kind == "none":
                net.heal()
            elif kind == "one-way":
                net.heal()
                net.cut(hosts[0], hosts[1], one_way=True)
            else:
                net.partition(*hosts)
            print("#   %5.1f s %-7s %s" % (time.monotonic() - t0, kind, net.describe()),
                  flush=True)
        time.sleep(max(0.0, t0 + RANDOM_SECONDS - time.monotonic()))
        fig["partitions"] = len(schedule)
        heal_and_recover(s, fig)
    under_load("random partitions", nemesis)


if __name__ == "__main__":
    try:
        harness.main(globals())
    finally:
        if _world is not None:
            _world.close()

#!/usr/bin/python3
"""test_sentinel.py: --store redis-sentinel://, a primary and its replica
watched by three Redis Sentinels, all real processes on free ports.

A group (started once, shared by the tests in definition order): a primary
and a replica, each loading the hf3fs-metad module, and three sentinels
(`redis-server CONFIG --sentinel`, redis_server.Sentinel) watching the
primary with quorum 2, down-after-milliseconds 1000 and failover-timeout
3000. A front end runs with --store redis-sentinel://S1,S2,S3/hf3fs and the
default --redis-wait (1: the primary has a replica).

- start-up: a URL without the primary's name is a usage error (exit 2); no
  sentinel reachable stops the start (exit 5) saying which it asked;
- the primary SIGKILLed under the page-integrity workers' load
  (test_page_integrity.py's stock-client-shaped workers and its oracle):
  while no primary answers, /health answers 503 naming the primary the
  sentinels still name, and a change answers 503; once the sentinels name
  the promoted replica the front end serves from it, without a restart,
  within FOLLOW_BOUND_S; the killed node, started again as a replica of
  the new primary, is waited on (WAIT 1) once in sync, the new primary's
  changes acknowledged meanwhile (the default judges it afresh); no page is
  ever written for two keys nor read stale, and /v1/check holds;
- a switch while the old primary stays up (SENTINEL FAILOVER: it is
  demoted to a replica): the front end follows it (ROLE, the sentinels'
  answer, or READONLY) and acknowledges changes on the new primary within
  FOLLOW_BOUND_S of the sentinels naming it.

Printed: kill -> /health 503, kill -> the sentinels name the replica,
that -> the front end serves reads from it, the restart -> a change
acknowledged.
"""

import atexit
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Server, expect_eq, expect_true, wait_for  # noqa: E402
import test_page_integrity as integrity  # noqa: E402
from redis_server import RedisServer, Sentinel  # noqa: E402
from test_redis import start_fails  # noqa: E402

NAME = "hf3fs"
# How soon the front end serves from the primary the sentinels name, from
# the moment they name it: its monitor asks them every 0.5 s while down and
# every second while up (docs/many-nodes.md "Redis Sentinel"), plus a
# connection, the probe and ROLE; the rest is a loaded machine's margin.
FOLLOW_BOUND_S = 2.5 * harness.SLOWDOWN
# kill -> the sentinels name the replica: down-after 1 s, the vote, the
# promotion (about 2 to 3 s here); a vote split costs a retry
SWITCH_BOUND_S = 15.0 * harness.SLOWDOWN
PROBE_NS = "probe"  # the test's own changes, beside the workers' pools

_group = None


class Group:
    """The primary, the replica and three sentinels; .nodes[port] -> the
    RedisServer on that port."""

    def __init__(self):
        # no 5 s pause before a full sync (Redis's default): a node started
        # again as a replica is in sync at once
        self.primary = RedisServer(extra=["--repl-diskless-sync-delay", "0"]).start()
        self.replica = RedisServer(extra=["--repl-diskless-sync-delay", "0", "--replicaof",
                                          "127.0.0.1", str(self.primary.port)]).start()
        self.nodes = {n.port: n for n in (self.primary, self.replica)}
        wait_for(lambda: b",state=online," in self.primary.cmd("INFO", "replication"),
                 10 * harness.SLOWDOWN, what="the replica in sync")
        self.sentinels = []
        for _ in range(3):
            self.sentinels.append(Sentinel(NAME, self.primary.port).start())
        t0 = time.monotonic()
        # each must know the two others (hello messages every 2 s) and the
        # replica before a failover can be voted
        wait_for(lambda: all(s.ready(2, 1) for s in self.sentinels), 20 * harness.SLOWDOWN,
                 interval=0.1, what="the sentinels know each other and the replica")
        print("# sentinels ready in %.2f s" % (time.monotonic() - t0), flush=True)
        self.url = "redis-sentinel://%s/%s" % (
            ",".join("127.0.0.1:%d" % s.port for s in self.sentinels), NAME)

    def roles(self):
        """(primary, replica) as the sentinels name them now."""
        p = wait_for(self.named, 10 * harness.SLOWDOWN, what="the sentinels agree on a primary")
        return self.nodes[p], next(n for port, n in self.nodes.items() if port != p)

    def named(self):
        """The port of the primary that a majority of the sentinels name."""
        ports = [s.primary_port() for s in self.sentinels]
        for p in ports:
            if p is not None and ports.count(p) >= 2:
                return p
        return None

    def close(self):
        for s in self.sentinels:
            s.__exit__()
        for n in self.nodes.values():
            n.__exit__()


def group():
    global _group
    if _group is None:
        _group = Group()
        atexit.register(_group.close)
    return _group


def serving_from(c):
    """The /health answer once it is 200 (serving or reads only), else None."""
    h = c.get("/health")
    return h if h.status == 200 else None


def acknowledged(c, i):
    """A change through the front end: an SGLang reservation of a fresh key
    in the test's own namespace, answered 200 (applied, and under WAIT 1 on
    a replica too), then released."""
    r = c.post("/0/reserve_and_allocate_page_indices",
               {"keys": [["probe-%d-%f" % (i, time.monotonic()), ""]], "namespace": PROBE_NS})
    if r.status != 200:
        return False
    page = r.json()["indices"][0][1]
    if page >= 0:
        c.post("/0/confirm_write", {"written_keys_to_confirm": [], "pages_to_release": [page],
                                    "namespace": PROBE_NS})
    return True


# -- start-up ---------------------------------------------------------------

def test_a_sentinel_url_without_the_primary_s_name_is_a_usage_error():
    status, err = start_fails(["--store", "redis-sentinel://127.0.0.1:26379"])
    expect_eq(status, 2, "exit status: " + err)
    expect_true("PRIMARYNAME" in err, "the message says the form: " + err)


def test_no_sentinel_reachable_stops_the_start_saying_which_were_asked():
    a, b = harness.free_port(), harness.free_port()
    status, err = start_fails(["--store", "redis-sentinel://127.0.0.1:%d,127.0.0.1:%d/%s"
                               % (a, b, NAME)])
    expect_eq(status, 5, "exit status: " + err)
    for port in (a, b):
        expect_true("sentinel 127.0.0.1:%d: cannot connect" % port in err,
                    "the message names every sentinel asked: " + err)


# -- failovers ----------------------------------------------------------------

def test_a_primary_killed_under_load_is_followed_to_its_promoted_replica_and_no_page_is_shared():
    if integrity.requests is None:
        raise AssertionError("python3-requests is missing (make deps installs it)")
    g = group()
    old, new = g.roles()
    srv = Server(*integrity.LEASE_FLAGS, "--redis-timeout", "1", store=g.url).start()
    try:
        c = srv.client()
        store = c.get("/v1/stats").json()["server"]["store"]
        expect_eq((store["engine"], store["wait_replicas"]), ("redis-sentinel", 1),
                  "engine and the default --redis-wait: %r" % store)
        integrity.initialize(srv)
        harness.s_init(c, 0, 8, ns=PROBE_NS)
        fig = {}

        def failover():
            old.kill9()
            t0 = time.monotonic()
            # no primary answers: 503 and why, until the sentinels name another
            h = wait_for(lambda: (lambda r: r if r.status == 503 else None)(c.get("/health")),
                         3 * harness.SLOWDOWN, interval=0.02, what="/health 503")
            fig["kill -> /health 503"] = time.monotonic() - t0
            detail = h.json()["detail"]
            expect_true("127.0.0.1:%d (the primary of %s)" % (old.port, NAME) in detail,
                        "/health names the primary it cannot reach: %r" % detail)
            r = c.post("/%d/reserve_and_allocate_page_indices" % 0,
                       {"keys": [["during", ""]], "namespace": PROBE_NS})
            if c.get("/health").status == 503:  # still no primary: refused at once
                expect_eq(r.status, 503, "a change while no primary answers: %r" % (r,))
            wait_for(lambda: g.named() == new.port, SWITCH_BOUND_S, interval=0.02,
                     what="the sentinels name the replica")
            t1 = time.monotonic()
            fig["kill -> sentinels name the replica"] = t1 - t0
            wait_for(lambda: serving_from(c), FOLLOW_BOUND_S, interval=0.02,
                     what="the front end serving from the promoted replica")
            fig["sentinels' switch -> front end serves reads"] = time.monotonic() - t1
            # the killed node comes back as a replica of the new primary (what
            # the sentinels write into its configuration), empty: it syncs
            old.extra += ["--replicaof", "127.0.0.1", str(new.port)]
            t2 = time.monotonic()
            old.start()
            wait_for(lambda: acknowledged(c, 0), 10 * harness.SLOWDOWN, interval=0.05,
                     what="a change acknowledged once the old primary is a replica")
            fig["restart as replica -> a change acknowledged"] = time.monotonic() - t2
            time.sleep(1.5)  # the workers go on over the new primary

        files, stats = integrity.run_engines([srv], integrity.SECONDS,
                                             restart_at=integrity.SECONDS / 2,
                                             restarter=failover)
        print("# " + ", ".join("%s %.2f s" % kv for kv in fig.items()), flush=True)
        integrity.check_run("primary killed, sentinels' failover", files, stats)
        srv.check()
        expect_followed(srv, c, new, "the promoted replica")
    finally:
        srv.stop()


def test_a_switch_that_demotes_a_live_primary_is_followed_without_a_restart():
    """SENTINEL FAILOVER while the primary stays up: the sentinels name the
    replica at once, and make the old primary a replica of it about 8 s
    later (Sentinel waits that long before it reconfigures a returned
    primary); the test demotes it at once (REPLICAOF), as the sentinels
    will. The front end follows (the sentinels' answer, ROLE, or READONLY
    to a change, whichever comes first) and acknowledges changes on the new
    primary (WAIT 1: the old one is its replica)."""
    g = group()
    old, new = g.roles()
    srv = Server("--redis-timeout", "1", store=g.url).start()
    try:
        c = srv.client()
        harness.s_init(c, 0, 8, ns=PROBE_NS)
        expect_true(acknowledged(c, 1), "a change before the switch")

        def failover_started():
            try:
                return g.sentinels[0].cmd("SENTINEL", "FAILOVER", NAME) == b"OK"
            except harness_errors():
                return False  # NOGOODSLAVE until the sentinel sees the replica in sync
        wait_for(failover_started, 15 * harness.SLOWDOWN, interval=0.2,
                 what="SENTINEL FAILOVER accepted")
        t0 = time.monotonic()
        wait_for(lambda: g.named() == new.port, SWITCH_BOUND_S, interval=0.02,
                 what="the sentinels name the replica")
        t1 = time.monotonic()
        old.cmd("REPLICAOF", "127.0.0.1", str(new.port))
        i = [2]

        def ack():
            i[0] += 1
            return acknowledged(c, i[0])
        wait_for(ack, FOLLOW_BOUND_S, interval=0.05,
                 what="a change acknowledged by the new primary")
        print("# SENTINEL FAILOVER -> the sentinels name the replica %.2f s, -> a change "
              "acknowledged %.2f s later" % (t1 - t0, time.monotonic() - t1), flush=True)
        expect_followed(srv, c, new, "the new primary")
    finally:
        srv.stop()


def expect_followed(srv, c, new, what):
    """The front end srv (its client c) talks to `new` now, counted a switch,
    without a restart."""
    store = c.get("/v1/stats").json()["server"]["store"]
    expect_true(store["address"].startswith("127.0.0.1:%d " % new.port),
                "the front end follows %s: %r" % (what, store))
    expect_true(store["primary_switches"] >= 1, "switches: %r" % store)
    expect_true(srv.alive(), "the front end was not restarted")


def harness_errors():
    from redis_server import RedisError
    return (OSError, ConnectionError, RedisError)


if __name__ == "__main__":
    harness.main(globals())

"""test_redis.py: the Redis engine's own promises (--store), over real redis-servers.

- start-up: a wrong password, an unknown host, a malformed URL, a Redis (or a
  cluster) without the hf3fs-metad module each stop the start with a clear
  message and their own exit status; a unix socket and a password file work;
- two front ends over one Redis serve one state: a key written through one is
  read through the other, stock-client-like workers split across both never
  make two keys share a page;
- faults: Redis killed (SIGKILL, appendfsync always) under load and started
  again: every acknowledged confirmation is there; Redis stopped: 503 at once
  and /health says why, started again: service comes back by itself; Redis
  frozen (SIGSTOP): an answer within the command timeout, never a hang, never
  a status the stock clients retry after a change was sent; frozen for a
  moment under load from many clients: never a 500 (503 and 507 only);
- --redis-wait N: a change is acknowledged once N replicas have it, and is
  answered 507 (outcome unknown) when they do not confirm it; without the
  flag, a primary's changes are not waited on (the log, /health and a gauge
  say so) until it has a replica in sync, and then wait for one, answering
  507 and /health saying reads_only once it lost it, until it is back; an
  allocation answered 507 has its reservations freed within 1 s, never a
  page a client was answered;
- /metrics answers 200 while Redis is stopped: store_up 0, no pool figures;
- the pipelined link: many concurrent requests share --redis-connections
  connections (CLIENT LIST), their commands written together; past
  --redis-max-in-flight a request waits (requests waiting for a connection
  to open count too), and answers 503 while Redis is frozen; service comes
  back by itself;
- requests on fibers (each parks while it waits for Redis): pipelined
  requests on one connection are answered in order; a client that hangs up
  while its request waits, and a server stopped while requests wait, lose
  nothing and hang nothing; a connection opened to a frozen Redis parks its
  request, and the loop serves others meanwhile.
"""

import os
import random
import signal
import subprocess
import tempfile
import threading
import time

import harness
from harness import (Server, expect_eq, expect_error, expect_true, raw_request,
                     s_alloc, s_confirm, s_init, s_pages, v_alloc, v_confirm, v_exists, v_init,
                     v_locations, wait_for)
from redis_server import RedisServer

BIN = os.path.abspath(harness.BIN)
# Seconds within which the reservations of an allocation answered 507 are
# free again once its node answers (docs/many-nodes.md, "Faults").
SETTLE_BOUND = 1.0


def start_fails(args, timeout=10.0):
    """Run the server with args; it must exit non-zero. -> (status, stderr)."""
    p = subprocess.run(harness.WRAPPER + [BIN, "--port", "0"] + args, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=timeout * harness.SLOWDOWN)
    expect_true(p.returncode != 0, "server should not start with %r" % (args,))
    return p.returncode, p.stderr.decode(errors="replace")


# -- start-up ---------------------------------------------------------------

def test_wrong_password_stops_the_start_with_a_clear_message():
    with RedisServer(password="right") as r:
        rc, err = start_fails(["--store", "redis://:wrong@127.0.0.1:%d" % r.port])
        expect_eq(rc, 5, "exit status of a store that refuses us")
        expect_true("refused the credentials" in err and "WRONGPASS" in err, err)
        rc, err = start_fails(["--store", r.url])
        expect_eq(rc, 5, "exit status without the password")
        expect_true("password is needed" in err, err)


def test_unknown_host_and_refused_port_stop_the_start_with_a_clear_message():
    rc, err = start_fails(["--store", "redis://no-such-host.invalid:6379"])
    expect_eq(rc, 5, "exit status")
    expect_true("cannot connect to Redis at no-such-host.invalid:6379" in err, err)
    port = harness.free_port()
    rc, err = start_fails(["--store", "redis://127.0.0.1:%d" % port,
                           "--redis-connect-timeout", "0.5"])
    expect_true("cannot connect to Redis" in err and "refused" in err, err)


def test_a_redis_without_the_module_stops_the_start_with_how_to_load_it():
    with RedisServer(loadmodule=False) as r:
        rc, err = start_fails(["--store", r.url])
        expect_eq(rc, 6, "exit status of a Redis without the module (%s)" % err)
        expect_true("127.0.0.1:%d has not loaded the hf3fs-metad module" % r.port in err, err)
        expect_true("--loadmodule" in err and "hf3fs_metad_redis.so" in err
                    and "redis.conf" in err, "says how to load it: %s" % err)


def test_a_cluster_without_the_module_stops_the_start_too():
    from redis_cluster import RedisCluster
    with RedisCluster(primaries=1, replicas=0, loadmodule=False) as rc:
        rc_, err = start_fails(["--store", "redis-cluster://" + rc.seeds()])
        expect_eq(rc_, 6, "exit status (%s)" % err)
        expect_true("has not loaded the hf3fs-metad module" in err and "--loadmodule" in err, err)


def test_help_documents_the_exit_status_of_a_missing_module():
    p = subprocess.run([BIN, "--help"], capture_output=True, timeout=10)
    text = p.stdout.decode()
    expect_true("6 --store's" in text and "module" in text, text[-600:])
    p = subprocess.run([BIN, "--redis-use-log-bytes", "32K", "--help"], capture_output=True,
                       timeout=10)
    expect_true("deprecated and ignored" in p.stderr.decode(), p.stderr.decode())


def test_malformed_store_urls_are_usage_errors():
    for url in ("http://127.0.0.1:6379", "redis://127.0.0.1:0", "redis://127.0.0.1:x",
                "redis://127.0.0.1:6379/db", "unix://relative/path", "redis://:a%zz@h:1"):
        rc, err = start_fails(["--store", url])
        expect_eq(rc, 2, "exit status for %s (%s)" % (url, err))
        expect_true("--store" in err, err)


def test_unix_socket_and_password_file_work():
    with RedisServer(password="pa ss") as r, tempfile.TemporaryDirectory() as d:
        # a space in the password cannot be in a token file: use %-escapes
        with Server(store="redis://:pa%%20ss@127.0.0.1:%d/3" % r.port) as srv:
            v_init(srv.client(), 0, 8)
        expect_eq(r.cmd("SELECT", "3"), b"OK", "select")
    with RedisServer(password="s3cret") as r, tempfile.TemporaryDirectory() as d:
        pw = os.path.join(d, "pw")
        with open(pw, "w") as f:
            f.write("s3cret\n")
        os.chmod(pw, 0o600)
        with Server("--redis-password-file", pw, store=r.unix_url) as srv:
            c = srv.client()
            v_init(c, 0, 8)
            pages = v_alloc(c, 0, ["k"])
            v_confirm(c, 0, [("k", pages[0])])
            expect_eq(v_exists(c, ["k"]), [True], "key through the unix socket")
            expect_true("s3cret" not in srv.stderr(), "the password must never be logged")


# -- two front ends -----------------------------------------------------------

def test_a_key_written_through_one_front_end_is_read_through_the_other():
    with RedisServer() as r, Server(store=r.url) as a, Server(store=r.url) as b:
        ca, cb = a.client(), b.client()
        v_init(ca, 0, 64)
        v_init(cb, 1, 64)
        key = "9f2c4e1ab03d5c7e8f9a0b1c2d3e4f509f2c4e1ab03d5c7e8f9a0b1c2d3e4f50"
        p0 = v_alloc(ca, 0, [key])
        v_confirm(ca, 0, [(key, p0[0])])
        expect_eq(v_exists(cb, [key]), [False], "complete only once rank 1 has it too")
        p1 = v_alloc(cb, 1, [key])
        v_confirm(cb, 1, [(key, p1[0])])
        expect_eq(v_exists(ca, [key]), [True], "exists through the other front end")
        expect_eq(v_locations(cb, 0, [key]), [p0[0]], "location of rank 0 through b")
        # the same pool through both: a hit answers the page the other handed out
        expect_eq(v_alloc(cb, 0, [key]), p0, "hit through the other front end")
        s_init(ca, 0, 16, ns="sg")
        got = s_alloc(cb, 0, ["x"], ns="sg")
        s_confirm(ca, 0, [("x", got[0][1])], ns="sg")
        expect_eq(s_pages(cb, 0, ["x"], ns="sg"), [got[0][1]], "SGLang through both")
        a.check()


def _worker(srv_ports, rank, stop, errors, acked, seed):
    """A vLLM-like worker: allocate a batch (some prefixes shared with the other
    workers), write, confirm, read back; it alternates between front ends."""
    rng = random.Random(seed)
    clients = [harness.Client(p) for p in srv_ports]
    n = 0
    try:
        while not stop.is_set():
            c = clients[n % len(clients)]
            n += 1
            keys = ["doc%d-%d" % (rng.randrange(40), i) for i in range(rng.randrange(1, 9))]
            r = c.post("/keys/batch_allocate", {"rank": rank, "keys": keys})
            if r.status != 200:
                errors.append("allocate %d %r" % (r.status, r.body[:200]))
                return
            pages = [p for _, p in r.json()["results"]]
            if -1 in pages:
                continue
            conf = [[k, p] for k, p in zip(keys, pages)]
            r = clients[n % len(clients)].post("/keys/confirm_write",
                                              {"rank": rank, "confirmations": conf})
            if r.status != 204:
                errors.append("confirm %d %r" % (r.status, r.body[:200]))
                return
            acked.append((rank, conf))
            r = c.post("/keys/get_locations", {"rank": rank, "keys": keys})
            if r.status != 200:
                errors.append("locations %d" % r.status)
                return
    finally:
        for c in clients:
            c.close()


def test_workers_split_across_two_front_ends_never_share_a_page():
    # --redis-timeout 10 (as the suites run again over Redis): its subject is
    # the pages, and on a CPU-starved machine (make test's jobs on 2 cores) a
    # round trip can pass the default 2 s, a 507 that would fail it for that
    slow = ("--read-lease", "0.05", "--redis-timeout", "10")
    with RedisServer() as r, Server(*slow, store=r.url) as a, Server(*slow, store=r.url) as b:
        c = a.client()
        for rank in range(2):
            v_init(c, rank, 48)  # small pools: evictions all the time
        stop, errors, acked = threading.Event(), [], []
        threads = [threading.Thread(target=_worker, args=([a.port, b.port], rank % 2, stop,
                                                          errors, acked, rank))
                   for rank in range(8)]
        with harness.running(threads, stop, 30):
            time.sleep(3 * harness.SLOWDOWN)
        expect_eq(errors, [], "errors of the workers")
        expect_true(len(acked) > 50, "workers made progress: %d batches" % len(acked))
        a.check()
        stats = a.stats()
        for rank in range(2):
            p = stats[("kv", rank)]
            expect_true(p["evictions"] > 0, "rank %d evicted (small pool)" % rank)


# -- faults -------------------------------------------------------------------

def test_redis_killed_under_load_keeps_every_acknowledged_confirmation():
    with RedisServer(appendonly=True) as r, Server(store=r.url) as a, Server(store=r.url) as b:
        c = a.client()
        s_init(c, 0, 1 << 20, ns="crash")
        acked = {}  # key -> page
        lock = threading.Lock()
        stop = threading.Event()
        statuses, errors = {}, []

        def load(tid, port):
            cl = harness.Client(port, timeout=10)
            i = 0
            try:
                while not stop.is_set():
                    i += 1
                    keys = ["t%d-%d-%d" % (tid, i, j) for j in range(4)]
                    try:
                        r1 = cl.post("/0/reserve_and_allocate_page_indices",
                                     {"keys": [[k, ""] for k in keys], "namespace": "crash"})
                        statuses[r1.status] = statuses.get(r1.status, 0) + 1
                        if r1.status != 200:
                            time.sleep(0.02)
                            continue
                        got = [p for _, p in r1.json()["indices"]]
                        r2 = cl.post("/0/confirm_write",
                                     {"written_keys_to_confirm": [[k, p] for k, p in
                                                                  zip(keys, got)],
                                      "namespace": "crash"})
                        statuses[r2.status] = statuses.get(r2.status, 0) + 1
                        if r2.status == 204:
                            with lock:
                                acked.update(zip(keys, got))
                        elif r2.status not in (503, 507):
                            errors.append("confirm: %r" % r2)  # checked after the run
                    except (OSError, harness.http.client.HTTPException):
                        cl.close()
                        cl = harness.Client(port, timeout=10)
            finally:
                cl.close()

        threads = [threading.Thread(target=load, args=(t, (a.port, b.port)[t % 2]))
                   for t in range(6)]
        with harness.running(threads, stop, 30):
            for _ in range(3):
                time.sleep(0.7 * harness.SLOWDOWN)
                with lock:
                    before = len(acked)
                r.kill9()
                time.sleep(0.3)
                r.start()
                wait_for(lambda: a.client().get("/health").status == 200,
                         10 * harness.SLOWDOWN, what="front end a healthy again")
                wait_for(lambda: b.client().get("/health").status == 200,
                         10 * harness.SLOWDOWN, what="front end b healthy again")
                wait_for(lambda: len(acked) > before, 10 * harness.SLOWDOWN,
                         what="load going on after Redis came back")
        expect_eq(errors, [], "confirmations answered other than 204, 503 or 507")
        keys = sorted(acked)
        expect_true(len(keys) > 100, "acknowledged confirmations: %d" % len(keys))
        cb = b.client()
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            expect_eq(s_pages(cb, 0, chunk, ns="crash"), [acked[k] for k in chunk],
                      "pages of acknowledged keys after Redis was killed")
        a.check()
        expect_true(statuses.get(500, 0) == 0 and statuses.get(502, 0) == 0
                    and statuses.get(504, 0) == 0, "never 500/502/504: %r" % statuses)


def test_redis_stopped_answers_503_at_once_and_service_comes_back_by_itself():
    with RedisServer() as r, Server("--redis-timeout", "5", store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 8)
        r.stop()
        for path, body in (("/keys/batch_exists", {"keys": ["a"]}),
                           ("/keys/batch_allocate", {"rank": 0, "keys": ["a"]}),
                           ("/rank/1/initialize", {"role": "worker", "num_pages": 4}),
                           ("/0/exists", {"keys": ["a"]})):
            t0 = time.monotonic()
            resp = c.post(path, body)
            took = time.monotonic() - t0
            expect_error(resp, 503)
            expect_true(took < 1.0 * harness.SLOWDOWN,
                        "%s answered in %.2f s, not at once" % (path, took))
        h = c.get("/health")
        expect_eq(h.status, 503, "/health while Redis is down")
        # why, in the words of whoever saw it first: a call (connection
        # refused) or the monitor's probe as Redis shut down (closed, reset)
        detail = h.json()["detail"]
        expect_true("Redis at 127.0.0.1:%d is unavailable" % r.port in detail
                    and any(w in detail for w in ("refused", "closed the connection",
                                                  "reset by peer")),
                    "/health says why: %r" % h.json())
        r.start()
        wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                 what="/health 200 once Redis is back")
        v_init(c, 0, 8)  # Redis without persistence came back empty
        expect_eq(v_alloc(c, 0, ["a"]), [0], "service is back")


def test_metrics_answer_200_with_store_up_0_and_no_pool_figures_while_redis_is_stopped():
    """Monitoring sees the outage: /metrics answers 200 with what the front
    end knows (store_up 0, serving{mode="down"} 1, its own counters) and
    leaves the store-backed families without samples, never stale numbers;
    the text passes promtool. Redis back: the pools' figures are back."""
    import metrics_text
    with RedisServer() as r, Server(store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 8)
        v_alloc(c, 0, ["a"])

        def scrape():
            resp = c.get("/metrics")
            expect_eq(resp.status, 200, "GET /metrics: %r" % (resp.body[:300],))
            return resp.body.decode(), metrics_text.parse(resp.body.decode())

        _, up = scrape()
        expect_eq(metrics_text.total(up, "hf3fs_metad_pool_num_pages"), 8.0,
                  "a pool's figure while Redis runs")
        r.stop()
        wait_for(lambda: metrics_text.value(scrape()[1], "hf3fs_metad_store_up") == 0.0,
                 10 * harness.SLOWDOWN, what="hf3fs_metad_store_up 0 in a 200 answer")
        text, down = scrape()
        expect_eq(metrics_text.value(down, "hf3fs_metad_serving", mode="down"), 1.0,
                  "serving{mode=down}")
        expect_eq(metrics_text.value(down, "hf3fs_metad_accepting_changes"), 0.0,
                  "accepting_changes")
        expect_true(metrics_text.total(down, "hf3fs_metad_requests_total") > 0,
                    "the front end's own counters are there")
        stale = sorted(n for n, _ in down if n.startswith("hf3fs_metad_pool")
                       or n == "hf3fs_metad_pools")
        expect_eq(stale, [], "store-backed samples while Redis is stopped")
        ok, out = metrics_text.promtool_check(text)
        expect_true(ok, "promtool check metrics while Redis is stopped:\n%s" % out)
        r.start()
        wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                 what="/health 200 once Redis is back")
        _, back = scrape()
        expect_true(metrics_text.value(back, "hf3fs_metad_pools") is not None,
                    "hf3fs_metad_pools once Redis answers again")


def _waits(r):
    """WAIT commands the Redis r has run (INFO commandstats)."""
    for line in r.cmd("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_wait:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_by_default_a_primary_is_waited_on_once_it_has_a_replica_and_reads_only_once_it_lost_it():
    """Without --redis-wait, over one Redis without a replica: its changes
    are not waited on (no WAIT runs), the log, /health and the gauge say
    so. A replica attached (REPLICAOF) and in sync: its changes wait for it
    from then on (WAIT runs), /health and the gauge have nothing to say. The
    replica killed: the primary stays waited on, so a change answers 507
    (after the WAIT timeout) and /health answers 200 "reads_only" naming
    it, reads go on; the replica back in sync: changes are acknowledged and
    /health says ok. --redis-wait 0 given: never a WAIT."""
    import metrics_text
    # no 5 s pause before a full sync (Redis's default): the replica's
    # attach and restart are the test's, not its wait
    with RedisServer(extra=["--repl-diskless-sync-delay", "0"]) as primary, \
            RedisServer(extra=[]) as replica:
        addr = "127.0.0.1:%d" % primary.port
        with Server("--redis-wait-timeout", str(2 * harness.SLOWDOWN),
                    store=primary.url) as srv:
            c = srv.client()

            def unreplicated():
                m = metrics_text.parse(c.get("/metrics").body.decode())
                return metrics_text.value(m, "hf3fs_metad_store_unreplicated_primaries")

            expect_true("Redis primary %s has no replica: its changes are not waited on, so "
                        "no other node has them and losing this one can lose acknowledged work"
                        % addr in srv.stderr(), srv.stderr())
            expect_eq(c.get("/health").json(), {"status": "ok", "unreplicated": [addr]},
                      "/health without a replica")
            expect_eq(unreplicated(), 1.0, "the gauge without a replica")
            v_init(c, 0, 8)
            pages = v_alloc(c, 0, ["k"])
            v_confirm(c, 0, [("k", pages[0])])
            expect_eq(_waits(primary), 0, "WAITs run while the primary has no replica")

            replica.replicate(primary, 10 * harness.SLOWDOWN)
            wait_for(lambda: c.get("/health").json() == {"status": "ok"},
                     10 * harness.SLOWDOWN, interval=0.1,
                     what="/health without unreplicated once the replica is in sync")
            expect_eq(unreplicated(), 0.0, "the gauge with the replica")
            expect_true("Redis primary %s has a replica in sync: its changes wait for one"
                        % addr in srv.stderr(), srv.stderr())
            before = _waits(primary)
            # a loaded machine can delay the replica's first acknowledgements
            # past the WAIT timeout: allocate until one is acknowledged
            wait_for(lambda: c.post("/keys/batch_allocate",
                                    {"rank": 0, "keys": ["w"]}).status == 200,
                     10 * harness.SLOWDOWN, interval=0.2, what="an acknowledged change")
            expect_true(_waits(primary) > before, "a change waited for the replica")

            replica.kill9()
            t0 = time.monotonic()
            expect_error(c.post("/keys/batch_allocate", {"rank": 0, "keys": ["x"]}), 507)
            print("# the change without its replica answered 507 in %.2f s"
                  % (time.monotonic() - t0), flush=True)
            h = c.get("/health")
            expect_eq(h.status, 200, "/health while reads are served")
            body = h.json()
            expect_eq(body["status"], "reads_only", "/health status: %r" % body)
            expect_true("lost its replica" in body["detail"] and "507" in body["detail"],
                        "/health says why: %r" % body)
            expect_eq(body.get("unreplicated"), [addr], "/health names it: %r" % body)
            expect_eq(v_exists(c, ["k"]), [True], "reads go on")
            m = metrics_text.parse(c.get("/metrics").body.decode())
            expect_eq((metrics_text.value(m, "hf3fs_metad_serving", mode="reads_only"),
                       metrics_text.value(m, "hf3fs_metad_accepting_changes"),
                       metrics_text.value(m, "hf3fs_metad_store_up"),
                       metrics_text.value(m, "hf3fs_metad_store_unreplicated_primaries")),
                      (1.0, 0.0, 1.0, 1.0),
                      "serving{mode=reads_only}, accepting_changes, store_up, unreplicated")
            t0 = time.monotonic()
            replica.start()
            replica.cmd("REPLICAOF", "127.0.0.1", str(primary.port))
            print("# replica restarted in %.2f s" % (time.monotonic() - t0), flush=True)

            def acknowledged():
                resp = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["y"]})
                return resp.status == 200
            wait_for(acknowledged, 15 * harness.SLOWDOWN, interval=0.2,
                     what="a change acknowledged once the replica is back")
            print("# a change acknowledged %.2f s after the replica's restart"
                  % (time.monotonic() - t0), flush=True)
            wait_for(lambda: c.get("/health").json() == {"status": "ok"}, 5 * harness.SLOWDOWN,
                     what="/health ok once the replica is back")
        with Server("--redis-wait", "0", store=primary.url) as srv:
            c = srv.client()
            expect_eq(srv.client().get("/v1/stats").json()["server"]["store"]["wait_replicas"],
                      0, "--redis-wait 0")
            before = _waits(primary)
            v_alloc(c, 0, ["z"])
            expect_eq(_waits(primary), before, "WAITs under --redis-wait 0")
            expect_true("(the default)" not in srv.stderr(), srv.stderr())


def test_an_allocation_answered_507_is_settled_and_never_a_page_a_client_was_told():
    """An allocation answered 507 (applied on Redis, WAIT unmet: Redis has no
    replica for the front end's --redis-wait 1) has its reservations free
    again within SETTLE_BOUND s: the reserved count is back to what it was,
    while the pages another front end's client was answered stay reserved
    and are confirmed."""
    with RedisServer() as r, Server("--redis-wait", "0", store=r.url) as plain, \
            Server("--redis-wait", "1", "--redis-wait-timeout", "0.3", store=r.url) as waiting:
        c = plain.client()
        v_init(c, 0, 16)
        told = v_alloc(c, 0, ["t1", "t2"])  # answered, not yet confirmed
        before = plain.stats()[("kv", 0)]["reserved"]
        expect_eq(before, 2, "reserved before")
        t0 = time.monotonic()
        expect_error(waiting.client().post("/keys/batch_allocate",
                                           {"rank": 0, "keys": ["x1", "x2", "x3"]}), 507)

        def settled():
            return plain.stats()[("kv", 0)]["reserved"] == before
        wait_for(settled, SETTLE_BOUND * harness.SLOWDOWN, interval=0.05,
                 what="the 507's reservations settled")
        print("# reserved back to %d %.2f s after the 507 was sent"
              % (before, time.monotonic() - t0), flush=True)
        expect_eq(plain.stats()[("kv", 0)]["reservations"], 5,
                  "reservations made: the 507's three were made")
        v_confirm(c, 0, [("t1", told[0]), ("t2", told[1])])
        st = plain.stats()[("kv", 0)]
        expect_eq((st["owned"], st["reserved"]), (2, 0), "the told pages confirmed")
        expect_eq(sum(st["refused_confirmations"].values()), 0, "no confirmation refused")


def test_redis_frozen_answers_within_the_command_timeout_never_a_retried_status():
    with RedisServer() as r, Server("--redis-timeout", "0.5", store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 8)
        with r.frozen():
            t0 = time.monotonic()
            resp = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["a"]})
            took = time.monotonic() - t0
            expect_error(resp, 507)
            expect_true("unknown" in resp.json()["detail"], resp.json()["detail"])
            expect_true(took < 2.0 * harness.SLOWDOWN, "answered in %.2f s" % took)
            t0 = time.monotonic()
            expect_error(c.post("/keys/batch_exists", {"keys": ["a"]}), 503)
            expect_true(time.monotonic() - t0 < 1.0 * harness.SLOWDOWN, "503 at once once down")
        wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                 what="/health 200 once Redis answers again")
        pages = v_alloc(c, 0, ["a", "b"])
        expect_true(pages[1] >= 0, "service back: %r" % pages)
        srv.check()


def test_redis_wait_acknowledges_once_replicas_have_the_change():
    with RedisServer() as primary, RedisServer(extra=[]) as replica:
        with Server("--redis-wait", "1", "--redis-wait-timeout", "0.3",
                    store=primary.url) as srv:
            # no replica yet: the change is applied on the primary but unconfirmed
            resp = srv.client().post("/rank/0/initialize", {"role": "worker", "num_pages": 8})
            expect_error(resp, 507)
        replica.replicate(primary, 10 * harness.SLOWDOWN)
        # A replica on a loaded machine can take longer than 0.3 s to confirm.
        with Server("--redis-wait", "1", "--redis-wait-timeout", str(5 * harness.SLOWDOWN),
                    store=primary.url) as srv:
            c = srv.client()
            v_init(c, 0, 8)
            pages = v_alloc(c, 0, ["k"])
            v_confirm(c, 0, [("k", pages[0])])
            wait_for(lambda: replica.cmd("EXISTS", "hf3fs:{6b76}") == 1, 5, what="on the replica")


def _mixed_load(port, stop, statuses, lock, seed):
    """Every kind of call, changes and reads, in a loop; counts the statuses."""
    rng = random.Random(seed)
    c = harness.Client(port, timeout=30 * harness.SLOWDOWN)

    def count(status):
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    try:
        while not stop.is_set():
            keys = ["s%d-%d" % (rng.randrange(200), i) for i in range(rng.randrange(1, 6))]
            rank = rng.randrange(2)
            try:
                r = c.post("/keys/batch_allocate", {"rank": rank, "keys": keys})
                count(r.status)
                if r.status == 200:
                    pages = [p for _, p in r.json()["results"]]
                    conf = [[k, p] for k, p in zip(keys, pages) if p >= 0]
                    count(c.post("/keys/confirm_write",
                                 {"rank": rank, "confirmations": conf}).status)
                count(c.post("/keys/batch_exists", {"keys": keys}).status)
                count(c.post("/keys/get_locations", {"rank": rank, "keys": keys}).status)
                count(c.post("/0/exists", {"keys": keys}).status)
                if rng.random() < 0.2:
                    count(c.get("/v1/stats").status)
                    count(c.get("/metrics").status)
                    count(c.get("/v1/check").status)
            except (OSError, harness.http.client.HTTPException):
                c.close()
                c = harness.Client(port, timeout=30 * harness.SLOWDOWN)
    finally:
        c.close()


def test_redis_starved_for_a_moment_under_load_answers_no_500():
    """SIGSTOP (Redis gets no CPU) for 1.5 s under load from 8 clients, twice:
    calls in flight time out (507 for a change, 503 for a read), later ones
    are refused at once (503) until the monitor sees Redis again; nothing is
    answered 500, and the state holds afterwards."""
    with RedisServer() as r, Server("--redis-timeout", "0.5", store=r.url) as srv:
        c = srv.client()
        for rank in range(2):
            v_init(c, rank, 64)
        s_init(c, 0, 64)
        stop, lock, statuses = threading.Event(), threading.Lock(), {}
        threads = [threading.Thread(target=_mixed_load, args=(srv.port, stop, statuses, lock, t))
                   for t in range(8)]
        with harness.running(threads, stop, 60):
            try:
                for _ in range(2):
                    time.sleep(1.0 * harness.SLOWDOWN)
                    os.kill(r.proc.pid, signal.SIGSTOP)
                    time.sleep(1.5)
                    os.kill(r.proc.pid, signal.SIGCONT)
                    wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                             what="/health 200 once Redis runs again")
                time.sleep(0.5)
            finally:
                os.kill(r.proc.pid, signal.SIGCONT)
        print("# statuses under starvation: %r" % sorted(statuses.items()), flush=True)
        unexpected = {s: n for s, n in statuses.items() if s not in (200, 204, 404, 503, 507)}
        expect_eq(unexpected, {}, "statuses other than 200/204/404/503/507")
        expect_true(statuses.get(503, 0) + statuses.get(507, 0) > 0,
                    "the starvation was seen: %r" % statuses)
        expect_true(statuses.get(200, 0) > 50, "load made progress: %r" % statuses)
        srv.check()


def _client_count(r):
    """Clients of the Redis but the test's own connection (CLIENT LIST)."""
    return len([ln for ln in r.cmd("CLIENT", "LIST").decode().splitlines() if ln.strip()]) - 1


def test_many_concurrent_requests_share_the_flag_s_connections_to_redis():
    with RedisServer() as r, Server("--redis-connections", "2", store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 256)
        v_init(c, 1, 256)
        keys = ["p%03d" % i for i in range(64)]
        pages = v_alloc(c, 0, keys)
        v_confirm(c, 0, list(zip(keys, pages)))
        stop, errors, done = threading.Event(), [], [0]
        lock = threading.Lock()

        def reader():
            cc = harness.Client(srv.port, timeout=30 * harness.SLOWDOWN)
            try:
                while not stop.is_set():
                    resp = cc.post("/keys/batch_exists", {"keys": keys})
                    with lock:
                        if resp.status != 200:
                            errors.append(resp.status)
                        done[0] += 1
            finally:
                cc.close()

        threads = [threading.Thread(target=reader) for _ in range(24)]
        counts = []
        with harness.running(threads, stop, 60):
            deadline = time.monotonic() + 3.0 * harness.SLOWDOWN
            while time.monotonic() < deadline:
                counts.append(_client_count(r))
                time.sleep(0.05)
        stats = c.get("/v1/stats")
        expect_eq(stats.status, 200, "/v1/stats after the load: %r" % stats.body[:500])
        store = stats.json()["server"]["store"]
        print("# clients of Redis seen under load: %r; requests %d, calls %d, writes %d"
              % (sorted(set(counts)), done[0], store["calls"], store["writes"]), flush=True)
        expect_eq(errors, [], "statuses other than 200 under load")
        expect_true(done[0] > 100, "the load ran: %d requests" % done[0])
        # 2 shared connections and the monitor's, however many requests at once
        expect_eq(max(counts), 3, "the front end's connections to Redis: %r" % counts)
        expect_eq(store["connections"], 2, "store.connections in /v1/stats")
        # How many commands share a write depends on timing (a lone command
        # goes out at once): never more writes than commands.
        expect_true(0 < store["writes"] <= store["calls"],
                    "%d writes for %d calls" % (store["writes"], store["calls"]))


def test_in_flight_bound_answers_503_while_redis_is_frozen_and_recovers():
    frozen_reads_past_the_bound(drop_connections=False)


def test_in_flight_bound_holds_while_a_connection_opens_to_a_frozen_redis():
    """The requests that wait for a connection being opened count against
    the bound: past it they wait for room, as on an open connection."""
    frozen_reads_past_the_bound(drop_connections=True)


def frozen_reads_past_the_bound(drop_connections):
    """Six reads under --redis-max-in-flight 1 while Redis is frozen (its
    connections to the front end dropped first if drop_connections): each
    answers 503 within the command timeout, one at least waited for room,
    and service comes back once Redis does."""
    with RedisServer() as r, Server("--redis-timeout", "1", "--redis-max-in-flight", "1",
                                    store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 8)
        statuses, lock = [], threading.Lock()
        if drop_connections:
            r.drop_clients()

        def read():
            cc = harness.Client(srv.port, timeout=30 * harness.SLOWDOWN)
            t0 = time.monotonic()
            status = cc.post("/keys/batch_exists", {"keys": ["a"]}).status
            with lock:
                statuses.append((status, time.monotonic() - t0))
            cc.close()

        with r.frozen():
            threads = [threading.Thread(target=read) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        print("# statuses and seconds while frozen: %r" % statuses, flush=True)
        expect_eq(sorted(s for s, _ in statuses), [503] * 6, "reads while Redis is frozen")
        expect_true(max(t for _, t in statuses) < 3.0 * harness.SLOWDOWN,
                    "answered within the command timeout: %r" % statuses)
        wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                 what="/health 200 once Redis answers again")
        store = c.get("/v1/stats").json()["server"]["store"]
        expect_true(store["waited_for_room"] >= 1,
                    "requests waited past the bound: %r" % store["waited_for_room"])
        expect_eq(v_exists(c, ["a"]), [False], "service back")
        expect_eq(v_alloc(c, 0, ["a"])[0] >= 0, True, "changes served again")


# -- requests on fibers -----------------------------------------------------

def test_pipelined_requests_that_each_wait_for_redis_are_answered_in_order():
    """Twelve requests in one write on one connection: each parks its fiber
    for Redis, the next is parsed only once its answer is queued."""
    import json
    with RedisServer() as r, Server(store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 64)
        v_init(c, 1, 64)
        keys = ["p%02d" % i for i in range(6)]
        reqs = [raw_request("POST", "/keys/batch_allocate", {"rank": 0, "keys": keys}),
                raw_request("POST", "/keys/confirm_write",
                            {"rank": 0, "confirmations": [[k, i] for i, k in enumerate(keys)]}),
                raw_request("POST", "/keys/batch_exists", {"keys": keys})]
        for i, k in enumerate(keys):
            reqs.append(raw_request("POST", "/keys/batch_allocate", {"rank": 1, "keys": [k]}))
        reqs.append(raw_request("POST", "/keys/get_locations", {"rank": 0, "keys": keys[::-1]}))
        reqs.append(raw_request("GET", "/health"))
        with srv.raw() as raw:
            raw.send(b"".join(reqs))
            answers = [raw.read_response() for _ in reqs]
        bodies = [json.loads(a.body) if a.body else None for a in answers]
        expect_eq([a.status for a in answers], [200, 204, 200] + [200] * 6 + [200, 200])
        expect_eq(bodies[0], {"rank": 0, "results": [[k, i] for i, k in enumerate(keys)]})
        expect_eq(bodies[2], {"exists": [False] * 6}, "rank 1 has none yet: not complete")
        for i, k in enumerate(keys):
            expect_eq(bodies[3 + i]["results"][0][0], k, "answer %d in its request's place" % i)
        expect_eq(bodies[9], {"locations": [None] * 6})
        expect_eq(bodies[10]["status"], "ok")
        srv.check()


def test_a_client_gone_while_its_request_waits_for_redis_costs_nothing_else():
    """Redis frozen: a request parks; its client hangs up; Redis answers
    again: the server serves on, and the connection is counted closed."""
    with RedisServer() as r, Server("--redis-timeout", "1", store=r.url) as srv:
        c = srv.client()
        v_init(c, 0, 8)
        with r.frozen():
            raw = srv.raw()
            raw.send(raw_request("POST", "/keys/batch_exists", {"keys": ["a"]}))
            time.sleep(0.2)  # parked on its fiber now
            raw.close()
            time.sleep(0.2)
        wait_for(lambda: c.get("/health").status == 200, 10 * harness.SLOWDOWN,
                 what="/health 200 once Redis answers again")
        expect_eq(v_alloc(c, 0, ["a"])[0] >= 0, True, "served on")

        def open_connections():
            for line in c.get("/metrics").body.decode().splitlines():
                if line.startswith("hf3fs_metad_connections_open "):
                    return float(line.split()[1])
            return None
        wait_for(lambda: open_connections() == 1, 10 * harness.SLOWDOWN,
                 what="only the test's own connection open")


def test_a_request_waiting_for_redis_longer_than_the_idle_timeout_still_gets_its_answer():
    """--idle-timeout 1 and Redis frozen for the 2.5 s of --redis-timeout:
    the connection is busy, not idle; its answer (503) comes."""
    with RedisServer() as r, Server("--idle-timeout", "1", "--redis-timeout", "2.5",
                                    store=r.url) as srv:
        v_init(srv.client(), 0, 8)
        with r.frozen():
            with srv.raw(timeout=10 * harness.SLOWDOWN) as raw:
                t0 = time.monotonic()
                raw.send(raw_request("POST", "/keys/batch_exists", {"keys": ["a"]}))
                resp = raw.read_response()
                took = time.monotonic() - t0
        expect_eq(resp.status, 503, "answered, not cut: %r" % resp)
        expect_true(took >= 2.0, "it waited for Redis (%.2f s), past the idle timeout" % took)


def test_a_connection_opened_to_a_frozen_redis_parks_its_request_not_the_loop():
    """One loop (--threads 1). Redis drops the front end's connections and
    freezes: the next call opens a new one, whose SELECT waits out
    --redis-timeout. Meanwhile GET /health, served by the same loop, is
    answered, seconds before that call gives up: opening a connection parks
    the request that needs it, not the loop (a slow or dead node delays
    only the commands that go to it)."""
    timeout = 3 * harness.SLOWDOWN
    with RedisServer() as r, Server("--threads", "1", "--redis-timeout", str(timeout),
                                    store=r.url) as srv:
        v_init(srv.client(), 0, 8)
        r.drop_clients()
        with r.frozen():
            with srv.raw(timeout=5 * timeout) as waiting:
                waiting.send(raw_request("POST", "/keys/batch_exists", {"keys": ["a"]}))
                answered = {}

                def wait_answer():
                    answered["resp"] = waiting.read_response()
                    answered["at"] = time.monotonic()
                t = threading.Thread(target=wait_answer)
                t.start()
                time.sleep(0.3)  # the call is opening its connection by now
                health = srv.get_once("/health")
                health_at = time.monotonic()
                t.join()
        expect_true(health.status in (200, 503), "/health answered: %r" % (health,))
        expect_eq(answered["resp"].status, 503, "the call itself, refused once Redis timed out")
        ahead = answered["at"] - health_at
        expect_true(ahead > timeout / 3, "/health was answered %.2f s before the call that "
                    "opens a connection to the frozen Redis gave up (%.1f s of --redis-timeout):"
                    " that call held the loop" % (ahead, timeout))


def test_a_server_stopped_while_requests_wait_for_redis_exits_cleanly_within_the_timeout():
    with RedisServer() as r:
        srv = Server("--redis-timeout", "1", store=r.url)
        srv.start()
        raws = []
        try:
            v_init(srv.client(), 0, 8)
            with r.frozen():
                for i in range(4):
                    raw = srv.raw()
                    raw.send(raw_request("POST", "/keys/batch_allocate",
                                         {"rank": 0, "keys": ["k%d" % i]}))
                    raws.append(raw)
                time.sleep(0.2)  # parked on their fibers now
                t0 = time.monotonic()
                srv.stop()  # SIGTERM: exit status 0, or it raises
                took = time.monotonic() - t0
            expect_true(took < 5.0 * harness.SLOWDOWN, "stopped in %.2f s" % took)
        finally:
            for raw in raws:
                raw.close()


if __name__ == "__main__":
    harness.main(globals())

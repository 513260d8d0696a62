"""Admission: slow clients cannot hold the server's connections, and a full
connection table makes room for a client that sends whole requests.

  - a request must arrive in time: its request line and headers within
    --header-timeout of its first byte (of the connection's opening for the
    first request), its body within --body-timeout of the headers plus a
    second per --body-min-rate bytes; a late request gets 408 and its
    connection closes (one that never sent a byte is closed without an
    answer);
  - at --max-connections, a new connection is admitted by shedding the
    connection furthest from being served: the oldest incomplete request or
    the least recently active connection between requests, whichever has
    waited longer;
  - with tenants, each runs at most --tenant-max-in-flight requests at once:
    the rest of a tenant's flood waits in that tenant's own line.

The deadlines are whole seconds and the loops check them once a second, so
each test here waits a few seconds of real time: the tests set the
deadlines to 1 s.

Run alone: HF3FS_METAD_BIN=build/hf3fs-metad python3 tests/integration/test_admission.py [name...]
"""

import json
import socket
import threading
import time

import harness
import metrics_text
from harness import Server, TokenFile, expect_eq, expect_true, raw_request, s_alloc, s_init
from redis_server import RedisServer

IN_MEMORY = ("--in-memory",)
# What a deadline of 1 s may take to act: the loops look once a second.
LATE = 3.0 * harness.SLOWDOWN


def metric(srv, name, headers=None):
    c = srv.client()
    try:
        r = c.get("/metrics", headers=headers)
        expect_eq(r.status, 200, "GET /metrics")
        return metrics_text.value(metrics_text.parse(r.body.decode()), name)
    finally:
        c.close()


def read_408(raw, what):
    resp = raw.read_response()
    expect_eq(resp.status, 408, "status of %s" % what)
    expect_eq(resp.header("Connection"), "close", "Connection header of the 408")
    detail = json.loads(resp.body)["detail"]
    expect_true(raw.closed_by_peer(LATE), "%s: connection closed after its 408" % what)
    return detail


def trickle(raw, data, interval, stop_after):
    """Send data a byte at a time every interval seconds, for at most
    stop_after seconds or until the server closes; the bytes sent."""
    sent = 0
    end = time.monotonic() + stop_after
    while sent < len(data) and time.monotonic() < end:
        try:
            raw.send(data[sent:sent + 1])
        except OSError:
            break
        sent += 1
        time.sleep(interval)
    return sent


def whole_request_served(srv, timeout=None):
    """A fresh connection with a whole request is answered 200."""
    with srv.raw(timeout=timeout or harness.REQUEST_TIMEOUT) as raw:
        raw.send(raw_request("GET", "/health"))
        return raw.read_response().status == 200


# -- deadlines -------------------------------------------------------------------

def test_headers_trickled_past_the_header_timeout_are_answered_408_and_the_connection_closes():
    with Server("--header-timeout", "1", *IN_MEMORY) as srv:
        c = srv.client()
        s_init(c, 0, 8)
        request = raw_request("POST", "/0/reserve_and_allocate_page_indices",
                              {"keys": [["late", None]]})
        with srv.raw() as raw:
            t0 = time.monotonic()
            box = {}
            # a byte every 0.2 s: never idle, never complete within the second
            sender = threading.Thread(
                target=lambda: box.update(sent=trickle(raw, request, 0.2, 2 * LATE)))
            sender.start()
            detail = read_408(raw, "headers trickled for over --header-timeout")
            took = time.monotonic() - t0
            sender.join()
        expect_true("--header-timeout" in detail, "the 408 names its flag: %r" % detail)
        expect_true(1.0 <= took <= 1.0 + LATE, "408 after %.2f s, deadline 1 s" % took)
        expect_true(box["sent"] < len(request), "the request was still incomplete")
        # nothing was allocated by the late request
        expect_eq(s_alloc(c, 0, [["late", None]]), [(False, 0)], "the late key's allocation")
        expect_eq(metric(srv, "hf3fs_metad_connections_timed_out_total"), 1, "timed out")
        expect_true(whole_request_served(srv), "a whole request after the 408")


def test_a_body_slower_than_its_minimum_rate_is_answered_408_after_the_body_timeout():
    with Server("--body-timeout", "1", "--body-min-rate", "1K", *IN_MEMORY) as srv:
        body = json.dumps({"keys": ["k%03d" % i for i in range(100)]}).encode()
        head = raw_request("POST", "/0/exists", body)[:-len(body)]
        with srv.raw() as raw:
            raw.send(head)
            t0 = time.monotonic()
            threading.Thread(target=trickle, args=(raw, body, 0.1, 2 * LATE),
                             daemon=True).start()
            detail = read_408(raw, "a body sent at 10 bytes a second")
            took = time.monotonic() - t0
        expect_true("--body-timeout" in detail and "--body-min-rate" in detail,
                    "the 408 names its flags: %r" % detail)
        # 1 s, plus 1 s per 1,024 bytes received (tens at 10 bytes a second)
        expect_true(1.0 <= took <= 1.1 + LATE, "408 after %.2f s" % took)


def test_a_body_sent_faster_than_the_minimum_rate_is_served_past_the_body_timeout():
    with Server("--body-timeout", "1", "--body-min-rate", "1K", *IN_MEMORY) as srv:
        c = srv.client()
        s_init(c, 0, 8)
        keys = ["fast-%04d" % i for i in range(400)]
        body = json.dumps({"keys": keys}).encode()  # ~5 KB: 2.4 s at 2 KB/s
        head = raw_request("POST", "/0/exists", body)[:-len(body)]
        with srv.raw() as raw:
            raw.send(head)
            t0 = time.monotonic()
            for i in range(0, len(body), 400):  # 400 bytes every 0.2 s: 2 KB/s
                raw.send(body[i:i + 400])
                time.sleep(0.2)
            resp = raw.read_response()
            took = time.monotonic() - t0
        expect_eq(resp.status, 200, "a body at twice --body-min-rate, longer than "
                  "--body-timeout (%.1f s)" % took)
        expect_true(took > 2.0, "the body took %.2f s, past the 1 s --body-timeout" % took)
        expect_eq(json.loads(resp.body)["exists"], [False] * len(keys), "its answer")


def test_a_connection_that_sends_nothing_is_closed_without_an_answer_at_the_header_timeout():
    with Server("--header-timeout", "1", "--idle-timeout", "60", *IN_MEMORY) as srv:
        with srv.raw() as raw:
            t0 = time.monotonic()
            expect_true(raw.closed_by_peer(1.0 + LATE), "a silent connection closed")
            took = time.monotonic() - t0
            expect_eq(raw.buf, b"", "what the server sent to a connection that sent nothing")
        expect_true(took >= 0.9, "closed after %.2f s, deadline 1 s" % took)


def test_a_kept_alive_connection_waits_between_requests_for_the_idle_timeout_not_the_header_timeout():
    with Server("--header-timeout", "1", "--idle-timeout", "60", *IN_MEMORY) as srv:
        with srv.raw() as raw:
            for i in range(2):
                raw.send(raw_request("GET", "/health"))
                expect_eq(raw.read_response().status, 200, "request %d" % i)
                time.sleep(2.5)  # between requests: past the header deadline
            expect_true(not raw.closed_by_peer(0.1), "kept-alive connection still open")


# -- shedding --------------------------------------------------------------------

def partial(srv, i):
    raw = srv.raw()
    raw.send(raw_request("POST", "/0/exists", {"keys": ["p%d" % i]})[:20])
    return raw


def test_a_full_table_sheds_the_oldest_incomplete_request_to_admit_a_whole_one():
    with Server("--max-connections", "4", "--threads", "1", "--header-timeout", "0",
                *IN_MEMORY) as srv:
        harness.wait_for(lambda: metric(srv, "hf3fs_metad_connections_open") == 1, LATE,
                         what="only the scrape's connection open")
        held = []
        try:
            for i in range(4):
                held.append(partial(srv, i))
                time.sleep(0.05)
            # a newcomer that stays, idle after its answer
            newcomer = srv.raw()
            held.append(newcomer)
            newcomer.send(raw_request("GET", "/health"))
            expect_eq(newcomer.read_response().status, 200, "a whole request, 4 of 4 slots held")
            expect_true(held[0].closed_by_peer(LATE), "the oldest incomplete request shed")
            for raw in held[1:]:
                expect_true(not raw.closed_by_peer(0.1), "a younger incomplete request kept")
            # the next: an incomplete request began before the newcomer's answer
            expect_true(whole_request_served(srv), "a second whole request")
            expect_true(held[1].closed_by_peer(LATE), "then the next oldest shed")
            for raw in held[2:]:
                expect_true(not raw.closed_by_peer(0.1), "the younger ones kept")
            newcomer.send(raw_request("GET", "/health"))
            expect_eq(newcomer.read_response().status, 200, "the idle newcomer still served")
        finally:
            for raw in held:
                raw.close()
        expect_true(metric(srv, "hf3fs_metad_connections_shed_total") >= 2, "shed counted")
        expect_eq(metric(srv, "hf3fs_metad_connections_refused_total"), 0, "none refused")


def test_a_full_table_sheds_the_least_recently_active_connection_between_requests_first():
    with Server("--max-connections", "3", "--threads", "1", *IN_MEMORY) as srv:
        conns = []
        try:
            for i in range(3):
                raw = srv.raw()
                raw.send(raw_request("GET", "/health"))
                expect_eq(raw.read_response().status, 200, "connection %d served" % i)
                conns.append(raw)
            time.sleep(1.1)  # activity is kept in whole seconds
            for raw in conns[1:]:
                raw.send(raw_request("GET", "/health"))
                expect_eq(raw.read_response().status, 200, "a later request")
            with srv.raw() as newcomer:
                newcomer.send(raw_request("GET", "/health"))
                expect_eq(newcomer.read_response().status, 200, "a newcomer at the limit")
                expect_true(conns[0].closed_by_peer(LATE), "the least recently active shed")
                for raw in conns[1:]:
                    raw.send(raw_request("GET", "/health"))
                    expect_eq(raw.read_response().status, 200, "a more recent one still served")
        finally:
            for raw in conns:
                raw.close()


def test_a_slowloris_flood_larger_than_the_table_leaves_fresh_clients_served():
    limit = 64
    with Server("--max-connections", str(limit), *IN_MEMORY) as srv:
        stop = threading.Event()
        opened = [0]

        def attacker():
            socks = []
            head = raw_request("POST", "/0/exists", {"keys": ["x"]})
            while not stop.is_set():
                while len(socks) < 2 * limit and not stop.is_set():
                    try:
                        s = socket.create_connection(("127.0.0.1", srv.port), timeout=1)
                        s.sendall(head[:10])
                        socks.append(s)
                        opened[0] += 1
                    except OSError:
                        break
                time.sleep(0.05)
                alive = []
                for s in socks:  # a byte each; the shed ones are replaced
                    try:
                        s.sendall(b"x")
                        alive.append(s)
                    except OSError:
                        s.close()
                socks = alive
            for s in socks:
                s.close()

        t = threading.Thread(target=attacker)
        t.start()
        try:
            harness.wait_for(lambda: opened[0] >= 2 * limit, 5 * LATE,
                             what="the flood holding twice the table")
            served = sum(whole_request_served(srv, timeout=2.0 * harness.SLOWDOWN)
                         for _ in range(50))
        finally:
            stop.set()
            t.join()
        expect_eq(served, 50, "fresh clients with whole requests served during the flood")
        expect_true(metric(srv, "hf3fs_metad_connections_shed_total") >= 50,
                    "the flood's connections were shed to admit them")


# -- greedy tenants --------------------------------------------------------------

def test_a_tenants_flood_past_its_max_in_flight_waits_in_its_own_line_not_ahead_of_another():
    """Over a frozen Redis every request parks: tenant greedy's 10 take its 4
    places and 6 wait in its line; tenant steady's request takes a place of
    its own room at once. When Redis runs again, all are answered."""
    tokens = "greedy-token greedy\nsteady-token steady\nop-token *\n"
    with RedisServer() as r, TokenFile(tokens) as path, \
            Server("--auth-token-file", path, "--tenant-max-in-flight", "4",
                   "--redis-timeout", str(10 * harness.SLOWDOWN), store=r.url) as srv:
        def auth(token):
            return {"Authorization": "Bearer " + token}
        c = srv.client()
        for token in ("greedy-token", "steady-token"):
            expect_eq(c.post("/0/initialize", {"num_pages": 8}, headers=auth(token)).status, 204,
                      "initialize")
        statuses, lock = [], threading.Lock()

        def ask(token, tag):
            cc = harness.Client(srv.port, timeout=30 * harness.SLOWDOWN)
            status = cc.post("/0/exists", {"keys": ["k"]}, headers=auth(token)).status
            with lock:
                statuses.append((tag, status))
            cc.close()

        with r.frozen():
            threads = [threading.Thread(target=ask, args=("greedy-token", "greedy"))
                       for _ in range(10)]
            threads.append(threading.Thread(target=ask, args=("steady-token", "steady")))
            for t in threads:
                t.start()
            time.sleep(1.0 * harness.SLOWDOWN)  # every request read and parked
        for t in threads:
            t.join(30 * harness.SLOWDOWN)
        expect_eq(sorted(statuses), [("greedy", 200)] * 10 + [("steady", 200)],
                  "every request answered once Redis ran again")
        expect_eq(metric(srv, "hf3fs_metad_tenant_waits_total", headers=auth("op-token")), 6,
                  "requests that waited in line: greedy's 6 past its 4 places, not steady's")


if __name__ == "__main__":
    harness.main(globals())

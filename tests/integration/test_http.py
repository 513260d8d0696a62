#!/usr/bin/python3
"""The HTTP layer (docs/protocol.md "HTTP" and "Errors for every route"):
keep-alive, pipelining, chunked bodies, Expect: 100-continue, HTTP/1.0,
404/405/413/431, path ranks, timeouts, admin routes."""

import json
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (Server, chunked, expect_eq, expect_error, expect_json,  # noqa: E402
                     expect_no_body, expect_true, pool_states, raw_request, s_alloc, s_confirm,
                     s_init, s_pages, v_init)

NOT_FOUND = {"detail": "Not Found"}
NOT_ALLOWED = {"detail": "Method Not Allowed"}


def expect_raw_json(resp, status, body=None):
    expect_true(resp.status == status, "expected status %s, got %r" % (status, resp))
    ctype = (resp.header("Content-Type") or "").lower()
    expect_true(ctype.startswith("application/json"), "Content-Type %r on %r" % (ctype, resp))
    got = resp.json()
    if body is not None:
        expect_eq(got, body, "body")
    return got


def expect_raw_error(resp, statuses):
    expect_true(resp.status in statuses, "expected status in %s, got %r" % (statuses, resp))
    got = resp.json_or_none()
    expect_true(isinstance(got, dict) and isinstance(got.get("detail"), str) and got["detail"],
                "error answer should be JSON with a detail: %r" % (resp,))


def test_health_answers_status_ok_json():
    with Server() as srv:
        c = srv.client()
        expect_json(c.get("/health"), 200, {"status": "ok"})


def test_keep_alive_serves_many_requests_on_one_connection():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 64)
        sock = c.socket()
        expect_true(sock is not None, "connected")
        for i in range(300):
            if i % 3 == 0:
                r = c.get("/health")
                expect_json(r, 200, {"status": "ok"})
            elif i % 3 == 1:
                r = c.post("/0/exists", {"keys": ["k%d" % i]})
                expect_json(r, 200, {"exists": [False]})
            else:
                r = c.post("/0/confirm_write", {})
                expect_no_body(r, 204)
            expect_true((r.header("Connection") or "").lower() != "close",
                        "server asked to close the connection at request %d" % i)
            expect_true(c.socket() is sock, "the client had to reconnect at request %d" % i)


def test_keep_alive_survives_error_answers():
    with Server() as srv:
        c = srv.client()
        expect_json(c.get("/health"), 200)
        sock = c.socket()
        for path, method, status in [("/nope", "GET", 404), ("/health", "POST", 405),
                                     ("/0/exists", "POST", 404), ("/keys/batch_exists", "POST", 400)]:
            body = b"{bad json" if status == 400 else ({"keys": ["a"]} if method == "POST" else None)
            r = c.request(method, path, body)
            expect_error(r, status)
            expect_json(c.get("/health"), 200)
            expect_true(c.socket() is sock, "connection closed after a %d answer" % status)


def test_pipelined_requests_are_answered_in_order():
    with Server() as srv:
        reqs = []
        expected = []
        for i in range(5):
            reqs.append(raw_request("POST", "/rank/%d/initialize" % i,
                                    {"role": "worker", "num_pages": i + 1}))
            expected.append((200, {"message": "Rank %d initialized with %d pages" % (i, i + 1)}))
            if i == 2:
                reqs.append(raw_request("GET", "/nowhere"))
                expected.append((404, NOT_FOUND))
            if i == 3:
                reqs.append(raw_request("POST", "/0/confirm_write", {}))
                expected.append((204, None))
        reqs.append(raw_request("GET", "/health"))
        expected.append((200, {"status": "ok"}))
        reqs.append(raw_request("POST", "/keys/batch_exists", {"keys": ["a", "b"]}))
        expected.append((200, {"exists": [False, False]}))
        with srv.raw() as raw:
            raw.send(b"".join(reqs))
            for i, (status, body) in enumerate(expected):
                resp = raw.read_response()
                if status == 204:
                    expect_true(resp.status == 204 and resp.body == b"",
                                "response %d: %r" % (i, resp))
                else:
                    expect_raw_json(resp, status, body)
            # and the connection is still usable
            raw.send(raw_request("GET", "/health"))
            expect_raw_json(raw.read_response(), 200, {"status": "ok"})


def test_pipelined_requests_sent_in_small_pieces_are_answered_in_order():
    with Server() as srv:
        data = b"".join(raw_request("POST", "/rank/%d/initialize" % i,
                                    {"role": "worker", "num_pages": 10 + i}) for i in range(4))
        with srv.raw() as raw:
            raw.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for k in range(0, len(data), 7):
                raw.send(data[k:k + 7])
                if k % 70 == 0:
                    time.sleep(0.001)
            for i in range(4):
                expect_raw_json(raw.read_response(), 200,
                                {"message": "Rank %d initialized with %d pages" % (i, 10 + i)})


def test_chunked_request_bodies_are_accepted():
    with Server() as srv:
        with srv.raw() as raw:
            hdr = {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}
            raw.send(raw_request("POST", "/0/initialize", headers=hdr)
                     + chunked({"num_pages": 8}, [3]))
            resp = raw.read_response()
            expect_true(resp.status == 204, "chunked initialize: %r" % resp)
            body = {"keys": [["key-%d" % i, ""] for i in range(4)]}
            raw.send(raw_request("POST", "/0/reserve_and_allocate_page_indices", headers=hdr)
                     + chunked(body, [1, 5, 100, 2]))
            got = expect_raw_json(raw.read_response(), 200)
            pages = [p for _, p in got["indices"]]
            expect_true(len(set(pages)) == 4 and all(0 <= p < 8 for p in pages),
                        "pages %r" % pages)
            # the same connection goes on with a Content-Length request
            raw.send(raw_request("POST", "/0/exists", {"keys": ["key-0"]}))
            expect_raw_json(raw.read_response(), 200, {"exists": [False]})
        c = srv.client()
        expect_eq(pool_states(srv.stats(), "kv", 0), (8, 4, 4, 0, 0, 0), "pool")
        expect_json(c.get("/health"), 200)


def test_expect_100_continue_gets_an_interim_answer_before_the_body():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 256)
        body = json.dumps({"keys": [["%064x" % i, ""] for i in range(40)]}).encode()
        expect_true(len(body) > 1024, "a body like curl's")
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/reserve_and_allocate_page_indices",
                                 headers={"Expect": "100-continue",
                                          "Content-Type": "application/json",
                                          "Content-Length": str(len(body))}))
            interim = raw.read_response()
            expect_true(interim.status == 100 and interim.version == "HTTP/1.1",
                        "expected HTTP/1.1 100 Continue, got %r" % interim)
            raw.send(body)
            got = expect_raw_json(raw.read_response(), 200)
            pages = [p for _, p in got["indices"]]
            expect_true(len(set(pages)) == 40 and min(pages) >= 0, "pages %r" % pages)


def test_http10_requests_are_answered_and_the_connection_closed():
    with Server() as srv:
        with srv.raw() as raw:
            raw.send(b"GET /health HTTP/1.0\r\n\r\n")
            resp = raw.read_response()
            expect_raw_json(resp, 200, {"status": "ok"})
            expect_true(raw.closed_by_peer(3 * harness.SLOWDOWN),
                        "HTTP/1.0 without keep-alive: the server should close")
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/initialize", {"num_pages": 4}, version="HTTP/1.0"))
            resp = raw.read_response()
            expect_true(resp.status == 204, "HTTP/1.0 POST: %r" % resp)
        c = srv.client()
        expect_eq(pool_states(srv.stats(), "kv", 0)[0], 4, "pool created over HTTP/1.0")
        expect_json(c.get("/health"), 200)


def test_unknown_routes_are_404_not_found_json():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        for method, path in [("GET", "/"), ("GET", "/nope"), ("POST", "/nope"),
                             ("POST", "/rank/0/nope"), ("POST", "/keys/nope"),
                             ("POST", "/keys"), ("GET", "/v1/nope"), ("POST", "/0/nope"),
                             ("POST", "/0/exists/extra"), ("POST", "/rank/0/initialize/x"),
                             ("POST", "/rank/0"), ("GET", "/health/x"),
                             ("POST", "/keys/batch_allocate/x"), ("DELETE", "/nope")]:
            r = c.request(method, path, {"keys": ["a"]} if method == "POST" else None)
            try:
                expect_json(r, 404, NOT_FOUND)
            except AssertionError as e:
                raise AssertionError("%s %s: %s" % (method, path, e))


def test_query_string_does_not_change_the_route():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        expect_json(c.get("/health?verbose=1"), 200, {"status": "ok"})
        expect_json(c.post("/0/exists?x=1&y", {"keys": ["a"]}), 200, {"exists": [False]})
        expect_json(c.get("/nope?x=1"), 404, NOT_FOUND)


def test_debug_check_route_is_absent_without_debug_api():
    with Server(debug_api=False) as srv:
        c = srv.client()
        expect_json(c.get("/v1/check"), 404, NOT_FOUND)
    with Server() as srv:
        c = srv.client()
        expect_json(c.get("/v1/check"), 200, {"ok": True})


def test_wrong_method_on_known_routes_is_405_method_not_allowed_json():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        for method, path in [("GET", "/keys/batch_allocate"), ("GET", "/keys/confirm_write"),
                             ("GET", "/keys/batch_exists"), ("GET", "/keys/get_locations"),
                             ("GET", "/clear"), ("PUT", "/clear"), ("DELETE", "/clear"),
                             ("GET", "/rank/0/initialize"), ("DELETE", "/rank/0/initialize"),
                             ("GET", "/initialize"), ("GET", "/0/initialize"),
                             ("GET", "/0/exists"), ("PUT", "/0/exists"), ("GET", "/0/clear"),
                             ("GET", "/0/reserve_and_allocate_page_indices"),
                             ("GET", "/0/confirm_write"), ("GET", "/0/delete_keys"),
                             ("GET", "/0/get_page_indices"), ("POST", "/health"),
                             ("POST", "/v1/stats"), ("DELETE", "/health")]:
            body = {"keys": ["a"]} if method in ("PUT", "POST") else None
            r = c.request(method, path, body)
            try:
                expect_json(r, 405, NOT_ALLOWED)
            except AssertionError as e:
                raise AssertionError("%s %s: %s" % (method, path, e))
        expect_eq(pool_states(srv.stats(), "kv", 0), (4, 4, 0, 0, 0, 0), "pool unchanged")


def _big_exists_body(size):
    """A valid batch_exists body of exactly `size` bytes."""
    body = b'{"keys": ["a"]}'
    return body[:-1] + b" " * (size - len(body)) + b"}"


def send_watching(raw, data, piece=256):
    """Send data in pieces, stopping as soon as the server answers or closes,
    so that an early answer is not lost to a reset caused by more data."""
    for i in range(0, len(data), piece):
        readable, _, _ = select.select([raw.sock], [], [], 0)
        if readable:
            return
        try:
            raw.send(data[i:i + piece])
        except (BrokenPipeError, ConnectionResetError):
            return
        time.sleep(0.001)


def test_body_over_max_body_bytes_with_content_length_is_413_json():
    with Server("--max-body-bytes", "1024") as srv:
        c = srv.client()
        s_init(c, 0, 4)
        for size in (1025, 1500, 4096, 100000):
            with srv.raw() as raw:
                send_watching(raw, raw_request("POST", "/0/exists", _big_exists_body(size)))
                expect_raw_error(raw.read_response(), {413})
        # Expect: 100-continue with a Content-Length over the limit: 413 (ideally
        # at once; a 100 Continue first is tolerated if the 413 follows the body)
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/exists",
                                 headers={"Expect": "100-continue", "Content-Length": "100000"}))
            resp = raw.read_response()
            if resp.status == 100:
                send_watching(raw, b" " * 100000)
                resp = raw.read_response()
            expect_raw_error(resp, {413})
        expect_json(c.post("/0/exists", _big_exists_body(1024)), 200, {"exists": [False]})


def test_chunked_body_over_max_body_bytes_is_413_json():
    with Server("--max-body-bytes", "1024") as srv:
        c = srv.client()
        s_init(c, 0, 4)
        # the size is only known while reading; 1.5x and 4x the limit
        for size in (1500, 4096):
            with srv.raw() as raw:
                send_watching(raw, raw_request("POST", "/0/exists",
                                               headers={"Transfer-Encoding": "chunked"})
                              + chunked(_big_exists_body(size), [200]))
                try:
                    resp = raw.read_response()
                except EOFError:
                    raise AssertionError("chunked body of %d bytes over a 1024-byte limit: the"
                                         " connection was closed without a 413" % size)
                expect_raw_error(resp, {413})
        expect_json(c.post("/0/exists", _big_exists_body(1000)), 200, {"exists": [False]})


def test_huge_content_length_is_refused_without_reading():
    with Server() as srv:
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/exists",
                                 headers={"Content-Length": str(10 ** 15)}) + b"{")
            expect_raw_error(raw.read_response(), {413})
        c = srv.client()
        expect_json(c.get("/health"), 200)


def test_body_exactly_at_max_body_bytes_is_accepted():
    with Server("--max-body-bytes", "1024") as srv:
        c = srv.client()
        s_init(c, 0, 4)
        body = _big_exists_body(1024)
        expect_eq(len(body), 1024, "body size")
        expect_json(c.post("/0/exists", body), 200, {"exists": [False]})
        body = _big_exists_body(1025)
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/exists", body))
            expect_raw_error(raw.read_response(), {413})


def _send_and_read_error(srv, data):
    """Send data that the server should refuse; return its answer or fail if
    it closes the connection without an error status."""
    with srv.raw(timeout=10 * harness.SLOWDOWN) as raw:
        try:
            raw.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return raw.read_response()
        except EOFError as e:
            raise AssertionError("connection closed without an error status: %s" % e)
        except ConnectionResetError:
            raise AssertionError("connection reset without an error status")


def test_oversized_headers_are_refused_with_an_error_status():
    with Server() as srv:
        resp = _send_and_read_error(
            srv, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
        expect_true(resp.status in (400, 431), "oversized header: %r" % resp)
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(20000))
        resp = _send_and_read_error(srv, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        expect_true(resp.status in (400, 431), "too many headers: %r" % resp)
        c = srv.client()
        expect_json(c.get("/health"), 200, {"status": "ok"})


def test_oversized_request_line_is_refused_with_an_error_status():
    with Server() as srv:
        resp = _send_and_read_error(
            srv, b"GET /health?" + b"x" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        expect_true(resp.status in (400, 414, 431), "oversized request line: %r" % resp)
        c = srv.client()
        expect_json(c.get("/health"), 200, {"status": "ok"})


def test_rank_in_path_out_of_range_or_not_a_number_is_400():
    with Server("--max-ranks", "1024") as srv:
        c = srv.client()
        s_init(c, 1023, 2)
        v_init(c, 1022, 2)
        bad = ["1024", "-1", "abc", "1.5", "1e2", "0x1", "99999999999999999999", "4294967296",
               "%20", "+1"]
        for rank in bad:
            for path, body in [("/rank/%s/initialize" % rank, {"role": "worker", "num_pages": 2}),
                               ("/%s/initialize" % rank, {"num_pages": 2}),
                               ("/%s/exists" % rank, {"keys": ["a"]}),
                               ("/%s/reserve_and_allocate_page_indices" % rank,
                                {"keys": [["a", ""]]}),
                               ("/%s/confirm_write" % rank, {}),
                               ("/%s/delete_keys" % rank, {"keys": ["a"]}),
                               ("/%s/clear" % rank, {}),
                               ("/%s/get_page_indices" % rank, {"keys": ["a"]})]:
                r = c.post(path, body)
                try:
                    expect_error(r, 400)
                except AssertionError as e:
                    raise AssertionError("POST %s: %s" % (path, e))
        expect_eq(sorted(srv.stats()), [("kv", 1022), ("kv", 1023)], "pools")


def test_idle_and_stalled_connections_are_closed_after_idle_timeout():
    with Server("--idle-timeout", "1") as srv:
        limit = 1 + 3 * harness.SLOWDOWN
        idle = srv.raw()
        used = srv.raw()
        stalled = srv.raw()
        try:
            used.send(raw_request("GET", "/health"))
            expect_raw_json(used.read_response(), 200)
            stalled.send(b"POST /0/exists HTTP/1.1\r\nHost: x\r\nContent-Len")
            t0 = time.monotonic()
            for name, conn in (("idle", idle), ("used", used), ("stalled", stalled)):
                left = max(0.1, limit - (time.monotonic() - t0))
                expect_true(conn.closed_by_peer(left),
                            "%s connection still open %.1f s after a 1 s idle timeout"
                            % (name, limit))
        finally:
            idle.close()
            used.close()
            stalled.close()
        c = srv.client()
        expect_json(c.get("/health"), 200)


def test_server_survives_more_connections_than_max_connections():
    with Server("--max-connections", "4", "--idle-timeout", "2") as srv:
        conns = []
        try:
            for _ in range(12):
                try:
                    conns.append(srv.raw(timeout=2))
                except OSError:
                    pass
            time.sleep(0.1)
        finally:
            for conn in conns:
                conn.close()

        def healthy():
            try:
                c = harness.Client(srv.port, timeout=2)
                ok = c.get("/health").status == 200
                c.close()
                return ok
            except OSError:
                return False
        harness.wait_for(healthy, 5 * harness.SLOWDOWN, what="/health after connections closed")


def test_many_short_connections_are_served():
    with Server() as srv:
        for i in range(150):
            with srv.raw() as raw:
                raw.send(raw_request("GET", "/health", headers={"Connection": "close"}))
                expect_raw_json(raw.read_response(), 200, {"status": "ok"})
        c = srv.client()
        expect_json(c.get("/health"), 200)


def test_client_disconnecting_mid_request_changes_nothing():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        got = s_alloc(c, 0, ["a"])
        s_confirm(c, 0, [("a", got[0][1])])
        before = pool_states(srv.stats(), "kv", 0)
        body = json.dumps({"keys": [["b", ""], ["c", ""]]}).encode()
        for data in [raw_request("POST", "/0/reserve_and_allocate_page_indices", body)[:-5],
                     b"POST /0/delete_keys HTTP/1.1\r\nHost: x\r\nContent-Le",
                     raw_request("POST", "/0/delete_keys", {"keys": ["a"]},
                                 headers={"Transfer-Encoding": "chunked"})[:-3]]:
            with srv.raw() as raw:
                raw.send(data)
        time.sleep(0.2)
        expect_eq(pool_states(srv.stats(), "kv", 0), before, "pool after aborted requests")
        expect_eq(s_pages(c, 0, ["a", "b", "c"]), [got[0][1], None, None], "indices")


def test_sigterm_with_open_and_half_sent_requests_exits_cleanly():
    srv = Server()
    srv.start()
    conns = []
    try:
        c = srv.client()
        s_init(c, 0, 4)
        for i in range(4):
            raw = srv.raw()
            raw.send(raw_request("GET", "/health"))
            raw.read_response()
            conns.append(raw)                         # idle keep-alive
        half = srv.raw()
        half.send(raw_request("POST", "/0/exists", {"keys": ["a"] * 50})[:-20])
        conns.append(half)                            # a body still on its way
        head = srv.raw()
        head.send(b"POST /0/exists HTTP/1.1\r\nHost: x\r\n")
        conns.append(head)                            # headers still on their way
        time.sleep(0.1)
    finally:
        try:
            srv.stop()                                # exit 0 within the timeout, or fail
        finally:
            for conn in conns:
                conn.close()


def test_requests_the_http_layer_refuses_get_a_json_detail_and_the_connection_closes():
    # (libmicrohttpd answered the unparseable ones in HTML, an unknown method 405)
    with Server("--max-header-bytes", "8K") as srv:
        cases = [
            ("a bad method", b"FROB /health HTTP/1.1\r\nHost: x\r\n\r\n", (400,)),
            ("a bad chunk size", b"POST /0/exists HTTP/1.1\r\nHost: x\r\n"
             b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", (400,)),
            ("two Content-Lengths", b"POST /0/exists HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}", (400,)),
            ("Content-Length with chunked", b"POST /0/exists HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
             (400,)),
            ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\n\r\n", (400,)),
            ("a 9 KiB path", b"GET /" + b"x" * 9216 + b" HTTP/1.1\r\nHost: x\r\n\r\n", (414,)),
            ("a 9 KiB header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9216
             + b"\r\n\r\n", (431,)),
            ("HTTP/2.0 in plain text", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", (505,)),
        ]
        for name, data, statuses in cases:
            with srv.raw() as raw:
                raw.send(data)
                resp = raw.read_response()
                try:
                    expect_raw_error(resp, statuses)
                    expect_eq((resp.header("Connection") or "").lower(), "close",
                              "Connection header")
                    expect_true(raw.closed_by_peer(3 * harness.SLOWDOWN), "closed after")
                except AssertionError as e:
                    raise AssertionError("%s: %s" % (name, e))
        c = srv.client()
        expect_json(c.get("/health"), 200, {"status": "ok"})


def test_a_client_that_ends_its_side_gets_its_answers_and_the_close_at_once():
    with Server("--idle-timeout", "60") as srv:
        with srv.raw() as raw:
            raw.send(raw_request("GET", "/health") + raw_request("GET", "/health"))
            raw.sock.shutdown(socket.SHUT_WR)
            for _ in range(2):
                expect_raw_json(raw.read_response(), 200, {"status": "ok"})
            expect_true(raw.closed_by_peer(3 * harness.SLOWDOWN),
                        "the server should close a half-closed connection once it answered")
        with srv.raw() as raw:  # half a request, then the end: nothing to answer
            raw.send(b"POST /0/exists HTTP/1.1\r\nHost: x\r\nContent-Le")
            raw.sock.shutdown(socket.SHUT_WR)
            expect_true(raw.closed_by_peer(3 * harness.SLOWDOWN),
                        "the server should close a half-closed connection with half a request")


def test_expect_100_continue_pipelined_behind_a_chunked_request_is_answered():
    with Server("--idle-timeout", "60") as srv:
        c = srv.client()
        s_init(c, 0, 8)
        body = json.dumps({"keys": ["a", "b"]}).encode()
        with srv.raw() as raw:
            raw.send(raw_request("POST", "/0/exists", headers={"Transfer-Encoding": "chunked"})
                     + chunked({"keys": ["a"]}, [2])
                     + raw_request("POST", "/0/exists", headers={
                         "Expect": "100-continue", "Content-Length": str(len(body))}) + body)
            expect_raw_json(raw.read_response(), 200, {"exists": [False]})
            resp = raw.read_response()
            while resp.status == 100:
                resp = raw.read_response()
            expect_raw_json(resp, 200, {"exists": [False, False]})


def test_stats_reports_every_pool_with_its_counters():
    with Server() as srv:
        c = srv.client()
        s_init(c, 3, 5, ns="ns1")
        body = expect_json(c.get("/v1/stats"), 200)
        pools = body["pools"]
        expect_eq(len(pools), 1, "pools")
        p = pools[0]
        for field in ("namespace", "rank", "num_pages", "free", "reserved", "owned",
                      "draining", "keys", "touched", "hits", "misses", "reservations",
                      "confirmations", "releases", "evictions", "expired_reservations",
                      "duplicate_confirmations", "refused_confirmations", "refused_releases"):
            expect_true(field in p, "stats field %r missing: %r" % (field, p))
        expect_eq((p["namespace"], p["rank"], p["num_pages"], p["free"]), ("ns1", 3, 5, 5),
                  "pool identity")
        for field in ("refused_confirmations", "refused_releases"):
            expect_eq(sorted(p[field]), sorted(["out_of_range", "not_reserved", "other_key",
                                                "owned"]), field)


def test_metrics_are_prometheus_text():
    with Server() as srv:
        c = srv.client()
        s_init(c, 0, 4)
        r = c.get("/metrics")
        expect_true(r.status == 200, "GET /metrics: %r" % r)
        ctype = (r.header("Content-Type") or "").lower()
        expect_true(ctype.startswith("text/plain"), "Content-Type %r" % ctype)
        text = r.body.decode("utf-8")
        expect_true("# TYPE" in text, "no # TYPE line in metrics: %r" % text[:500])


if __name__ == "__main__":
    harness.main(globals())

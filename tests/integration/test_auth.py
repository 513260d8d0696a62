"""test_auth.py: --auth-token-file. Every route but /health needs the token, as
a Bearer token or as the password of HTTP Basic auth; the server refuses to
start with a token file it cannot use. A file of one token behaves as it
always did (its tenant is "default"); the tenants of files with several
tokens are test_tenants.py's."""

import base64
import os
import subprocess
import tempfile
import urllib.error
import urllib.request

import harness
from harness import (LoggedServer, Server, TokenFile, expect_error, expect_eq, expect_json,
                     expect_true)

TOKEN = "tok-3f9a_c0ffee.42"

# Every route of both dialects and the admin routes, with a body that the
# route accepts, and an unknown path: auth comes before routing.
ROUTES = [
    ("POST", "/rank/0/initialize", {"role": "worker", "num_pages": 4}),
    ("POST", "/initialize", {"rank": 1, "role": "worker", "num_pages": 4}),
    ("POST", "/keys/batch_allocate", {"rank": 0, "keys": [["a", ""]]}),
    ("POST", "/keys/confirm_write", {"rank": 0, "confirmations": []}),
    ("POST", "/keys/batch_exists", {"keys": ["a"]}),
    ("POST", "/keys/get_locations", {"rank": 0, "keys": ["a"]}),
    ("POST", "/0/initialize", {"num_pages": 4, "namespace": "s"}),
    ("POST", "/0/exists", {"keys": ["a"], "namespace": "s"}),
    ("POST", "/0/reserve_and_allocate_page_indices", {"keys": [["a", ""]], "namespace": "s"}),
    ("POST", "/0/confirm_write", {"namespace": "s"}),
    ("POST", "/0/get_page_indices", {"keys": ["a"], "namespace": "s"}),
    ("POST", "/0/delete_keys", {"keys": ["a"], "namespace": "s"}),
    ("POST", "/0/clear", {"namespace": "s"}),
    ("POST", "/clear", None),
    ("GET", "/metrics", None),
    ("GET", "/v1/stats", None),
    ("GET", "/v1/check", None),
    ("GET", "/no/such/route", None),
]


def bearer(token):
    return {"Authorization": "Bearer " + token}


def basic(user, password):
    return {"Authorization": "Basic "
            + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()}


def call(c, method, path, body, headers):
    if method == "GET":
        return c.get(path, headers=headers)
    return c.post(path, body, headers=headers)


class AuthServer(LoggedServer):
    """A server with the token; /health is all the harness needs to start it."""

    def __init__(self, token_path, *flags):
        super().__init__("--auth-token-file", token_path, *flags)


def expect_401(r, what):
    expect_error(r, 401)
    challenge = r.header("WWW-Authenticate") or ""
    expect_true("Bearer" in challenge and "Basic" in challenge,
                "%s: 401 without a Bearer and Basic challenge: %r" % (what, r.headers))


def test_every_route_refuses_a_missing_token_with_401_and_a_challenge():
    with TokenFile(TOKEN + "\n") as path, AuthServer(path) as srv:
        c = srv.client()
        for method, route, body in ROUTES:
            expect_401(call(c, method, route, body, {}), "%s %s without a token" % (method, route))


def test_every_route_refuses_a_wrong_token_in_both_header_forms():
    with TokenFile(TOKEN + "\n") as path, AuthServer(path) as srv:
        c = srv.client()
        wrong = [bearer(TOKEN[:-1]), bearer(TOKEN + "x"), bearer(TOKEN.upper()),
                 basic("", TOKEN[:-1]), basic(TOKEN, ""), {"Authorization": TOKEN},
                 {"Authorization": "Token " + TOKEN}, {"Authorization": "Basic !!!"}]
        for method, route, body in ROUTES:
            for headers in wrong:
                expect_401(call(c, method, route, body, headers),
                           "%s %s with %r" % (method, route, headers))


def test_a_refused_request_changes_nothing():
    with TokenFile(TOKEN) as path, AuthServer(path) as srv:
        c = srv.client()
        expect_error(c.post("/rank/0/initialize", {"role": "worker", "num_pages": 4}), 401)
        expect_error(c.post("/0/initialize", {"num_pages": 4}, headers=bearer("nope")), 401)
        body = expect_json(c.get("/v1/stats", headers=bearer(TOKEN)), 200)
        expect_eq(body["pools"], [], "pools after refused initializations")


def expect_accepted(c, headers, what):
    for method, route, body in ROUTES:
        r = call(c, method, route, body, headers)
        expect_true(r.status != 401, "%s %s %s: refused: %r" % (what, method, route, r))
        if route == "/no/such/route":
            expect_error(r, 404)
        else:
            expect_true(r.status in (200, 204), "%s %s %s: %r" % (what, method, route, r))


def test_every_route_accepts_the_right_token_as_bearer():
    with TokenFile(TOKEN + "\n") as path, AuthServer(path) as srv:
        expect_accepted(srv.client(), bearer(TOKEN), "Bearer")
        expect_accepted(srv.client(), {"Authorization": "bearer   %s " % TOKEN}, "bearer")


def test_every_route_accepts_the_right_token_as_basic_auth_password():
    with TokenFile(TOKEN + "\n") as path, AuthServer(path) as srv:
        # http://:TOKEN@host:port, as requests (the stock clients' library) sends it
        expect_accepted(srv.client(), basic("", TOKEN), "Basic with an empty user")
        expect_accepted(srv.client(), basic("vllm", TOKEN), "Basic with a user")


def test_a_stock_urllib_client_with_basic_auth_answers_the_challenge():
    with TokenFile(TOKEN) as path, AuthServer(path) as srv:
        url = "http://127.0.0.1:%d" % srv.port
        passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        passwords.add_password(None, url, "", TOKEN)
        opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))
        with opener.open(url + "/v1/stats", timeout=harness.REQUEST_TIMEOUT) as resp:
            expect_eq(resp.status, 200, "urllib GET /v1/stats with Basic auth")
        passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
        passwords.add_password(None, url, "", "wrong")
        opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))
        try:
            opener.open(url + "/v1/stats", timeout=harness.REQUEST_TIMEOUT)
            raise AssertionError("a wrong password was accepted")
        except urllib.error.HTTPError as e:
            expect_eq(e.code, 401, "urllib with a wrong password")


def test_health_stays_open_without_a_token():
    with TokenFile(TOKEN) as path, AuthServer(path) as srv:
        c = srv.client()
        expect_json(c.get("/health"), 200, {"status": "ok"})
        expect_json(c.get("/health", headers=bearer("wrong")), 200, {"status": "ok"})
        r = c.request("HEAD", "/health")
        expect_eq(r.status, 200, "HEAD /health")


def test_without_a_token_file_no_route_asks_for_auth():
    with Server() as srv:
        c = srv.client()
        for method, route, body in ROUTES:
            r = call(c, method, route, body, {})
            expect_true(r.status != 401, "%s %s: %r" % (method, route, r))


def test_the_token_file_may_end_in_newlines_but_the_token_may_not():
    with TokenFile(TOKEN + "\r\n\n") as path, AuthServer(path) as srv:
        c = srv.client()
        expect_json(c.get("/v1/stats", headers=bearer(TOKEN)), 200)
        expect_error(c.get("/v1/stats", headers=bearer(TOKEN + "\\n")), 401)


def run_server_expecting_failure(*flags):
    """Start the binary directly; it must exit non-zero within a few seconds.
    Returns its stderr."""
    port = harness.free_port()
    args = [os.path.abspath(harness.BIN), "--host", "127.0.0.1", "--port", str(port),
            "--in-memory"] + list(flags)
    try:
        p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=10 * harness.SLOWDOWN)
    except subprocess.TimeoutExpired:
        raise AssertionError("hf3fs-metad %s kept running" % " ".join(flags))
    out = p.stdout.decode("utf-8", "replace")
    expect_true(p.returncode not in (0, None),
                "hf3fs-metad %s exited %s:\n%s" % (" ".join(flags), p.returncode, out))
    return out


def test_server_refuses_to_start_with_an_empty_missing_or_odd_token_file():
    for content, words in ((b"", "empty"), (b"\n\n# a comment\n", "empty"),
                           (b"tok Bad!Name\n", "line 1: tenant"),
                           (b"ok\ntok acme pages=lots\n", "line 2: 'pages=lots'"),
                           (b"tok acme pages=5 more\n", "4 words"),
                           (b"tok a\ntok b\n", "twice"), (b"x" * 2000, "1024")):
        with TokenFile(content) as path:
            out = run_server_expecting_failure("--auth-token-file", path)
            expect_true("--auth-token-file" in out and words in out,
                        "token file %r: message should say %r: %r" % (content[:20], words, out))
    out = run_server_expecting_failure("--auth-token-file", "/nonexistent/hf3fs-token")
    expect_true("No such file" in out, "missing token file: %r" % out)
    d = tempfile.mkdtemp(prefix="hf3fs-metad-auth-")
    try:
        out = run_server_expecting_failure("--auth-token-file", d)
        expect_true("--auth-token-file" in out, "a directory as token file: %r" % out)
    finally:
        os.rmdir(d)


def test_a_token_file_readable_by_others_gets_a_warning():
    with TokenFile(TOKEN) as path:
        os.chmod(path, 0o644)
        with AuthServer(path) as srv:
            pass
        expect_true("chmod 600" in srv.last_stderr, "no warning about mode 644")


def test_a_non_loopback_host_without_a_token_warns_at_start_up():
    # 192.0.2.1 (TEST-NET-1) is not an address of this host: the bind fails
    # after the warning, so nothing listens beyond loopback.
    out = run_server_expecting_failure("--host", "192.0.2.1")
    expect_true("not a loopback address" in out and "--auth-token-file" in out,
                "no warning for a non-loopback host without a token: %r" % out)
    with TokenFile(TOKEN) as path:
        out = run_server_expecting_failure("--host", "192.0.2.1", "--auth-token-file", path)
        expect_true("not a loopback address" not in out,
                    "a warning despite the token: %r" % out)
    with LoggedServer() as srv:
        pass
    expect_true("not a loopback address" not in srv.last_stderr, "a warning for 127.0.0.1")


if __name__ == "__main__":
    harness.main(globals())

"""test_tenants.py: the tenants of --auth-token-file (docs/operations.md,
"Tokens and tenants"), over every engine (HF3FS_TEST_ENGINE).

Two tenants drive the same key names through the stock clients' transport:
a `requests` session with their retry policy, credentials taken from the
netrc file $NETRC names (each tenant its own, as each node has its own
~/.netrc), sent as HTTP Basic to http://localhost:PORT as vLLM's connector
calls it. Neither sees the other's keys through any route, nor its pools in
/v1/stats or /metrics; one's /clear leaves the other's state; the operator
reads every tenant's figures and is refused on the dialect routes; SIGHUP
rereads the file without dropping a connection; the quota refuses the
initialize that passes it; a one-token file serves the data it served
before.
"""

import os
import shutil
import signal
import tempfile

import harness
import metrics_text
from harness import (LoggedServer, TokenFile, expect_eq, expect_error, expect_json,
                     expect_no_body, expect_true, s_alloc, s_clear, s_confirm, s_exists, s_init,
                     s_pages, v_alloc, v_confirm, v_exists, v_init, v_locations)
from test_auth import bearer

TOKENS = {"acme": "tok-acme-1f0c9", "beta": "tok-beta-77ab2", "*": "tok-operator-c4e1"}
FILE = ("# tenants of this test\n"
        "%s acme\n%s beta pages=64\n%s *\n" % (TOKENS["acme"], TOKENS["beta"], TOKENS["*"]))
KEYS = ["%064x" % (i * 7919 + 1) for i in range(4)]


class Netrc:
    """A netrc file of its own for one node: localhost, mode 0600."""

    def __init__(self, token):
        fd, self.path = tempfile.mkstemp(prefix="hf3fs-metad-netrc-")
        os.write(fd, ("machine localhost login hf3fs password %s\n" % token).encode())
        os.close(fd)
        os.chmod(self.path, 0o600)

    def remove(self):
        os.unlink(self.path)


class StockClient:
    """The stock clients' transport for one node: POSTs JSON with
    `requests` to http://localhost:PORT; the credentials are netrc's (the
    file $NETRC names while this client calls), never set by the caller.
    Answers are harness.Response, for the harness's dialect helpers."""

    def __init__(self, port, netrc):
        self.base = "http://localhost:%d" % port
        self.netrc = netrc
        self.session = harness.stock_session()

    def request(self, method, path, body=None, headers=None):
        before = os.environ.get("NETRC")
        os.environ["NETRC"] = self.netrc.path
        try:
            kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
            r = self.session.request(method, self.base + path, headers=headers,
                                     timeout=harness.REQUEST_TIMEOUT, **kwargs)
        finally:
            if before is None:
                del os.environ["NETRC"]
            else:
                os.environ["NETRC"] = before
        return harness.Response(method, path, r.status_code, list(r.headers.items()), r.content)

    def post(self, path, body=None, headers=None):
        return self.request("POST", path, b"" if body is None else body, headers)

    def get(self, path, headers=None):
        return self.request("GET", path, None, headers)


class Tenants:
    """A server with FILE, and a stock client (own netrc) per tenant."""

    def __init__(self, *flags, content=FILE):
        self.tokens = TokenFile(content)
        self.srv = LoggedServer("--auth-token-file", self.tokens.__enter__(), *flags)
        self.netrcs = []

    def __enter__(self):
        self.srv.__enter__()
        return self

    def __exit__(self, *exc):
        try:
            return self.srv.__exit__(*exc)
        finally:
            for n in self.netrcs:
                n.remove()
            self.tokens.__exit__(*exc)

    def client(self, tenant):
        n = Netrc(TOKENS[tenant])
        self.netrcs.append(n)
        return StockClient(self.srv.port, n)

    def hup(self, content, expect):
        """Rewrite the token file, SIGHUP, wait for the log line `expect`."""
        before = self.srv.stderr().count(expect)
        with open(self.tokens.path, "w") as f:
            f.write(content)
        self.srv.proc.send_signal(signal.SIGHUP)
        harness.wait_for(lambda: self.srv.stderr().count(expect) > before,
                         harness.STARTUP_TIMEOUT, what="the log line %r" % expect)


def vllm_write(c, keys, ranks=(0, 1), pages=16):
    for rank in ranks:
        v_init(c, rank, pages)
        got = v_alloc(c, rank, keys)
        v_confirm(c, rank, list(zip(keys, got)))


def sglang_write(c, keys, ns="sg", rank=0, pages=16):
    s_init(c, rank, pages, ns)
    got = [page for _, page in s_alloc(c, rank, keys, ns)]
    s_confirm(c, rank, list(zip(keys, got)), ns=ns)


def pools(c):
    """{(tenant, namespace, rank): pool} of GET /v1/stats as c sees it."""
    body = expect_json(c.get("/v1/stats"), 200)
    return {(p["tenant"], p["namespace"], p["rank"]): p for p in body["pools"]}


def pool_series(c):
    """{(tenant, namespace, rank)} of the pool series of GET /metrics."""
    r = c.get("/metrics")
    expect_eq(r.status, 200, "GET /metrics")
    samples = metrics_text.parse(r.body.decode())
    out = set()
    for (name, labels), _ in samples.items():
        if name == "hf3fs_metad_pool_keys":
            d = dict(labels)
            out.add((d["tenant"], d["namespace"], d["rank"]))
    return out


def test_two_tenants_with_the_same_keys_through_the_stock_clients_see_only_their_own():
    with Tenants() as t:
        a, b = t.client("acme"), t.client("beta")
        vllm_write(a, KEYS[:2])
        sglang_write(a, KEYS[:2])
        # beta: same namespaces, same key names, nothing of acme's
        expect_eq(v_exists(b, KEYS[:2]), [False, False], "beta's batch_exists")
        expect_error(b.post("/keys/get_locations", {"rank": 0, "keys": KEYS[:2]}), 404)
        expect_error(b.post("/0/exists", {"keys": KEYS[:2], "namespace": "sg"}), 404)
        expect_error(b.post("/0/get_page_indices", {"keys": KEYS[:2], "namespace": "sg"}), 404)
        expect_eq(pools(b), {}, "beta's /v1/stats before it initialized")
        expect_eq(pool_series(b), set(), "beta's pool series before it initialized")
        # beta writes the same names: new keys in its own pools
        v_init(b, 0, 16)
        v_init(b, 1, 16)
        expect_eq(v_exists(b, KEYS[:2]), [False, False], "beta's batch_exists, its pools empty")
        expect_eq(v_locations(b, 0, KEYS[:2]), [None, None], "beta's get_locations")
        s_init(b, 0, 16, "sg")
        expect_eq(s_exists(b, 0, KEYS[:2], "sg"), [False, False], "beta's SGLang exists")
        expect_eq(s_pages(b, 0, KEYS[:2], "sg"), [None, None], "beta's get_page_indices")
        expect_eq([e for e, _ in s_alloc(b, 0, KEYS[:2], "sg")], [False, False],
                  "beta's allocation of acme's key names: not hits")
        vllm_write(b, KEYS[2:])
        expect_eq(v_exists(a, KEYS), [True, True, False, False], "acme's batch_exists")
        expect_eq(v_exists(b, KEYS), [False, False, True, True], "beta's batch_exists")
        expect_eq(s_exists(a, 0, KEYS[:2], "sg"), [True, True], "acme's SGLang exists")
        expect_eq(set(pools(a)), {("acme", "kv", 0), ("acme", "kv", 1), ("acme", "sg", 0)},
                  "acme's pools in /v1/stats")
        expect_eq(pools(a)[("acme", "kv", 0)]["keys"], 2, "acme's keys on rank 0")
        expect_eq(pools(b)[("beta", "kv", 0)]["keys"], 2, "beta's keys on rank 0")
        expect_eq(pool_series(b), {("beta", "kv", "0"), ("beta", "kv", "1"), ("beta", "sg", "0")},
                  "beta's pool series in /metrics")


def test_one_tenants_clear_leaves_the_other_tenants_state():
    with Tenants() as t:
        a, b = t.client("acme"), t.client("beta")
        for c in (a, b):
            vllm_write(c, KEYS)
            sglang_write(c, KEYS)
        expect_no_body(b.post("/clear"), 204)
        expect_eq(v_exists(b, KEYS), [False] * 4, "beta after its /clear")
        expect_eq(v_exists(a, KEYS), [True] * 4, "acme after beta's /clear")
        expect_eq(s_exists(a, 0, KEYS, "sg"), [True] * 4, "acme's SGLang keys after beta's /clear")
        expect_eq(sum(p["keys"] for p in pools(b).values()), 0, "beta's keys after its /clear")
        s_clear(a, 0, "sg")
        expect_eq(s_exists(a, 0, KEYS, "sg"), [False] * 4, "acme after its SGLang clear")
        expect_eq(v_exists(a, KEYS), [True] * 4, "acme's kv after its SGLang clear of sg")
        expect_json(t.client("*").get("/v1/check"), 200, {"ok": True})


def test_the_operator_reads_every_tenants_figures_and_is_refused_on_dialect_routes():
    with Tenants() as t:
        a, b, op = t.client("acme"), t.client("beta"), t.client("*")
        vllm_write(a, KEYS[:1], ranks=(0,))
        sglang_write(b, KEYS[:1])
        expect_eq(pool_series(op), {("acme", "kv", "0"), ("beta", "sg", "0")},
                  "the operator's pool series")
        expect_eq(set(pools(op)), {("acme", "kv", 0), ("beta", "sg", 0)}, "the operator's stats")
        expect_json(op.get("/v1/check"), 200, {"ok": True})
        for path, body in (("/keys/batch_exists", {"keys": KEYS}),
                           ("/rank/0/initialize", {"role": "worker", "num_pages": 4}),
                           ("/0/exists", {"keys": KEYS, "namespace": "sg"}), ("/clear", None)):
            expect_error(op.post(path, body), 403)
        expect_eq(v_exists(a, KEYS[:1]), [True], "acme's key after the operator's refused /clear")


def test_a_token_removed_at_sighup_gets_401_while_a_kept_one_goes_on_on_its_open_connection():
    with Tenants() as t:
        kept = t.srv.client()
        expect_json(kept.get("/v1/stats", headers=bearer(TOKENS["acme"])), 200)
        sock = kept.socket()
        t.hup("%s acme\n" % TOKENS["acme"], "reread")
        expect_json(kept.get("/v1/stats", headers=bearer(TOKENS["acme"])), 200)
        expect_true(kept.socket() is sock, "the connection was reopened across the SIGHUP")
        expect_error(t.srv.client().get("/v1/stats", headers=bearer(TOKENS["beta"])), 401)
        expect_error(t.client("beta").get("/v1/stats"), 401)
        t.hup(FILE, "reread")
        expect_json(t.client("beta").get("/v1/stats"), 200)


def test_a_malformed_file_at_sighup_is_refused_and_the_tokens_in_force_stay():
    with Tenants() as t:
        t.hup("%s Not_A_Tenant\n" % TOKENS["acme"], "refused, the tokens in force stay")
        expect_true("line 1: tenant 'Not_A_Tenant'" in t.srv.stderr(), "no reason in the log")
        for tenant in ("acme", "beta", "*"):
            expect_json(t.client(tenant).get("/v1/stats"), 200)
        expect_true(t.srv.alive(), "the server stopped")


def test_the_quota_refuses_the_initialize_that_would_pass_it_and_changes_nothing():
    with Tenants() as t:
        b = t.client("beta")  # pages=64
        v_init(b, 0, 40)
        r = b.post("/rank/1/initialize", {"role": "worker", "num_pages": 40})
        body = expect_error(r, 400, "Invalid initialization parameters")
        expect_true("quota of 64 pages" in body.get("reason", ""), "reason: %r" % body)
        r = b.post("/0/initialize", {"num_pages": 25, "namespace": "sg"})
        expect_true("quota of 64 pages" in expect_error(r, 400)["detail"], "%r" % r)
        expect_eq(set(pools(b)), {("beta", "kv", 0)}, "beta's pools after the refusals")
        v_init(b, 0, 40)  # the pool exists: no page more
        s_init(b, 0, 24, "sg")
        expect_eq(sum(p["num_pages"] for p in pools(b).values()), 64, "beta's pages")
        v_init(t.client("acme"), 0, 1000)  # acme has no quota


def test_a_one_token_file_serves_the_data_of_the_server_without_auth_as_before():
    data = tempfile.mkdtemp(prefix="hf3fs-metad-tenants-")
    srv = LoggedServer("--persistence-path", data, persistence=False)
    with TokenFile("tok-only\n") as path:
        with srv:
            c = srv.client()
            vllm_write(c, KEYS)
            srv.stop()
            srv.flags += ["--auth-token-file", path, "--access-log"]
            srv.start()
            c = srv.client()
            expect_error(c.post("/keys/batch_exists", {"keys": KEYS}), 401)
            h = bearer("tok-only")
            body = expect_json(c.post("/keys/batch_exists", {"keys": KEYS}, headers=h), 200)
            expect_eq(body, {"exists": [True] * 4}, "the keys written without auth")
            stats = expect_json(c.get("/v1/stats", headers=h), 200)
            expect_eq(sorted((p["tenant"], p["namespace"], p["rank"]) for p in stats["pools"]),
                      [("default", "kv", 0), ("default", "kv", 1)], "pools")
            expect_no_body(c.post("/clear", headers=h), 204)
            stats = expect_json(c.get("/v1/stats", headers=h), 200)
            expect_eq(stats["pools"], [], "pools after /clear: forgotten, as ever")
        expect_true(" access: " in srv.last_stderr and " tenant=default" in srv.last_stderr,
                    "the access log does not name the tenant")
    shutil.rmtree(data, ignore_errors=True)


def test_no_request_may_name_a_namespace_that_begins_with_the_tenants_byte():
    with Tenants() as t:
        a = t.client("acme")
        r = a.post("/0/initialize", {"num_pages": 4, "namespace": "\x01beta\x01sg"})
        expect_true("0x01" in expect_error(r, 400)["detail"], "%r" % r)
        expect_eq(pools(a), {}, "acme's pools")


if __name__ == "__main__":
    harness.main(globals())

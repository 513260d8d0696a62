#!/usr/bin/python3
"""Malformed requests (docs/protocol.md "Errors for every route"): every route of
both dialects gets a battery of broken bodies. Every answer must be a 4xx
with a JSON detail (never a 5xx, a hang or a dropped connection, except that
a 413/431 may close it), a rejected request changes no state at all, the
invariant checker stays happy, and the server still serves correctly.

One server serves the whole file: it is set up once with two vLLM ranks, a
SGLang namespace, owned keys, incomplete keys and reservations; after each
route's battery the pools' page states and every known key's page are
compared with the snapshot taken before."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import (Server, expect_eq, expect_json, expect_true, pool_states,  # noqa: E402
                     s_alloc, s_confirm, s_init, s_pages, v_alloc, v_confirm, v_exists,
                     v_init)

MAX_KEYS = 16
MAX_KEY_BYTES = 64
FLAGS = ("--max-keys", str(MAX_KEYS), "--max-key-bytes", str(MAX_KEY_BYTES),
         "--eviction", "clock")

KV_KEYS = ["k0", "k1", "k2", "half", "r0"]
SG_KEYS = ["s0", "s1", "s2"]
POOLS = [("kv", 0), ("kv", 1), ("sg", 0)]

_ctx = {}


class Raw:
    """A body given as exact bytes inside a JSON template (numbers that Python
    would print differently, or that are not representable)."""

    def __init__(self, text):
        self.text = text


def dumps(obj):
    """json.dumps that splices Raw values in as they are."""
    marks = {}

    def walk(o):
        if isinstance(o, Raw):
            m = "@@RAW%d@@" % len(marks)
            marks[m] = o.text
            return m
        if isinstance(o, list):
            return [walk(x) for x in o]
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        return o
    text = json.dumps(walk(obj))
    for m, raw in marks.items():
        text = text.replace('"%s"' % m, raw)
    return text.encode("utf-8")


# -- the shared server and its state ---------------------------------------------

def server():
    if "srv" not in _ctx:
        srv = Server(*FLAGS)
        srv.start()
        _ctx["srv"] = srv
        try:
            build_state(srv)
        except BaseException:
            _ctx["srv"] = None
            srv.stop()
            raise
    srv = _ctx["srv"]
    if srv is None:
        raise AssertionError("the shared server failed to start or to build its state")
    return srv


def build_state(srv):
    c = srv.client()
    v_init(c, 0, 8)
    v_init(c, 1, 8)
    for rank in (0, 1):
        pages = v_alloc(c, rank, ["k0", "k1", "k2"])
        v_confirm(c, rank, list(zip(["k0", "k1", "k2"], pages)))
    half = v_alloc(c, 0, ["half"])[0]
    v_confirm(c, 0, [("half", half)])
    _ctx["r0"] = v_alloc(c, 0, ["r0"])[0]                     # a reservation on kv/0
    _ctx["r0_1"] = v_alloc(c, 1, ["r0"])[0]                   # and on kv/1
    s_init(c, 0, 4, ns="sg")
    got = s_alloc(c, 0, ["s0", "s1"], ns="sg")
    s_confirm(c, 0, [("s0", got[0][1]), ("s1", got[1][1])], ns="sg")
    _ctx["s2"] = s_alloc(c, 0, ["s2"], ns="sg")[0][1]         # a reservation on sg/0
    expect_eq(v_exists(c, ["k0", "k1", "k2", "half", "r0"]), [True, True, True, False, False],
              "completeness of the set-up state")
    _ctx["snapshot"] = snapshot(srv)


def snapshot(srv):
    """What must not change: page states per pool and every known key's page.
    (Lookups give read leases and count as uses; counters are not compared:
    refused confirmations are counted by design.)"""
    c = harness.Client(srv.port)
    try:
        st = srv.stats()
        snap = {"pools": {p: pool_states(st, *p) for p in POOLS},
                "pool_names": sorted(st)}
        snap["kv0"] = s_pages(c, 0, KV_KEYS)
        snap["kv1"] = s_pages(c, 1, KV_KEYS)
        snap["sg0"] = s_pages(c, 0, SG_KEYS, ns="sg")
        snap["complete"] = v_exists(c, KV_KEYS)
    finally:
        c.close()
    return snap


def verify_unchanged(srv, after):
    now = snapshot(srv)
    want = _ctx["snapshot"]
    for field in want:
        if now[field] != want[field]:
            # judge the next battery on its own effects only
            _ctx["snapshot"] = now
            raise AssertionError("state changed after the %s battery: %s was %r, now %r"
                                 % (after, field, want[field], now[field]))
    srv.check()


# -- the battery -------------------------------------------------------------------

HUGE_INTS = [Raw("99999999999999999999999"), Raw("-99999999999999999999999"),
             Raw("18446744073709551616"), Raw("9223372036854775808")]
HUGE_FLOATS = [Raw("1e400"), Raw("-1e400"), Raw("1e2"), Raw("0.0"), Raw("2.5")]

# bodies that are broken whatever the route: (name, bytes)
GENERIC = [
    ("empty body", b""),
    ("whitespace only", b"  \r\n "),
    ("invalid json", b"{bad json}"),
    ("single quotes", b"{'keys': ['a']}"),
    ("trailing garbage", b'{"keys": ["a"]} xyz'),
    ("two objects", b'{} {}'),
    ("trailing comma", b'{"keys": ["a"],}'),
    ("bare word", b"nope"),
    ("unterminated string", b'{"keys": ["a'),
    ("truncated object", b"{"),
    ("truncated after key", b'{"keys"'),
    ("truncated after colon", b'{"keys":'),
    ("not an object: empty array", b"[]"),
    ("not an object: array", b'[{"keys": ["a"]}]'),
    ("not an object: string", b'"{}"'),
    ("not an object: number", b"1"),
    ("not an object: float", b"1.5"),
    ("not an object: null", b"null"),
    ("not an object: true", b"true"),
    ("unquoted key", b"{keys: []}"),
    ("comment", b'/* c */ {"keys": ["a"]}'),
    ("NaN", b'{"keys": NaN}'),
    ("invalid utf-8", b'{"keys": ["\xff\xfe"]}'),
    ("invalid utf-8 overlong", b'{"keys": ["\xc0\xaf"]}'),
    ("invalid utf-8 overlong 3 bytes", b'{"keys": ["\xe0\x80\xaf"]}'),
    ("invalid utf-8 surrogate", b'{"keys": ["\xed\xa0\x80"]}'),
    ("invalid utf-8 above U+10FFFF", b'{"keys": ["\xf4\x90\x80\x80"]}'),
    ("invalid utf-8 byte F5", b'{"keys": ["\xf5\x80\x80\x80"]}'),
    ("invalid utf-8 lone continuation", b'{"keys": ["a\x80b"]}'),
    ("invalid utf-8 truncated sequence", b'{"keys": ["\xe2\x82"]}'),
    ("invalid utf-8 in a member name", b'{"k\xffeys": []}'),
    ("raw NUL in a string", b'{"keys": ["a\x00b"]}'),
    ("NUL before the object", b"\x00{}"),
    ("NUL after the object", b"{}\x00"),
    ("raw control character in a string", b'{"keys": ["a\x01b"]}'),
    ("bad escape", b'{"keys": ["a\\qb"]}'),
    ("truncated unicode escape", b'{"keys": ["\\u12"]}'),
    ("10,000 levels of [", b"[" * 10000),
    ("10,000 levels of [ closed", b"[" * 10000 + b"]" * 10000),
    ("1,000,000 levels of [", b"[" * 1000000),
    ("1,000,000 levels of [ closed", b"[" * 1000000 + b"]" * 1000000),
    ("10,000 levels of {", b'{"a":' * 10000),
    ("100,000 levels of { closed", b'{"a":' * 100000 + b"1" + b"}" * 100000),
]


def keys_field_cases(field, base, pairs):
    """Bad values for a list-of-keys field (strings, or [key, prefix] pairs).
    Lists that start with the route's valid keys and end with a bad item check
    that the request is validated whole before anything changes."""
    good = base[field]
    bad = [good[0][0] if pairs else good[0], 5, None, True, {}, {"k0": 1}, [5], [None], [True],
           [{}], [""], good + [5], good + [None], good + [""], [1.5]]
    bad.append(Raw('["a", ' + "[" * 10000 + "]" * 10000 + "]"))
    bad.append(Raw("[" * 10000))
    if pairs:
        bad += [[[]], [["n1"]], [["n1", "p", "x"]], [[5, "p"]], [[None, "p"]],
                [["", "p"]], [[["n1"], "p"]], good + [["n3"]], good + [[5, "p"]],
                good + [["n3", "p", "q"]], good + [["", "p"]]]
    else:
        bad += [[["k0"]], [["k0", ""]], good + [["k1"]]]
    cases = [("%s=%s" % (field, short(v)), dict(base, **{field: v}), {400}) for v in bad]
    cases.append(("%s missing" % field, {k: v for k, v in base.items() if k != field}, {400}))

    def key(name):
        return [name, ""] if pairs else name
    limits = [
        ("%d keys (over --max-keys)" % (MAX_KEYS + 1),
         good + [key("t%d" % i) for i in range(MAX_KEYS + 1 - len(good))]),
        ("100000 keys", good + [key("t%d" % i) for i in range(100000)]),
        ("a key of %d bytes (over --max-key-bytes)" % (MAX_KEY_BYTES + 1),
         good + [key("z" * (MAX_KEY_BYTES + 1))]),
        ("a key of 1 MB", good + [key("z" * 1000000)]),
    ]
    for name, value in limits:
        cases.append(("%s: %s" % (field, name), dict(base, **{field: value}), {400, 413}))
    return cases


def short(v):
    text = dumps(v).decode("utf-8", "replace") if not isinstance(v, Raw) else v.text
    return text if len(text) < 40 else text[:30] + "...(%d bytes)" % len(text)


def field_cases(field, base, bad_values, statuses=None):
    return [("%s=%s" % (field, short(v)), dict(base, **{field: v}), statuses or {400})
            for v in bad_values]


RANK_BAD = ["0", 0.5, True, False, None, [], {}, [0], -1, 1024] + HUGE_INTS + HUGE_FLOATS


def page_bad(page):
    return ["%d" % page, float(page), page + 0.5, True, None, [page], {}]


def routes():
    """[(route name, path, [(case name, body, allowed statuses)])]."""
    r0, r0_1, s2 = _ctx["r0"], _ctx["r0_1"], _ctx["s2"]
    out = []

    # vLLM
    base = {"role": "worker", "num_pages": 8}
    cases = field_cases("role", base, [5, None, [], {}, "Worker", ""])
    cases += field_cases("num_pages", base, ["8", 8.5, True, None, [], {}, 0, -1]
                         + HUGE_INTS + HUGE_FLOATS)
    out.append(("vllm initialize", "/rank/0/initialize", cases))
    # with a new rank, so that accepting a bad body would create a pool
    out.append(("vllm initialize new rank", "/rank/5/initialize", cases))

    base = {"rank": 6, "role": "worker", "num_pages": 8}
    cases = field_cases("rank", base, RANK_BAD)
    cases += field_cases("num_pages", base, ["8", 8.5, True, None, -1] + HUGE_INTS + HUGE_FLOATS)
    cases += field_cases("role", base, [5, None, "Worker"])
    out.append(("vllm initialize alias", "/initialize", cases))

    base = {"rank": 0, "keys": [["n1", "p"], "n2"]}
    cases = field_cases("rank", base, RANK_BAD)
    cases += keys_field_cases("keys", base, pairs=True)
    out.append(("vllm batch_allocate", "/keys/batch_allocate", cases))

    base = {"rank": 0, "confirmations": [["r0", r0]], "pages_to_release": []}
    cases = field_cases("rank", base, RANK_BAD)
    conf_bad = ["x", 5, None, True, {}, [5], [None], [[]], [["r0"]], [["r0", r0, 1]],
                [[5, r0]], [[None, r0]], [["", r0]], [[["r0"], r0]],
                [["x" * (MAX_KEY_BYTES + 1), r0]], [["r0", r0], 5], [["r0", r0], ["r0"]],
                [["r0", r0], [5, 1]], [["r0", r0], ["r0", "1"]]]
    conf_bad += [[["r0", v]] for v in page_bad(r0)]
    conf_bad += [[["r0", r0], ["half", v]] for v in page_bad(1)]
    conf_bad += [[["r0", v]] for v in HUGE_FLOATS if v.text != "0.0"]
    cases += field_cases("confirmations", base, conf_bad)
    # a huge integer page is either a format error or an out-of-range refusal
    cases += field_cases("confirmations", base, [[["r0", v]] for v in HUGE_INTS], {400, 204})
    rel_bad = ["1", 1, {}, True, ["1"], [1.5], [True], [None], [[1]], [{}], [r0, "x"]]
    rel_bad += [[v] for v in HUGE_FLOATS]
    cases += field_cases("pages_to_release", base, rel_bad)
    too_many = [["r0", r0]] + [["t%d" % i, i % 8] for i in range(MAX_KEYS)]
    cases.append(("confirmations over --max-keys", dict(base, confirmations=too_many),
                  {400, 413}))
    cases.append(("confirmations missing", {"rank": 0, "pages_to_release": [r0]}, {400}))
    out.append(("vllm confirm_write", "/keys/confirm_write", cases))

    base = {"rank": 1, "confirmations": [["r0", r0_1]]}
    cases = field_cases("pages_to_release", base, ["1", {}, [1.5], [True], ["x"]])
    out.append(("vllm confirm_write rank 1", "/keys/confirm_write", cases))

    base = {"keys": ["k0", "half"]}
    out.append(("vllm batch_exists", "/keys/batch_exists", keys_field_cases("keys", base, False)))

    base = {"rank": 0, "keys": ["k0", "half"]}
    cases = field_cases("rank", base, RANK_BAD) + keys_field_cases("keys", base, False)
    out.append(("vllm get_locations", "/keys/get_locations", cases))

    # SGLang, on sg/0 (namespace in the body) and on kv/1 (default namespace)
    for rank, ns in ((0, "sg"), (1, None)):
        def b(d):
            return dict(d, namespace=ns) if ns else dict(d)
        label = "ns %s rank %d" % (ns or "kv", rank)
        ns_bad = [5, [], {}, True, ["sg"]]

        def with_ns(cases, base):
            return cases + field_cases("namespace", base, ns_bad)

        base = b({"num_pages": 8})
        cases = field_cases("num_pages", base, ["8", 8.5, True, None, [], {}, -1]
                            + HUGE_INTS + HUGE_FLOATS)
        out.append(("sglang initialize " + label, "/%d/initialize" % rank,
                    with_ns(cases, base)))
        base = b({"num_pages": 8})
        out.append(("sglang initialize new rank " + label, "/%d/initialize" % (rank + 7),
                    with_ns(field_cases("num_pages", base, ["8", 8.5, True, -1]
                                        + HUGE_INTS + HUGE_FLOATS), base)))

        base = b({"keys": ["s0" if ns else "k0", "missing"]})
        out.append(("sglang exists " + label, "/%d/exists" % rank,
                    with_ns(keys_field_cases("keys", base, False), base)))

        base = b({"keys": [["n1", "p"], ["n2", ""]]})
        out.append(("sglang reserve_and_allocate_page_indices " + label,
                    "/%d/reserve_and_allocate_page_indices" % rank,
                    with_ns(keys_field_cases("keys", base, True), base)))

        key, page = ("s2", s2) if ns else ("r0", r0_1)
        base = b({"written_keys_to_confirm": [[key, page]], "pages_to_release": []})
        cases = field_cases("written_keys_to_confirm", base,
                            ["x", 5, True, {}, [5], [None], [[]], [[key]], [[key, page, 1]],
                             [[5, page]], [["", page]], [[key, page], 5], [[key, page], [key]]]
                            + [[[key, v]] for v in page_bad(page)]
                            + [[[key, v]] for v in HUGE_FLOATS if v.text != "0.0"])
        cases += field_cases("written_keys_to_confirm", base,
                             [[[key, v]] for v in HUGE_INTS], {400, 204})
        cases += field_cases("pages_to_release", base,
                             ["1", 1, {}, True, ["1"], [1.5], [True], [None], [[1]],
                              [page, "x"]] + [[v] for v in HUGE_FLOATS])
        out.append(("sglang confirm_write " + label, "/%d/confirm_write" % rank,
                    with_ns(cases, base)))

        base = b({"keys": ["s0" if ns else "k0"]})
        out.append(("sglang delete_keys " + label, "/%d/delete_keys" % rank,
                    with_ns(keys_field_cases("keys", base, False), base)))

        base = b({})
        out.append(("sglang clear " + label, "/%d/clear" % rank,
                    field_cases("namespace", dict(base, namespace="x"), ns_bad)))

        base = b({"keys": ["s0" if ns else "k0", "missing"]})
        out.append(("sglang get_page_indices " + label, "/%d/get_page_indices" % rank,
                    with_ns(keys_field_cases("keys", base, False), base)))
    return out


# Generic bodies that are valid on some routes: a body that parses as an
# object whose fields are all optional or unknown. Skipped (None) where
# accepting it would change state, else the allowed statuses.
DEEP_OBJECT = "100,000 levels of { closed"
GENERIC_OVERRIDES = {
    "sglang initialize": {DEEP_OBJECT: None},
    "sglang clear": {"empty body": None, "whitespace only": None, DEEP_OBJECT: None},
    "sglang confirm_write": {DEEP_OBJECT: {204, 400}},
}


def generic_cases(route_name):
    overrides = {}
    for prefix, o in GENERIC_OVERRIDES.items():
        if route_name.startswith(prefix):
            overrides = o
    out = []
    for name, body in GENERIC:
        allowed = overrides.get(name, {400})
        if allowed is not None:
            out.append((name, body, allowed))
    return out


def run_battery(route_name):
    srv = server()
    if "routes" not in _ctx:
        _ctx["routes"] = routes()
    matching = [r for r in _ctx["routes"] if r[0] == route_name]
    expect_true(matching, "no route %r" % route_name)
    _, path, cases = matching[0]
    c = harness.Client(srv.port)
    failures = []
    count = 0
    try:
        all_cases = generic_cases(route_name) + cases
        for name, body, allowed in all_cases:
            data = body if isinstance(body, bytes) else dumps(body)
            count += 1
            before_sock = c.socket()
            try:
                r = c.post(path, data)
            except (OSError, harness.http.client.HTTPException) as e:
                failures.append("%s: no answer (%s: %s)" % (name, type(e).__name__, e))
                c.close()
                c = harness.Client(srv.port)
                if not srv.alive():
                    failures.append("the server died:\n" + harness._tail(srv.stderr()))
                    break
                continue
            problem = check_answer(r, allowed)
            if problem:
                failures.append("%s: %s" % (name, problem))
            if r.status not in (413, 431) and before_sock is not None \
                    and c.socket() is not before_sock:
                failures.append("%s: the server closed the connection after a %d answer"
                                % (name, r.status))
    finally:
        c.close()
    try:
        verify_unchanged(srv, route_name)
    except AssertionError as e:
        failures.append(str(e))
    if failures:
        raise AssertionError("POST %s: %d of %d malformed requests mishandled:\n  %s"
                             % (path, len(failures), count, "\n  ".join(failures[:40])))


def check_answer(r, allowed):
    if r.status not in allowed:
        return "status %d (allowed %s), body %r" % (r.status, sorted(allowed), r.body[:200])
    if r.status == 204:
        return None
    body = r.json_or_none()
    if not isinstance(body, dict) or not isinstance(body.get("detail"), str) \
            or not body["detail"]:
        return "%d without a JSON detail: %r" % (r.status, r.body[:200])
    ctype = (r.header("Content-Type") or "").lower()
    if not ctype.startswith("application/json"):
        return "%d with Content-Type %r" % (r.status, ctype)
    return None


def _make_test(route_name):
    def test():
        run_battery(route_name)
    return test


# One test per route, named after it.
_ROUTE_NAMES = [
    "vllm initialize", "vllm initialize new rank", "vllm initialize alias",
    "vllm batch_allocate", "vllm confirm_write", "vllm confirm_write rank 1",
    "vllm batch_exists", "vllm get_locations",
]
for _ns, _rank in (("sg", 0), ("kv", 1)):
    for _r in ("initialize", "initialize new rank", "exists",
               "reserve_and_allocate_page_indices", "confirm_write", "delete_keys", "clear",
               "get_page_indices"):
        _ROUTE_NAMES.append("sglang %s ns %s rank %d" % (_r, _ns, _rank))

for _name in _ROUTE_NAMES:
    _fn = _make_test(_name)
    _fn.__name__ = "test_malformed_%s_is_rejected_with_4xx_and_changes_nothing" % (
        _name.replace(" ", "_"))
    globals()[_fn.__name__] = _fn


def test_malformed_null_byte_and_escaped_keys_in_lookups_never_fail_the_server():
    # "\u0000" and a lone surrogate are valid JSON escapes: a lookup of such a
    # key may be answered (the key is absent) or refused, but never a 5xx.
    srv = server()
    c = harness.Client(srv.port)
    try:
        for path, body in [("/keys/batch_exists", b'{"keys": ["a\\u0000b"]}'),
                           ("/keys/batch_exists", b'{"keys": ["\\ud800"]}'),
                           ("/keys/get_locations", b'{"rank": 0, "keys": ["a\\u0000b"]}'),
                           ("/0/exists", b'{"keys": ["\\u0000"], "namespace": "sg"}'),
                           ("/0/get_page_indices", b'{"keys": ["k0\\u0000"]}')]:
            r = c.post(path, body)
            if r.status == 200:
                got = r.json()
                expect_true(list(got.values())[0] in ([False], [None]),
                            "%s %r: such a key is absent: %r" % (path, body, r))
            else:
                expect_true(check_answer(r, {400}) is None, "%s %r: %r" % (path, body, r))
    finally:
        c.close()
    verify_unchanged(srv, "escaped keys")


def test_malformed_battery_leaves_server_serving_correctly():
    srv = server()
    c = srv.client()
    # fresh work on every pool, independent of what the battery may have broken
    pages = {}
    for rank in (0, 1):
        got = v_alloc(c, rank, ["fresh-a", "fresh-b"])
        expect_true(all(p >= 0 for p in got), "kv/%d allocation still works: %r" % (rank, got))
        v_confirm(c, rank, list(zip(["fresh-a", "fresh-b"], got)))
        pages[rank] = got
    expect_eq(v_exists(c, ["fresh-a", "fresh-b", "never"]), [True, True, False], "completeness")
    got = s_alloc(c, 0, ["fresh-s"], ns="sg")
    s_confirm(c, 0, [("fresh-s", got[0][1])], ns="sg")
    expect_eq(s_pages(c, 0, ["fresh-s"], ns="sg"), [got[0][1]], "sg/0 confirm")
    expect_eq(s_pages(c, 1, ["fresh-a", "fresh-b"]), pages[1], "kv/1 pages")
    h = c.get("/health")  # over Redis it may name primaries without a replica too
    expect_eq((h.status, h.json()["status"]), (200, "ok"), "/health")
    expect_eq(sorted(srv.stats()), sorted(POOLS), "no pool was created by the battery")
    srv.check()


def test_malformed_battery_kept_the_reservations_made_before_it():
    srv = server()
    c = srv.client()
    v_confirm(c, 0, [("r0", _ctx["r0"])])
    v_confirm(c, 1, [("r0", _ctx["r0_1"])])
    s_confirm(c, 0, [("s2", _ctx["s2"])], ns="sg")
    expect_eq(s_pages(c, 0, ["r0"]), [_ctx["r0"]], "kv/0 r0 confirmed")
    expect_eq(s_pages(c, 1, ["r0"]), [_ctx["r0_1"]], "kv/1 r0 confirmed")
    expect_eq(s_pages(c, 0, ["s2"], ns="sg"), [_ctx["s2"]], "sg/0 s2 confirmed")
    srv.check()


def test_malformed_battery_server_shuts_down_cleanly():
    srv = server()
    _ctx["srv"] = None
    srv.stop()


if __name__ == "__main__":
    harness.main(globals())

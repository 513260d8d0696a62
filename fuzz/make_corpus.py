#!/usr/bin/env python3
"""make_corpus.py: write the seed corpora of fuzz/corpus/<target>/ from the
requests the stock vLLM and SGLang clients send (docs/protocol.md) and from the
edge cases of the contract. Seeds are named seed-<what>; files a fuzzing
run found and that were merged back keep libFuzzer's hash names.

    python3 fuzz/make_corpus.py          (re)write the seeds, keep the rest

The input formats are described at the top of each fuzz/fuzz_<target>.c.
"""

import base64
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
HEX = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
# SGLang's suffixed keys and the shapes at the bounds of their packed form
# (util/hexkey.h: 32 or 64 lowercase hex, then a suffix of 1..16 bytes)
SUFFIXED = {
    "k": HEX + "-k", "v": HEX + "-v", "pool": HEX[:32] + "_mamba",
    "upper": HEX.upper() + "-k",         # upper case hex: not packed
    "hex63": HEX[:63] + "-k",            # 32 hex and a suffix of 33: not packed
    "hex65": HEX + "0",                  # 64 hex and a suffix that looks like hex
    "hex66": HEX + "ab",                 # 66 hex: 64 and the suffix "ab"
    "hexsfx32": HEX[:32] + "abc",        # 32 hex and a hex suffix
    "upsfx32": HEX[:32] + "ABCD",
    "at64": HEX + "_" + "p" * 15, "past64": HEX + "_" + "p" * 16,  # a suffix of 16, 17
    "at32": HEX[:32] + "_" + "p" * 15, "past32": HEX[:32] + "_" + "p" * 16,
}


def j(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


# -- real request bodies ---------------------------------------------------------

def request_bodies():
    """(path, body) of requests as the stock clients send them, and the
    contract's edge cases."""
    keys = [HEX, "b" * 64, "k1", "k2"]
    pairs = [[k, ""] for k in keys]
    yield "/rank/0/initialize", j({"role": "worker", "num_pages": 8})
    yield "/rank/1/initialize", j({"role": "scheduler"})
    yield "/rank/0/initialize", j({"role": "Worker", "num_pages": 8})
    yield "/rank/0/initialize", j({"num_pages": 1.0})
    yield "/rank/0/initialize", j({"num_pages": True})
    yield "/rank/0/initialize", b""
    yield "/initialize", j({"rank": 1, "role": "worker", "num_pages": 4})
    yield "/initialize", j({"role": "scheduler"})
    yield "/keys/batch_allocate", j({"rank": 0, "keys": pairs})
    yield "/keys/batch_allocate", j({"rank": 0, "keys": keys + [[HEX, None]]})
    yield "/keys/batch_allocate", j({"rank": 1, "keys": [["a", "prefix"], "a", "c"]})
    yield "/keys/batch_allocate", j({"rank": 0, "keys": [["a"]]})
    yield "/keys/batch_allocate", j({"rank": 3, "keys": ["a"]})
    yield "/keys/batch_allocate", j({"rank": "0", "keys": ["a"]})
    yield "/keys/confirm_write", j({"rank": 0, "confirmations": [["b", 1], ["a", 0]],
                                    "pages_to_release": [2, 3]})
    yield "/keys/confirm_write", j({"rank": 0, "confirmations": [["b", 99]],
                                    "pages_to_release": [-1]})
    yield "/keys/confirm_write", j({"rank": 0, "confirmations": [["b", 1.5]]})
    yield "/keys/batch_exists", j({"keys": ["a", "b", HEX]})
    yield "/keys/batch_exists", j({"keys": "a"})
    yield "/keys/get_locations", j({"rank": 0, "keys": ["a", "b"]})
    yield "/keys/get_locations", j({"rank": 1, "keys": ["a"]})
    yield "/clear", b""
    yield "/0/initialize", j({"num_pages": 4, "namespace": "ns"})
    yield "/2/initialize", j({"num_pages": 0, "namespace": "ns"})
    yield "/0/exists", j({"keys": ["a", "b", "zz"]})
    yield "/0/exists", j({"keys": ["a"], "namespace": ""})
    yield "/0/reserve_and_allocate_page_indices", j({"keys": pairs})
    yield "/0/reserve_and_allocate_page_indices", j({"keys": [["a", ""], ["n1", ""]],
                                                      "namespace": "kv"})
    yield "/2/reserve_and_allocate_page_indices", j({"keys": [["a", ""]], "namespace": "ns"})
    yield "/0/confirm_write", j({"written_keys_to_confirm": [["b", 1]], "pages_to_release": [3]})
    yield "/0/confirm_write", j({"written_keys_to_confirm": None, "pages_to_release": None})
    yield "/0/confirm_write", j({})
    yield "/0/delete_keys", j({"keys": ["a", "b"]})
    yield "/0/clear", j({})
    yield "/0/clear", b""
    yield "/0/get_page_indices", j({"keys": ["a", "b", "c"]})
    yield "/0/get_page_indices", j({"keys": ["a\u0000b", "\u00e9", "a" * 81]})
    yield "/0/exists", b'{"keys":["a"],"keys":["b"]}'
    yield "/0/exists", b'{"keys":["\\ud800"]}'
    yield "/0/exists", b'{"keys":["\xed\xa0\x80"]}'
    yield "/0/exists", b'[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["a"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'
    yield "/0/exists", b'{"keys":[' + b",".join([b'"k"'] * 17) + b"]}"
    yield "/0/exists", b'{"keys":["a"]} trailing'
    yield "/0/exists", b'{"keys":[1e400]}'
    yield "/0/exists", b'{"keys":[-9223372036854775809]}'


# -- fuzz_request ------------------------------------------------------------------

def suffixed_requests():
    """(name, path, body): suffixed keys allocated (kv/1 has 4 free pages) and read."""
    k = SUFFIXED
    yield "mha", "/keys/batch_allocate", {"rank": 1, "keys": [[k["k"], ""], [k["v"], ""],
                                                               [k["pool"], ""]]}
    yield "bounds", "/keys/batch_allocate", {"rank": 1, "keys": [k["at64"], k["at32"],
                                                                  k["past32"]]}
    yield "shapes", "/keys/batch_allocate", {"rank": 1, "keys": [k["upper"], k["hex63"],
                                                                  k["hex65"], k["hexsfx32"]]}
    yield "exists", "/0/exists", {"keys": [k[x] for x in ("k", "pool", "upper", "hex66",
                                                          "upsfx32", "at64", "past32")]}


def request_seeds():
    for name, path, body in suffixed_requests():
        yield "seed-suffixed-" + name, b"\xff" + path.encode() + b"\n" + j(body)
    for i, (path, body) in enumerate(request_bodies()):
        yield "seed-%02d%s" % (i, path.replace("/", "_")), b"\xff" + path.encode() + b"\n" + body
    for i in range(40):  # the route table, by index, with a typical body
        yield "seed-route-%02d" % i, bytes([i]) + j({"rank": 0, "keys": [["a", ""], "b"]})
    token = "s3cr3t:T0ken"
    basic = base64.b64encode(b"user:" + token.encode()).decode()
    for name, header in [("bearer", "Bearer " + token), ("basic", "Basic " + basic),
                         ("basic-nouser", "Basic " + base64.b64encode(b":" + token.encode())
                          .decode()),
                         ("wrong", "Bearer nope"), ("none", "-"), ("scheme", "Digest x"),
                         ("bad-b64", "Basic !!!"), ("spaces", "  bearer   " + token + "  ")]:
        for path in ["/keys/batch_exists", "/health", "/v1/stats"]:
            yield ("seed-auth-%s%s" % (name, path.replace("/", "_")),
                   b"\xfe" + header.encode() + b"\n\xff" + path.encode() + b"\n"
                   + j({"keys": ["a"]}))


# -- fuzz_json ---------------------------------------------------------------------

def json_seeds():
    texts = [body for _, body in request_bodies() if body]
    texts += [b"null", b"true", b"0", b"-0", b"1.5e3", b'"\\u0000"', b'"\\ud83d\\ude00"',
              b'"\\ud800x"', b'{"a":1,"a":2}', b"[]", b"{}", b'[1,[2,[3,[4]]]]',
              b'"\xf4\x8f\xbf\xbf"', b'"\xf4\x90\x80\x80"', b'"\xc0\x80"',
              b"9223372036854775807", b"-9223372036854775808", b"1e308", b"[1,2,3,]",
              b"// comment\n1", b'{"a" 1}', b"\xef\xbb\xbf{}"]
    for i, text in enumerate(texts):
        for mode in (0x1f, 0x80 | 0x1f, 0x03):
            yield "seed-%02d-%02x" % (i, mode), bytes([mode]) + text


# -- fuzz_sequence -------------------------------------------------------------------

# Opcodes of fuzz_sequence.c (enum in run_op); keep in step with it.
(OP_TICK, OP_TRIM, OP_RAW, OP_V_INIT, OP_V_INIT_ALIAS, OP_V_ALLOC, OP_V_CONFIRM, OP_V_EXISTS,
 OP_V_LOCATIONS, OP_V_CLEAR, OP_S_INIT, OP_S_EXISTS, OP_S_ALLOC, OP_S_CONFIRM, OP_S_DELETE,
 OP_S_CLEAR, OP_S_PAGES, OP_SNAPSHOT) = range(18)


def sequence_seeds():
    # A vLLM worker pair: initialize ranks 0 and 1, allocate, confirm, read.
    vllm = bytes([OP_V_INIT, 0, 4, OP_V_INIT, 1, 4,
                  OP_V_ALLOC, 0, 3, 0x84, 0x05, 0x00, OP_V_ALLOC, 1, 3, 0x84, 0x05, 0x00,
                  OP_V_CONFIRM, 0, 3, 0x00, 0, 0x08, 0, 0x10, 0, 2, 1, 3,
                  OP_V_CONFIRM, 1, 3, 0x18, 0, 0x20, 0, 0x28, 0, 0,
                  OP_SNAPSHOT, OP_V_EXISTS, 3, 0, 4, 5, OP_V_LOCATIONS, 0, 3, 0, 4, 5,
                  OP_TICK, 30, OP_V_ALLOC, 0, 5, 1, 2, 3, 6, 7, OP_V_CLEAR, OP_V_EXISTS, 1, 0])
    # SGLang with namespaces, deletes, clears and expiring leases.
    sglang = bytes([OP_S_INIT, 0, 3, 2, OP_S_INIT, 1, 2, 1,
                    OP_S_ALLOC, 0, 4, 0, 1, 2, 3, 2, OP_S_CONFIRM, 0, 2, 0x00, 0, 0x08, 0, 1, 3, 2,
                    OP_S_EXISTS, 0, 3, 0, 1, 9, 2, OP_S_PAGES, 0, 2, 0, 1, 2,
                    OP_S_ALLOC, 0, 3, 4, 5, 6, 2, OP_SNAPSHOT, OP_TICK, 100, OP_S_ALLOC, 0, 2, 7, 8, 2,
                    OP_S_DELETE, 0, 1, 0, 2, OP_S_CLEAR, 0, 0, 2, OP_TICK, 255, OP_TRIM,
                    OP_S_PAGES, 1, 3, 10, 11, 12, 1])
    # Eviction under pressure: a 1-page pool, reads that lease, allocations that evict.
    evict = bytes([OP_S_INIT, 0, 1, 1, OP_S_ALLOC, 0, 1, 0, 1, OP_S_CONFIRM, 0, 1, 0, 0, 0, 1,
                   OP_S_EXISTS, 0, 1, 0, 1, OP_SNAPSHOT, OP_S_ALLOC, 0, 1, 1, 1, OP_TICK, 30,
                   OP_S_ALLOC, 0, 1, 1, 1, OP_S_CONFIRM, 0, 1, 0x08, 0, 0, 1,
                   OP_S_DELETE, 0, 1, 1, 1, OP_S_ALLOC, 0, 1, 2, 1])
    raw = bytes([OP_V_INIT, 0, 2, OP_RAW, 6, 14]) + j({"rank": 0, "keys": ["x"]})[:14]
    yield "seed-vllm", vllm
    yield "seed-sglang", sglang
    yield "seed-evict", evict
    yield "seed-raw", raw
    yield from suffixed_sequences()
    rng = random.Random(1)
    for i in range(24):
        yield "seed-random-%02d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(16, 400)))


# Indexes of fuzz_routes (fuzz_common.c) that OP_RAW takes; keep in step with it.
RT_V_ALLOC, RT_V_CONFIRM, RT_V_EXISTS, RT_V_LOCATIONS = 6, 7, 8, 9
RT_S_EXISTS, RT_S_ALLOC, RT_S_ALLOC_1, RT_S_CONFIRM = 13, 15, 16, 17
RT_S_DELETE, RT_S_PAGES = 19, 21


def raw_op(route, body):
    """OP_RAW: the vocabulary has no suffixed key, raw bodies bring them."""
    b = j(body)
    assert len(b) <= 255, (len(b), body)
    return bytes([OP_RAW, route, len(b)]) + b


def suffixed_sequences():
    """Suffixed keys reserved, confirmed, read, deleted and expired, with a
    snapshot between (the run's end replays the log and the snapshot).
    Fresh pools hand out pages 0, 1, 2, ..."""
    k = SUFFIXED
    kv, ns = {"namespace": "kv"}, {"namespace": "ns"}
    yield "seed-suffixed-mha", b"".join([  # SGLang, MHA keys and a pool's, TP 2
        bytes([OP_S_INIT, 0, 5, 0, OP_S_INIT, 1, 5, 0]),
        raw_op(RT_S_ALLOC, {"keys": [[k["k"], ""], [k["v"], ""], [k["pool"], ""]]}),
        raw_op(RT_S_ALLOC_1, {"keys": [[k["k"], ""], [k["v"], ""], [k["pool"], ""]]}),
        raw_op(RT_S_CONFIRM, {"written_keys_to_confirm": [[k["k"], 0], [k["v"], 1],
                                                          [k["pool"], 2]]}),
        bytes([OP_SNAPSHOT]),
        raw_op(RT_S_EXISTS, {"keys": [k["k"], k["v"], k["upper"]]}),
        raw_op(RT_S_PAGES, {"keys": [k["k"], k["v"], k["pool"]]}),
        raw_op(RT_S_DELETE, {"keys": [k["v"]]}),
        bytes([OP_TICK, 255]),  # rank 1's reservations expire
        raw_op(RT_S_ALLOC_1, {"keys": [[k["k"], ""], [k["pool"], ""]]})])
    yield "seed-suffixed-bounds", b"".join([  # vLLM, suffixes of 16 and 17 bytes
        bytes([OP_V_INIT, 0, 5]),
        raw_op(RT_V_ALLOC, {"rank": 0, "keys": [k["past64"]]}),  # 81 bytes: refused (80)
        raw_op(RT_V_ALLOC, {"rank": 0, "keys": [k["at64"], k["at32"]]}),
        raw_op(RT_V_ALLOC, {"rank": 0, "keys": [k["past32"], k["hexsfx32"]]}),
        raw_op(RT_V_CONFIRM, {"rank": 0, "confirmations": [[k["at64"], 0], [k["at32"], 1]]}),
        raw_op(RT_V_CONFIRM, {"rank": 0, "confirmations": [[k["past32"], 2]]}),
        bytes([OP_SNAPSHOT]),
        raw_op(RT_V_LOCATIONS, {"rank": 0, "keys": [k["at64"], k["at32"], k["past32"]]}),
        raw_op(RT_V_EXISTS, {"keys": [k["past32"], k["hexsfx32"], k["at64"]]})])
    yield "seed-suffixed-shapes", b"".join([  # upper case, 63, 65 and 66 hex, hex suffixes
        bytes([OP_S_INIT, 0, 5, 0]),
        raw_op(RT_S_ALLOC, {"keys": [[k["upper"], ""], [k["hex63"], ""]]}),
        raw_op(RT_S_ALLOC, {"keys": [[k["hex65"], ""], [k["hex66"], ""], [k["upsfx32"], ""]]}),
        raw_op(RT_S_CONFIRM, {"written_keys_to_confirm": [[k["upper"], 0], [k["hex65"], 2],
                                                          [k["upsfx32"], 4]]}),
        bytes([OP_SNAPSHOT]),
        raw_op(RT_S_PAGES, {"keys": [k["upper"], k["hex63"], k["hex65"]]}),
        raw_op(RT_S_EXISTS, {"keys": [k["hex66"], k["upsfx32"], k["hexsfx32"]]}),
        raw_op(RT_S_DELETE, {"keys": [k["hex65"], k["upper"]]})])
    yield "seed-suffixed-namespaces", b"".join([  # one suffix in two namespaces
        bytes([OP_S_INIT, 0, 5, 1, OP_S_INIT, 0, 5, 2]),
        raw_op(RT_S_ALLOC, dict(kv, keys=[[k["k"], ""], [k["v"], ""]])),
        raw_op(RT_S_ALLOC, dict(ns, keys=[[k["k"], ""], [k["pool"], ""]])),
        raw_op(RT_S_CONFIRM, dict(kv, written_keys_to_confirm=[[k["k"], 0], [k["v"], 1]])),
        bytes([OP_SNAPSHOT]),
        raw_op(RT_S_DELETE, dict(ns, keys=[k["k"]])),
        raw_op(RT_S_EXISTS, dict(ns, keys=[k["k"], k["v"], k["pool"]])),
        bytes([OP_S_CLEAR, 0, 0, 1]),  # kv cleared
        raw_op(RT_S_EXISTS, dict(kv, keys=[k["k"], k["v"]]))])


# -- fuzz_wal_recover ------------------------------------------------------------------

# Record opcodes of fuzz_wal_recover.c (build_body: op % 12 is the record type).
R_RAW, R_POOL_INIT, R_CLEAR_ALL, R_RESERVE, R_OWN, R_FREE, R_DRAIN, R_USE, R_DEMOTE, R_OWNED, \
    R_END, R_JUNK = range(12)
K_SNAPSHOT, K_SEGMENT, K_TMP, K_FOREIGN, K_DAMAGED, K_MISNAMED = range(6)


def wal_file(kind, seq, hflags, salt, records, damage=b"\x00"):
    """One file of the fuzz_wal_recover input: records are (opcode, field bytes)."""
    out = bytes([kind, seq - 1, hflags, salt, len(records)])
    for op, fields in records:
        out += bytes([op]) + bytes(fields)
    return out + damage


def wal_recover_seeds():
    # pool 0 = kv/0 with 8 pages: reserve a, own it; reserve b; use a; drain nothing
    pool = (R_POOL_INIT, [0, 0, 0, 8])
    live = [pool, (R_RESERVE, [0, 0, 0, 0]), (R_OWN, [0, 0]), (R_RESERVE, [0, 1, 4, 1]),
            (R_USE, [0, 8, 0, 0]), (R_OWNED, [0, 2, 0x84]), (R_DEMOTE, [0, 0]),
            (R_FREE, [0, 1])]
    snap = [pool, (R_OWNED, [0, 0, 0]), (R_OWNED, [0, 1, 0x84]), (R_RESERVE, [0, 2, 4, 1])]
    empty_snap = wal_file(K_SNAPSHOT, 1, 0x80, 7, [])
    yield "seed-fresh-log", bytes([0]) + empty_snap + wal_file(K_SEGMENT, 1, 0, 9, live)
    yield "seed-snapshot-and-log", bytes([2]) + wal_file(K_SNAPSHOT, 2, 0x80, 7, snap) + \
        wal_file(K_SEGMENT, 2, 0, 9, [(R_FREE, [0, 2]), (R_CLEAR_ALL, []), pool])
    yield "seed-two-segments", bytes([0]) + empty_snap + wal_file(K_SEGMENT, 1, 0, 9, live[:3]) + \
        wal_file(K_SEGMENT, 2, 0, 3, live[3:])
    yield "seed-torn-tail", bytes([0]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 9, live, damage=bytes([2, 0, 90]))
    yield "seed-damage-salvaged", bytes([1]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 9, live, damage=bytes([1, 0, 60, 0xff]))
    yield "seed-recovery-segment", bytes([0]) + empty_snap + wal_file(K_SEGMENT, 1, 0, 9, live) + \
        wal_file(K_SEGMENT, 3, 1, 5, [pool])
    yield "seed-foreign", bytes([0]) + empty_snap + wal_file(K_FOREIGN, 1, 0, 0, [])
    yield "seed-tmp-and-damaged", bytes([0]) + empty_snap + wal_file(K_TMP, 2, 0x80, 0, snap) + \
        wal_file(K_DAMAGED, 1, 0, 0, live)
    yield "seed-zeroed-segment", bytes([0]) + empty_snap + wal_file(K_SEGMENT, 1, 0, 9, live) + \
        wal_file(K_SEGMENT, 2, 0, 9, [], damage=bytes([8]))
    yield "seed-raw-records", bytes([1]) + empty_snap + wal_file(
        K_SEGMENT, 1, 0, 9, [pool, (R_RAW, [5, 3, 0, 0, 0, 0]), (R_JUNK, [3, 1, 2, 3])])
    yield "seed-bad-header", bytes([0]) + wal_file(K_SNAPSHOT, 1, 0x82, 7, snap)
    # keys <64 hex>-k and <32 hex>_mamba packed with their suffix (version 5),
    # and a file of version 4 (salt >= 0x80: packed keys without a suffix byte)
    suffixed = [pool, (R_RESERVE, [0, 3, 0, 0x88]), (R_OWN, [0, 3]), (R_OWNED, [0, 4, 0x89]),
                (R_RESERVE, [0, 5, 4, 8]), (R_OWNED, [0, 6, 0x84])]
    yield "seed-suffixed-keys", bytes([2]) + empty_snap + wal_file(K_SEGMENT, 1, 0, 9, suffixed)
    yield "seed-version-4-segment", bytes([0]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 0x89, [pool, (R_OWNED, [0, 0, 0x84]), (R_RESERVE, [0, 1, 0, 0x85])])
    # a snapshot holding suffixed keys packed and as text, a log after it
    yield "seed-suffixed-snapshot", bytes([2]) + wal_file(
        K_SNAPSHOT, 2, 0x80, 7, [pool, (R_OWNED, [0, 0, 0x88]), (R_OWNED, [0, 1, 0x09]),
                                 (R_RESERVE, [0, 2, 4, 0x84])]) + \
        wal_file(K_SEGMENT, 2, 0, 9, [(R_FREE, [0, 0]), (R_OWNED, [0, 3, 0x88]), (R_OWN, [0, 2])])
    # the previous release's segment (version 4: suffixed keys as text), then this one's
    yield "seed-suffixed-version-4-then-5", bytes([2]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 0x89, [pool, (R_RESERVE, [0, 0, 0, 0x88]), (R_OWN, [0, 0]),
                                         (R_OWNED, [0, 1, 0x89])]) + \
        wal_file(K_SEGMENT, 2, 0, 9, [(R_FREE, [0, 1]), (R_OWNED, [0, 2, 0x89]),
                                      (R_RESERVE, [0, 3, 4, 0x88])])
    # raw key fields: 32 hex packed with a suffix of 16 bytes (the bound), of
    # 17 (past it), and of 16 announced with 3 left (salvaged)
    def raw_record(fields, s, present):  # fields, then a key of 16 packed bytes and s
        body = fields + [0x21] + [0x5a] * 16 + [s] + [0x70] * present
        return (R_RAW, [len(body)] + body)
    raw = [raw_record([R_RESERVE, 0, 5, 0], 16, 16), raw_record([R_RESERVE, 0, 6, 0], 17, 17),
           raw_record([R_OWNED, 0, 7], 16, 3)]
    yield "seed-suffix-bounds-salvaged", bytes([1]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 9, [pool] + raw[:1] + raw[1:2])
    yield "seed-suffix-truncated-salvaged", bytes([1]) + empty_snap + \
        wal_file(K_SEGMENT, 1, 0, 9, [pool] + raw[:1] + raw[2:])


# -- fuzz_client -------------------------------------------------------------------

def http_answer(status, body, headers=(), version="HTTP/1.1", length=True):
    head = "%s %d X\r\n" % (version, status)
    for h in headers:
        head += h + "\r\n"
    if length:
        head += "Content-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def client_seeds():
    answers = [
        http_answer(200, j({"rank": 0, "results": [[HEX, 3], ["a", -1]]}),
                    ["Content-Type: application/json"]),
        http_answer(200, j({"indices": [[True, 1], [False, -1]]})),
        http_answer(200, j({"exists": [True, False]})),
        http_answer(200, j({"locations": [1, None]})),
        http_answer(204, b"", length=False),
        http_answer(404, j({"detail": "Rank 3 not initialized"})),
        http_answer(401, j({"detail": "Not authenticated"}),
                    ['WWW-Authenticate: Bearer realm="hf3fs-metad"']),
        http_answer(413, j({"detail": "too large"}), ["Connection: close"]),
        b"HTTP/1.1 100 Continue\r\n\r\n" + http_answer(200, j({"status": "ok"})),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\n{\"a\":\r\n2\r\n1}\r\n"
        b"0\r\nTrailer: t\r\n\r\n",
        http_answer(200, j({"status": "ok"}), version="HTTP/1.0", length=False),
        http_answer(200, b'{"a":"\\u00e9\\ud83d\\ude00","b":[1.5e3,-0,{}]}',
                    ["Content-Length: 39"]),
        b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}",
        http_answer(200, j({"x": 1}), ["Content-Length: 9"]),
        http_answer(200, j({"status": "ok"})) + http_answer(204, b"", length=False),
    ]
    for i, a in enumerate(answers):
        for mode in (0x00, 0x06, 0x01):
            yield "seed-%02d-%02x" % (i, mode), bytes([mode]) + a


# -- fuzz_http ---------------------------------------------------------------------

def http_request(method, path, body=b"", headers=(), version="HTTP/1.1", length=True):
    head = "%s %s %s\r\nHost: 127.0.0.1\r\n" % (method, path, version)
    for h in headers:
        head += h + "\r\n"
    if length and body:
        head += "Content-Length: %d\r\n" % len(body)
    return head.encode() + b"\r\n" + body


def chunk(body, size):
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def http_seeds():
    alloc = j({"rank": 0, "keys": [[HEX, ""], ["b", None]]})
    reqs = [
        http_request("GET", "/health"),
        http_request("POST", "/keys/batch_allocate", alloc),
        http_request("POST", "/0/reserve_and_allocate_page_indices", j({"keys": [["a", ""]]})),
        http_request("POST", "/0/exists", j({"keys": ["a"]}), ["Connection: close"]),
        http_request("POST", "/keys/batch_exists", chunk(j({"keys": ["a", "b"]}), 5),
                     ["Transfer-Encoding: chunked"], length=False),
        http_request("POST", "/0/get_page_indices", j({"keys": ["a"]}),
                     ["Expect: 100-continue"]),
        http_request("POST", "/0/exists", b"x" * 1500),
        http_request("POST", "/0/exists", chunk(b"y" * 1500, 700),
                     ["Transfer-Encoding: chunked"], length=False),
        http_request("GET", "/health", headers=["X-Big: " + "z" * 4500]),
        http_request("GET", "/health", version="HTTP/1.0"),
        http_request("HEAD", "/health"),
        http_request("GET", "/v1/stats?x=1"),
        http_request("DELETE", "/clear"),
        http_request("POST", "/clear"),
        b"GET /health HTTP/1.1\nHost: x\n\n",
        b"\x00\xffgarbage\r\n\r\n",
        http_request("POST", "/0/exists", b"{}", ["Content-Length: 5"]),
        http_request("POST", "/0/exists", b"{}", ["Transfer-Encoding: chunked"]),
    ]
    for i, r in enumerate(reqs):
        yield "seed-%02d" % i, b"\x00" + r
        yield "seed-%02d-pieces" % i, b"\x07" + r
    yield "seed-pipelined", b"\x00" + b"".join(reqs[:6])
    yield "seed-pipelined-pieces", b"\x03" + b"".join(reqs[:6])


TARGETS = {"http": http_seeds, "client": client_seeds, "request": request_seeds, "json": json_seeds, "sequence": sequence_seeds,
           "wal_recover": wal_recover_seeds}


def main():
    for target, seeds in TARGETS.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith("seed-"):
                os.remove(os.path.join(d, name))
        n = 0
        for name, data in seeds():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            n += 1
        print("%s: %d seeds" % (target, n))


if __name__ == "__main__":
    main()

"""test_import_sglang.py: SGLang's state file (mini_3fs_metadata_server.py
--persistence-path FILE) imported at start (docs/operations.md "Switching from
SGLang's server"), over every engine.

The file is written here as SGLang's GlobalMetadataState.save_to_disk writes
it: json.dump(..., indent=4) of {"rank:namespace": {"num_pages", "free_pages",
"key_to_index": list(OrderedDict.items())}}, LRU order (oldest first), and a
bare "rank" member as older files have it (load_from_disk reads it as
namespace "kv"). Keys have SGLang HiCache's shape: get_hash_str's chained
SHA-256 hex digest, with "-k"/"-v" as its 3FS backend appends for an MHA
model under the page_first layout (HiCacheHF3FS._get_mha_zero_copy_keys).
"""

import hashlib
import json
import os
import shutil
import tempfile

import harness
from harness import Server, ServerError, expect_eq, expect_no_body, expect_true

EXIT_IMPORT = 7


def sglang_keys(n, seed):
    """n page keys of one SGLang sequence: 64-hex chained SHA-256, -k/-v."""
    keys, prior = [], None
    for page in range(n // 2 + 1):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in range(64):  # one page of 64 token ids, 4 bytes little-endian each
            h.update(((seed * 7919 + page * 64 + t) % 151936).to_bytes(4, "little"))
        prior = h.hexdigest()
        keys += [prior + "-k", prior + "-v"]
    return keys[:n]


def write_state(path, pools):
    """pools: {name: (num_pages, free_pages, [(key, page), ...] oldest first)}."""
    state = {name: {"num_pages": n, "free_pages": free, "key_to_index": [list(kv) for kv in pairs]}
             for name, (n, free, pairs) in pools.items()}
    with open(path, "w") as f:
        json.dump(state, f, indent=4)


# The reference state: namespace kv over ranks 0 ("0:kv") and 1 (a bare "1",
# an older file), sharing their keys as vLLM-style complete keys, and a pool
# of namespace "sg". Pages not free and not owned were in flight.
KV_KEYS = sglang_keys(6, 1)
SG_KEYS = sglang_keys(5, 2)
POOLS = {
    "0:kv": (10, [9, 8, 7], list(zip(KV_KEYS, [4, 0, 6, 2, 5, 1]))),  # page 3 in flight
    "1": (8, [7, 6], list(zip(KV_KEYS, [0, 1, 2, 3, 4, 5]))),
    "0:sg": (6, [5], list(zip(SG_KEYS, [3, 1, 0, 4, 2]))),
}


def pools_of(name):
    rank, _, ns = name.partition(":")
    return int(rank), ns or "kv"


class StateFile:
    """A temporary directory holding an SGLang state file."""

    def __init__(self, pools=POOLS, text=None):
        self.dir = tempfile.mkdtemp(prefix="hf3fs-metad-sglang-")
        self.path = os.path.join(self.dir, "sglang-state.json")
        if text is None:
            write_state(self.path, pools)
        else:
            with open(self.path, "w") as f:
                f.write(text)

    def bytes(self):
        with open(self.path, "rb") as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


def importing_server(sf, *flags):
    """A server that imports sf at start the way its engine allows: the
    embedded engine by --persistence-path FILE (its data directory beside
    it), the Redis engines by the same flag (no data directory)."""
    return Server("--persistence-path", sf.path, *flags, persistence=False)


def expect_imported(srv, pools):
    c = srv.client()
    for name, (num_pages, _free, pairs) in pools.items():
        rank, ns = pools_of(name)
        keys = [k for k, _ in pairs]
        r = c.post("/%d/get_page_indices" % rank, {"keys": keys, "namespace": ns})
        expect_eq(r.json()["indices"], [p for _, p in pairs], "SGLang pages of " + name)
        r = c.post("/%d/exists" % rank, {"keys": keys, "namespace": ns})
        expect_eq(r.json()["exists"], [True] * len(keys), "SGLang exists of " + name)
        if ns == "kv":
            r = c.post("/keys/get_locations", {"rank": rank, "keys": keys})
            expect_eq(r.json()["locations"], [p for _, p in pairs], "vLLM locations of " + name)
    r = c.post("/keys/batch_exists", {"keys": KV_KEYS + ["absent"]})
    expect_eq(r.json()["exists"], [True] * len(KV_KEYS) + [False], "vLLM batch_exists")
    srv.check()


def test_every_key_is_found_at_its_page_through_both_dialects():
    with StateFile() as sf:
        before = sf.bytes()
        with importing_server(sf) as srv:
            expect_imported(srv, POOLS)
            log = srv.stderr()
        expect_eq(sf.bytes(), before, "SGLang's file is left as it was")
        expect_true("imported pool rank 0 namespace 'kv'" in log and "6 keys owned" in log
                    and "1 reserved for writes in flight" in log,
                    "the log says what was imported:\n" + log)


def test_allocations_get_only_the_pages_no_key_owns():
    with StateFile() as sf, importing_server(sf, "--eviction", "none") as srv:
        c = srv.client()
        for name, (num_pages, _free, pairs) in POOLS.items():
            rank, ns = pools_of(name)
            owned = {p for _, p in pairs}
            new = ["new-%s-%d" % (name, i) for i in range(num_pages - len(owned) + 1)]
            r = c.post("/%d/reserve_and_allocate_page_indices" % rank,
                       {"keys": [[k, None] for k in new], "namespace": ns})
            got = [p for _, p in r.json()["indices"]]
            expect_eq(sorted(got[:-1]), sorted(set(range(num_pages)) - owned),
                      "new keys of %s get exactly the pages no key owns" % name)
            expect_eq(got[-1], -1, "and then nothing (no eviction)")
        srv.check()


def test_the_older_half_of_the_lru_order_is_evicted_first():
    # Read lease 0: only the use counts decide (core.h, core_pool_import: the newer half one use above).
    old, new = sglang_keys(4, 3)[:2], sglang_keys(4, 3)[2:]
    pools = {"0:kv": (4, [], [(old[0], 3), (old[1], 2), (new[0], 1), (new[1], 0)])}
    with StateFile(pools) as sf, importing_server(sf, "--read-lease", "0") as srv:
        c = srv.client()
        for i in range(2):
            r = c.post("/0/reserve_and_allocate_page_indices", {"keys": [["x%d" % i, None]]})
            expect_true(r.json()["indices"][0][1] in (2, 3),
                        "an older key's page is taken: %r" % r.json())
            c.post("/0/confirm_write", {"written_keys_to_confirm":
                                        [["x%d" % i, r.json()["indices"][0][1]]]})
        r = c.post("/0/exists", {"keys": old + new})
        expect_eq(r.json()["exists"], [False, False, True, True], "the newer half stays")
        srv.check()


def test_a_restart_after_an_import_does_not_import_again():
    with StateFile() as sf:
        srv = importing_server(sf)
        srv.start()
        try:
            c = srv.client()
            c.post("/0/delete_keys", {"keys": KV_KEYS[:1]})
            srv.stop()
            if harness.ENGINE == "mem":
                expect_true(os.path.isdir(sf.path + ".hf3fs-metad"),
                            "the data directory is FILE.hf3fs-metad")
            srv.start()
            r = srv.client().post("/0/exists", {"keys": KV_KEYS[:2]})
            expect_eq(r.json()["exists"], [False, True], "the deleted key stays deleted")
            expect_true("not importing" in srv.stderr(), "the log says why:\n" + srv.stderr())
            srv.check()
        finally:
            srv.stop()


def test_a_restart_with_the_same_import_sglang_file_serves_and_a_different_file_is_refused():
    """--import-sglang FILE kept in a unit file: the state records which file
    it imported (size and digest), so the next start with the same file
    serves (the log says "already imported"); another file into the state,
    now not empty, is refused as before."""
    with StateFile() as sf, StateFile(pools={"0:kv": (4, [3], [(KV_KEYS[0], 0)])}) as other, \
            tempfile.TemporaryDirectory() as d:
        # the embedded engine keeps its state in d; over Redis, in the test's database
        flags = ["--import-sglang", sf.path] + (["--data-dir", d] if harness.ENGINE == "mem"
                                                else [])
        srv = Server(*flags, persistence=False)
        srv.start()
        try:
            c = srv.client()
            expect_no_body(c.post("/0/delete_keys", {"keys": KV_KEYS[:1]}), 204)
            srv.stop()
            srv.start()
            r = srv.client().post("/0/exists", {"keys": KV_KEYS[:2]})
            expect_eq(r.json()["exists"], [False, True], "the state of the first start, served")
            expect_true("already imported" in srv.stderr(), "the log says why:\n" + srv.stderr())
            srv.check()
            srv.stop()
            srv.flags[srv.flags.index(sf.path)] = other.path
            expect_refused(other, "not empty", server=srv)
        finally:
            srv.stop()


def expect_refused(sf, reason, *flags, server=None):
    srv = server or Server("--import-sglang", sf.path, *flags)
    try:
        srv.start()
    except ServerError as e:
        text = str(e)
        expect_true("status %d" % EXIT_IMPORT in text and reason in text,
                    "refused with exit status %d and %r:\n%s" % (EXIT_IMPORT, reason, text))
        expect_true("imported pool" not in text, "nothing imported:\n" + text)
        return
    srv.stop()
    raise AssertionError("the import of %s was not refused" % reason)


def test_a_state_that_is_not_empty_refuses_an_explicit_import():
    with StateFile() as sf, tempfile.TemporaryDirectory() as d:
        srv = Server("--data-dir", d, persistence=False)
        srv.start()
        c = srv.client()
        c.post("/3/initialize", {"num_pages": 4, "namespace": "other"})
        c.post("/3/reserve_and_allocate_page_indices",
               {"keys": [["mine", None]], "namespace": "other"})
        srv.stop()
        srv.flags += ["--import-sglang", sf.path]
        expect_refused(sf, "not empty", server=srv)
        srv.flags = ["--data-dir", d]
        srv.start()
        r = srv.client().post("/0/exists", {"keys": KV_KEYS[:1]})
        expect_eq(r.status, 404, "no pool of the file was made")
        srv.stop()


def test_a_malformed_or_inconsistent_file_is_refused():
    k = sglang_keys(3, 4)
    cases = [
        ("not JSON", '{"0:kv": {"num_pages": 4,'),
        ("not SGLang's state", "[1, 2]"),
        ("not an object with num_pages", '{"0:kv": {"num_pages": 4}}'),
        ("not \"rank\" or \"rank:namespace\"", '{"x:kv": {"num_pages": 4, "free_pages": [], '
                                             '"key_to_index": []}}'),
        ("out of range", {"0:kv": (4, [], [(k[0], 4)])}),
        ("owned twice", {"0:kv": (4, [], [(k[0], 1), (k[1], 1)])}),
        ("listed twice", {"0:kv": (4, [], [(k[0], 1), (k[0], 2)])}),
        ("listed twice", {"0": (4, [], []), "0:kv": (4, [], [])}),
    ]
    for reason, content in cases:
        text = content if isinstance(content, str) else None
        with StateFile(content if text is None else None, text) as sf:
            expect_refused(sf, reason)


if __name__ == "__main__":
    harness.main(globals())

"""test_redis_module.py: the Redis module (hf3fs_metad_redis.so) inside a real redis-server.

The HF3FS.* commands of docs/redis-module.md are driven directly (key lists
packed with struct), no front end involved. What is protected:

- the state (HF3FS.CHECK ok, DEBUG DIGEST-VALUE equal) is kept across DEBUG
  RELOAD, a restart from the RDB only, from the AOF only (kill -9 under a load
  of allocations + confirmations: every acknowledged confirmation is there),
  an AOF rewrite without RDB preamble (HF3FS.REBUILD), on a replica, and after
  a slot move (MIGRATE) in a small cluster;
- a primary and its replica agree after 100,000 random operations (reads,
  deletes, clears, leases expiring through the `now` argument) on the
  durable state (the digest: recency is volatile);
- reads reach neither the replicas, nor the AOF, nor Redis's save counter;
  pages read before a restart from the AOF, DEBUG RELOAD, RESTORE or a
  replica's promotion are kept for one read lease, then evictable again;
- changes reach replicas and the AOF as HF3FS.APPLY effects, never as the
  command itself;
- MEMORY USAGE grows with the keys and INFO used_memory counts the core;
  maxmemory reached: HF3FS.ALLOC answers an OOM error while reads still work;
- malformed arguments answer errors, never a crash.

The module is $HF3FS_REDIS_MODULE, else the .so next to $HF3FS_METAD_BIN
(build/ or build/asan/). The ASan one runs with the ASan runtime preloaded:
Debian's redis-server calls malloc from the shared libjemalloc, which the
preloaded runtime replaces, so ASan watches the whole heap, the core's
included (docs/redis-module.md, "Sanitizers").
"""

import glob
import os
import random
import struct
import threading

import harness
from harness import expect_eq, expect_true, wait_for
from redis_server import RedisError, RedisServer, info_fields, module_path

SLOW = harness.SLOWDOWN
CFG = "5000,1000,3000,500,1,100000000,64"  # reservation, read, write, grace, evict, pages, ranks
T0 = 1_700_000_000_000  # the tests' clock (ms), passed as `now`


def kl(keys):
    """A key list argument: per key a u32 little-endian length and its bytes."""
    out = []
    for k in keys:
        k = k.encode() if isinstance(k, str) else k
        out.append(struct.pack("<I", len(k)) + k)
    return b"".join(out)


def pkl(keys, hexchars=None):
    """The packed form of a key list whose keys all begin with `hexchars`
    (32 or 64, default the whole key) lowercase hex characters and end
    in a suffix of one length (wire.h): FF FF FF FF, W, S, the bytes."""
    hexchars = hexchars or len(keys[0])
    suffix = len(keys[0]) - hexchars
    assert all(len(k) == hexchars + suffix for k in keys) and hexchars in (32, 64)
    return b"\xff\xff\xff\xff" + bytes([hexchars // 2, suffix]) + b"".join(
        bytes.fromhex(k[:hexchars]) + k[hexchars:].encode() for k in keys)


def pl(pages):
    """A page list argument: int64 little-endian per page."""
    return struct.pack("<%dq" % len(pages), *pages)


def pages_of(reply):
    return list(struct.unpack("<%dq" % (len(reply) // 8), reply))


def flags_of(reply):
    return list(reply)


def vkey(ns):
    """The value key of namespace ns (wire_value_key)."""
    ns = ns.encode() if isinstance(ns, str) else ns
    return "hf3fs:{%s}" % (ns.hex() if ns else "-")


class ModuleServer(RedisServer):
    """A RedisServer with the module; leaving it fails the test if the
    sanitized module reported anything."""

    def __exit__(self, *exc):
        reports = self.sanitizer_reports()
        super().__exit__(*exc)
        if reports:
            if exc[0]:  # the test failed already (redis died): say why
                print("sanitizer report of the module:\n" + reports[-4000:])
            else:
                harness.fail("sanitizer report of the module:\n" + reports[-4000:])


def server(**kw):
    extra = ["--enable-debug-command", "yes", "--repl-diskless-sync-delay", "0"] + \
        list(kw.pop("extra", []))
    return ModuleServer(loadmodule=True, extra=extra, **kw)


def digest(r, key):
    return r.cmd("DEBUG", "DIGEST-VALUE", key)[0]


def expect_error(fn, prefix):
    try:
        got = fn()
    except RedisError as e:
        expect_true(str(e).startswith(prefix), "error %r should start with %r" % (str(e), prefix))
        return str(e)
    harness.fail("expected an error %r, got %r" % (prefix, got))


class Ns:
    """One namespace's value on one connection."""

    def __init__(self, conn, ns="kv", cfg=CFG):
        self.c, self.ns, self.key, self.cfg = conn, ns, vkey(ns), cfg

    def init(self, rank, num_pages, now=T0):
        return self.c.cmd("HF3FS.INIT", self.key, now, self.cfg, self.ns, rank, num_pages)

    def alloc(self, rank, keys, mode=1, now=T0):
        p, f = self.c.cmd("HF3FS.ALLOC", self.key, now, self.cfg, rank, mode, kl(keys))
        return pages_of(p), flags_of(f)

    def confirm(self, rank, pairs, release=(), now=T0):
        return self.c.cmd("HF3FS.CONFIRM", self.key, now, self.cfg, rank,
                          kl([k for k, _ in pairs]), pl([p for _, p in pairs]), pl(list(release)))

    def exists(self, rank, keys, now=T0):
        return flags_of(self.c.cmd("HF3FS.EXISTS", self.key, now, self.cfg, rank, kl(keys)))

    def lookup(self, rank, keys, now=T0):
        return pages_of(self.c.cmd("HF3FS.LOOKUP", self.key, now, self.cfg, rank, kl(keys)))

    def cexists(self, keys, now=T0):
        return flags_of(self.c.cmd("HF3FS.CEXISTS", self.key, now, self.cfg, kl(keys)))

    def check(self):
        return self.c.cmd("HF3FS.CHECK", self.key)


def workload(ns, rng, steps, now=T0, nkeys=60, ranks=(0, 1)):
    """Random allocations, confirmations, releases, reads, deletes on ns's
    ranks (each initialized with 32 pages); returns the clock at the end."""
    for rank in ranks:
        ns.init(rank, 32, now)
    names = ["key-%d" % i for i in range(nkeys)] + ["h" * 64, bytes(range(1, 40))]
    for _ in range(steps):
        now += rng.randrange(0, 300)
        rank = rng.choice(ranks)
        keys = rng.sample(names, rng.randrange(1, 5))
        op = rng.randrange(10)
        if op < 5:
            pages, _ = ns.alloc(rank, keys, rng.randrange(2), now)
            pairs = [(k, p) for k, p in zip(keys, pages) if p >= 0 and rng.random() < 0.8]
            rel = [p for k, p in zip(keys, pages) if p >= 0 and (k, p) not in pairs]
            ns.confirm(rank, pairs, rel, now)
        elif op < 7:
            ns.exists(rank, keys, now)
        elif op < 8:
            ns.cexists(keys, now)
        elif op < 9:
            ns.lookup(rank, keys, now)
        else:
            ns.c.cmd("HF3FS.DELETE", ns.key, now, ns.cfg, rank, kl(keys))
    return now


def _info_int(r, section, field):
    """An integer field of INFO section."""
    return int(info_fields(r.cmd("INFO", section))[field])


def wait_replica(primary, replica):
    """Until replica has everything primary propagated so far."""
    def caught_up():
        if b"master_link_status:up" not in replica.cmd("INFO", "replication"):
            return False
        return (_info_int(replica, "replication", "slave_repl_offset")
                >= _info_int(primary, "replication", "master_repl_offset"))
    wait_for(caught_up, 30 * SLOW, what="replica caught up")


# -- persistence --------------------------------------------------------------

def test_state_survives_debug_reload():
    with server() as r:
        rng = random.Random(1)
        a, b = Ns(r, "kv"), Ns(r, "other ns")
        now = workload(a, rng, 400)
        workload(b, rng, 200, now)
        before = [digest(r, a.key), digest(r, b.key)]
        expect_eq(r.cmd("DEBUG", "RELOAD"), b"OK")
        expect_eq([digest(r, a.key), digest(r, b.key)], before, "digests after DEBUG RELOAD")
        expect_eq(a.check(), b"OK")
        expect_eq(b.check(), b"OK")
        expect_eq(sorted(r.cmd("HF3FS.NAMESPACES")), [b"kv", b"other ns"])


def test_state_survives_a_restart_from_the_rdb_only():
    with server() as r:
        rng = random.Random(2)
        a = Ns(r, "kv")
        now = workload(a, rng, 500)
        expected = a.lookup(0, ["key-%d" % i for i in range(60)], now)
        before = digest(r, a.key)
        r.cmd("SAVE")
        r.kill9()
        r.start()
        a.c = r
        expect_eq(digest(r, a.key), before, "digest after a restart from the RDB")
        expect_eq(a.check(), b"OK")
        expect_eq(a.lookup(0, ["key-%d" % i for i in range(60)], now), expected,
                  "pages after the restart")


def _load(r, stop, acked, seed):
    """Allocate + confirm fresh keys until stop is set; acked gets every
    (key, page) whose confirmation was answered 0 refused."""
    c = r.connect()
    ns = Ns(c, "kv")
    rng = random.Random(seed)
    n = 0
    try:
        while not stop.is_set():
            keys = ["w%d-%d-%d" % (seed, n, i) for i in range(8)]
            n += 1
            pages, _ = ns.alloc(0, keys, 1, 0)
            pairs = [(k, p) for k, p in zip(keys, pages) if p >= 0]
            if ns.confirm(0, pairs, (), 0) == 0:
                acked.extend(pairs)
            if rng.random() < 0.3:
                ns.exists(0, keys[:2], 0)
    except (OSError, ConnectionError, RedisError):
        pass


def test_every_acknowledged_confirmation_survives_kill9_from_the_aof_only():
    with server(appendonly=True) as r:
        Ns(r, "kv").init(0, 1_000_000, 0)
        stop, acked = threading.Event(), [[], []]
        threads = [threading.Thread(target=_load, args=(r, stop, acked[i], i)) for i in range(2)]
        with harness.running(threads, stop, 30 * SLOW):
            wait_for(lambda: len(acked[0]) + len(acked[1]) > 2000, 30 * SLOW, what="load running")
            r.kill9()
        aof = b"".join(open(f, "rb").read() for f in glob.glob(os.path.join(r.dir, "*", "*.aof")))
        expect_true(b"HF3FS.APPLY" in aof, "the AOF holds effects")
        expect_true(b"HF3FS.ALLOC" not in aof and b"HF3FS.CONFIRM" not in aof,
                    "the AOF holds no command verbatim")
        r.start()
        ns = Ns(r, "kv")
        expect_eq(ns.check(), b"OK")
        pairs = acked[0] + acked[1]
        for i in range(0, len(pairs), 500):
            chunk = pairs[i:i + 500]
            got = ns.lookup(0, [k for k, _ in chunk], 0)
            expect_eq(got, [p for _, p in chunk], "acknowledged confirmations after kill -9")


def test_an_aof_rewrite_without_rdb_preamble_rebuilds_the_state():
    with server(appendonly=True, extra=["--aof-use-rdb-preamble", "no"]) as r:
        rng = random.Random(3)
        a = Ns(r, "kv")
        now = workload(a, rng, 400)
        r.cmd("BGREWRITEAOF")
        wait_for(lambda: b"aof_rewrite_in_progress:0" in r.cmd("INFO", "persistence") and
                 b"aof_rewrite_scheduled:0" in r.cmd("INFO", "persistence"),
                 30 * SLOW, what="AOF rewritten")
        aof = b"".join(open(f, "rb").read() for f in glob.glob(os.path.join(r.dir, "*", "*")))
        expect_true(b"HF3FS.REBUILD" in aof, "the rewritten AOF rebuilds the value")
        workload(a, rng, 100, now)  # and some more changes after the rewrite
        before = digest(r, a.key)
        r.kill9()
        r.start()
        expect_eq(digest(r, a.key), before, "digest after a restart from the rewritten AOF")
        expect_eq(Ns(r, "kv").check(), b"OK")
        expect_error(lambda: r.cmd("HF3FS.REBUILD", a.key, "kv", b"", b""), "ERR HF3FS.REBUILD")


# -- replication --------------------------------------------------------------

def test_a_replica_holds_the_primarys_state():
    with server() as p, server() as rep:
        rng = random.Random(4)
        a = Ns(p, "kv")
        now = workload(a, rng, 300)  # before the sync: a full sync carries it (RDB)
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        wait_replica(p, rep)
        expect_eq(digest(rep, a.key), digest(p, a.key), "digest after the full sync")
        workload(a, rng, 300, now)  # after: the stream of HF3FS.APPLY carries it
        wait_replica(p, rep)
        expect_eq(digest(rep, a.key), digest(p, a.key), "digest after the stream")
        expect_eq(rep.cmd("HF3FS.CHECK", a.key), b"OK")
        expect_eq(rep.cmd("DEBUG", "DIGEST"), p.cmd("DEBUG", "DIGEST"))
        # a client may not send effects itself, to the primary or to the replica
        expect_error(lambda: p.cmd("HF3FS.APPLY", a.key, "kv", b""), "ERR HF3FS.APPLY")
        expect_error(lambda: rep.cmd("HF3FS.APPLY", a.key, "kv", b""), "READONLY")


def _random_commands(rng, now, batch, prev_allocs):
    """batch random commands (and the alloc replies' positions); confirmations
    use the pages that the previous batch's allocations answered."""
    cmds, allocs = [], []
    nss = ["kv", "second"]
    for _ in range(batch):
        # mostly a few ms, now and then past every lease (reservation 5 s)
        now += 6000 if rng.random() < 0.002 else rng.choice((0, 0, 1, 2, 5, 10, 20, 40))
        ns = rng.choice(nss)
        key = vkey(ns)
        rank = rng.randrange(3)
        keys = ["k%d" % rng.randrange(400) for _ in range(rng.randrange(1, 6))]
        op = rng.randrange(100)
        if op < 2:
            cmds.append(("HF3FS.INIT", key, now, CFG, ns, rank, rng.choice((16, 64, 200))))
        elif op < 32:
            allocs.append((len(cmds), ns, rank, keys))
            cmds.append(("HF3FS.ALLOC", key, now, CFG, rank, rng.randrange(2), kl(keys)))
        elif op < 52 and prev_allocs:
            ns, rank, keys, pages = rng.choice(prev_allocs)
            pairs = [(k, p) for k, p in zip(keys, pages) if p >= 0]
            conf = [x for x in pairs if rng.random() < 0.85]
            rel = [p for k, p in pairs if (k, p) not in conf and rng.random() < 0.7]
            cmds.append(("HF3FS.CONFIRM", vkey(ns), now, CFG, rank, kl([k for k, _ in conf]),
                         pl([p for _, p in conf]), pl(rel)))
        elif op < 64:
            cmds.append(("HF3FS.EXISTS", key, now, CFG, rank, kl(keys)))
        elif op < 72:
            cmds.append(("HF3FS.LOOKUP", key, now, CFG, rank, kl(keys)))
        elif op < 80:
            cmds.append(("HF3FS.CEXISTS", key, now, CFG, kl(keys)))
        elif op < 86:
            cmds.append(("HF3FS.CLOC", key, now, CFG, rank, kl(keys)))
        elif op < 94:
            cmds.append(("HF3FS.DELETE", key, now, CFG, rank, kl(keys)))
        elif op < 95:
            cmds.append(("HF3FS.CLEARPOOL", key, now, CFG, rank))
        elif op < 97:
            cmds.append(("HF3FS.PAGES", key, now, rank, rng.randrange(64), 8))
        elif op < 98:
            cmds.append(("HF3FS.STATS", key, now))
        else:
            cmds.append(("HF3FS.INIT", key, now, CFG, ns, rank, 64))
    return cmds, allocs, now


def test_a_primary_and_its_replica_agree_after_100000_random_operations():
    with server() as p, server() as rep:
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        wait_for(lambda: b"master_link_status:up" in rep.cmd("INFO", "replication"),
                 10 * SLOW, what="replica linked")
        rng = random.Random(5)
        conn = p.connect()
        now, prev, done, errors = T0, [], 0, 0
        while done < 100_000:
            cmds, allocs, now = _random_commands(rng, now, 200, prev)
            replies = conn.pipeline(cmds)
            done += len(cmds)
            for r in replies:
                if isinstance(r, RedisError):
                    expect_true(str(r).startswith("ENOPOOL"), "unexpected error %s" % r)
                    errors += 1
            prev = [(ns, rank, keys, pages_of(replies[i][0])) for i, ns, rank, keys in allocs
                    if not isinstance(replies[i], RedisError)]
        wait_replica(p, rep)
        for ns in ("kv", "second"):
            expect_eq(p.cmd("HF3FS.CHECK", vkey(ns)), b"OK")
            expect_eq(rep.cmd("HF3FS.CHECK", vkey(ns)), b"OK")
            expect_eq(digest(rep, vkey(ns)), digest(p, vkey(ns)), "digest of %s" % ns)
        expect_eq(rep.cmd("DEBUG", "DIGEST"), p.cmd("DEBUG", "DIGEST"))
        stats = p.cmd("HF3FS.STATS", vkey("kv"), now) + p.cmd("HF3FS.STATS", vkey("second"), now)
        total = [sum(s[i] for s in stats) for i in range(len(stats[0]))]
        print("  owned %d, confirmations %d, evictions %d, expired reservations %d, "
              "write leases %d (expired %d), ENOPOOL %d" % (total[4], total[11], total[13],
                                                           total[14], total[16], total[18],
                                                           errors))
        expect_true(total[4] > 0 and total[11] > 1000 and total[13] > 0 and total[14] > 0 and
                    total[16] > 0, "the operations did something: %r" % total)
        expect_true(errors < 5000, "mostly initialized pools (%d ENOPOOL)" % errors)
        # promoted, the replica answers reads as the primary and hands out the
        # free pages the primary would; within the read lease after its
        # promotion it evicts nothing (reads on the primary were not sent)
        rep.cmd("REPLICAOF", "NO", "ONE")
        a, b = Ns(p, "kv"), Ns(rep, "kv")
        old = ["k%d" % i for i in range(400)]
        expect_eq(b.lookup(0, old, now + 1), a.lookup(0, old, now + 1), "lookups after promotion")
        free = [row[2] for row in rep.cmd("HF3FS.STATS", vkey("kv"), now + 1) if row[0] == 0][0]
        keys = ["fresh-%d" % i for i in range(free + 5)]
        (pa, fa), (pb, fb) = a.alloc(0, keys, 0, now + 1), b.alloc(0, keys, 0, now + 1)
        expect_eq(pb[:free], pa[:free], "the free pages, in the primary's order")
        expect_eq(pb[free:], [-1] * 5, "no eviction in the read lease after the promotion")
        expect_eq(fb, fa, "hits")


# -- reads are volatile ---------------------------------------------------------

def promoted_replica_settles(module_args):
    """An ALLOC with an id (7) on the primary, replicated; the replica
    promoted: how many reservations HF3FS.SETTLE of that id frees there,
    and that its state matches the primary's first."""
    with server(module_args=module_args) as p, server(module_args=module_args) as rep:
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        wait_replica(p, rep)
        a = Ns(p, "kv")
        a.init(0, 8)
        p.cmd("HF3FS.ALLOC", a.key, T0, CFG, 0, 1, kl(["s1", "s2", "s3"]), 7)
        wait_replica(p, rep)
        expect_eq(digest(rep, a.key), digest(p, a.key), "the replica has the reservations")
        expect_eq(rep.cmd("REPLICAOF", "NO", "ONE"), b"OK")
        return rep.cmd("HF3FS.SETTLE", a.key, T0, CFG, 0, 7)


def test_a_promoted_replica_settles_an_allocation_only_with_settle_replicate():
    """Loaded with settle-replicate, the primary sends HF3FS.NOTE: the
    promoted replica frees the allocation's 3 reservations. Without it
    (where a replica's module may not know NOTE), nothing of NOTE reaches
    the replica, and SETTLE there frees none."""
    expect_eq(promoted_replica_settles(["settle-replicate"]), 3, "settled with NOTEs")
    expect_eq(promoted_replica_settles([]), 0, "settled without NOTEs")


def test_reads_reach_neither_the_replicas_nor_the_aof_nor_the_save_counter():
    with server(appendonly=True, extra=["--repl-ping-replica-period", "3600"]) as p, \
            server() as rep:
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        a = Ns(p, "kv")
        keys = ["%032x" % i for i in range(128)]  # vLLM's keys: MD5 hex
        for rank in (0, 1):
            a.init(rank, 256)
            pages, _ = a.alloc(rank, keys)
            expect_eq(a.confirm(rank, list(zip(keys, pages))), 0)
        wait_replica(p, rep)

        def marks():
            aof = sum(os.path.getsize(f) for f in glob.glob(os.path.join(p.dir, "*", "*.aof")))
            return {"master_repl_offset": _info_int(p, "replication", "master_repl_offset"),
                    "rdb_changes_since_last_save":
                        _info_int(p, "persistence", "rdb_changes_since_last_save"),
                    "aof bytes": aof}
        before = marks()
        for i in range(50):  # every read, and an allocation of hits only (SGLang)
            now = T0 + i
            expect_eq(a.cexists(keys, now), [1] * 128)
            expect_eq(len(pages_of(p.cmd("HF3FS.CLOC", a.key, now, CFG, 1, kl(keys)))), 128)
            expect_eq(a.exists(0, keys, now), [1] * 128)
            expect_eq(min(a.lookup(1, keys, now)), 0)
            expect_eq(a.alloc(0, keys, 0, now)[1], [1] * 128)
        expect_eq(marks(), before, "after 250 reads")
        # a change still goes everywhere
        a.confirm(0, [], [a.alloc(0, ["new"], 0, T0 + 60)[0][0]], T0 + 60)
        after = marks()
        expect_true(all(after[k] > before[k] for k in before), "a change: %r" % after)


def _lease_across(rebuild):
    """Keys a, b of a full 2-page pool are read on the primary (read lease
    1 s, to T0 + 1010); rebuild(primary, replica) answers the node that then
    serves: within one read lease of its first command nothing is evicted,
    after it the clock takes a page again."""
    with server(appendonly=True) as p, server() as rep:
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        a = Ns(p, "kv")
        a.init(0, 2)
        pages, _ = a.alloc(0, ["a", "b"], 1, T0)
        expect_eq(a.confirm(0, list(zip(["a", "b"], pages)), (), T0), 0)
        expect_eq(a.exists(0, ["a", "b"], T0 + 10), [1, 1])  # workers read a and b
        wait_replica(p, rep)
        n = Ns(rebuild(p, rep), "kv")
        expect_eq(n.alloc(0, ["c"], 0, T0 + 20), ([-1], [0]))  # its lease: to T0 + 1020
        expect_eq(n.lookup(0, ["a", "b"], T0 + 20), pages, "the read keys are kept")
        got, _ = n.alloc(0, ["c"], 0, T0 + 1020)
        expect_true(got[0] in pages, "after the lease the clock evicts: %r" % got)
        expect_eq(n.check(), b"OK")


def _restart_from_the_aof(p, rep):
    p.kill9()
    p.start()
    return p


def _debug_reload(p, rep):
    expect_eq(p.cmd("DEBUG", "RELOAD"), b"OK")
    return p


def _dump_and_restore(p, rep):
    key = vkey("kv")
    blob = p.cmd("DUMP", key)
    p.cmd("DEL", key)
    expect_eq(p.cmd("RESTORE", key, 0, blob), b"OK")
    return p


def _promote_the_replica(p, rep):
    expect_eq(rep.cmd("REPLICAOF", "NO", "ONE"), b"OK")
    return rep


def test_pages_read_before_a_restart_from_the_aof_are_kept_for_one_read_lease():
    _lease_across(_restart_from_the_aof)


def test_pages_read_before_debug_reload_are_kept_for_one_read_lease():
    _lease_across(_debug_reload)


def test_pages_read_before_a_restore_are_kept_for_one_read_lease():
    _lease_across(_dump_and_restore)


def test_pages_read_on_the_primary_are_kept_for_one_read_lease_by_a_promoted_replica():
    _lease_across(_promote_the_replica)


# -- cluster ------------------------------------------------------------------

def _cluster_node():
    return server(extra=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "2000"])


def test_a_slot_move_keeps_the_value_and_its_digest():
    with _cluster_node() as a, _cluster_node() as b:
        a.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        b.cmd("CLUSTER", "MEET", "127.0.0.1", str(a.port))
        wait_for(lambda: all(b"cluster_state:ok" in n.cmd("CLUSTER", "INFO") and
                             len(n.cmd("CLUSTER", "NODES").splitlines()) == 2 for n in (a, b)),
                 30 * SLOW, what="cluster ok")
        rng = random.Random(6)
        ns = Ns(a, "kv")
        now = workload(ns, rng, 400, ranks=(0, 1, 2))
        before = digest(a, ns.key)
        slot = a.cmd("CLUSTER", "KEYSLOT", ns.key)
        ida, idb = a.cmd("CLUSTER", "MYID").decode(), b.cmd("CLUSTER", "MYID").decode()
        b.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", ida)
        a.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", idb)
        expect_eq(a.cmd("MIGRATE", "127.0.0.1", str(b.port), ns.key, "0", "5000"), b"OK")
        for n in (b, a):
            n.cmd("CLUSTER", "SETSLOT", slot, "NODE", idb)
        expect_eq(a.cmd("DBSIZE"), 0)
        expect_eq(digest(b, ns.key), before, "digest after MIGRATE")
        expect_eq(b.cmd("HF3FS.CHECK", ns.key), b"OK")
        expect_error(lambda: a.cmd("HF3FS.CHECK", ns.key), "MOVED")
        nb = Ns(b, "kv")
        workload(nb, rng, 50, now, ranks=(0, 1, 2))  # and it keeps working there
        expect_eq(nb.check(), b"OK")


# -- memory -------------------------------------------------------------------

def test_memory_usage_grows_with_the_keys_and_used_memory_counts_it():
    with server() as r:
        ns = Ns(r, "kv")
        ns.init(0, 2_000_000)
        base_usage = r.cmd("MEMORY", "USAGE", ns.key)
        base_used = int(r.cmd("INFO", "memory").decode().split("used_memory:")[1].split()[0])
        conn = r.connect()
        total = 0
        figures = []
        for target in (10_000, 100_000, 1_000_000 if SLOW == 1 else 200_000):
            while total < target:
                cmds = []
                for _ in range(10):
                    keys = ["%032x" % (total + i) for i in range(1000)]
                    cmds.append(("HF3FS.ALLOC", ns.key, 0, CFG, 0, 1, kl(keys)))
                    total += 1000
                replies = conn.pipeline(cmds)
                confirms = []
                for (_, _, _, _, _, _, keys), rep in zip(cmds, replies):
                    confirms.append(("HF3FS.CONFIRM", ns.key, 0, CFG, 0, keys, rep[0], b""))
                for rep in conn.pipeline(confirms):
                    expect_eq(rep, 0, "confirmations refused")
            usage = r.cmd("MEMORY", "USAGE", ns.key)
            used = int(r.cmd("INFO", "memory").decode().split("used_memory:")[1].split()[0])
            figures.append((total, usage, used))
            expect_true(usage > base_usage, "MEMORY USAGE grows")
            # used_memory sees the core: it grew at least by most of what the value holds
            expect_true(used - base_used >= 0.8 * (usage - base_usage),
                        "used_memory %d -> %d, value %d -> %d" % (base_used, used, base_usage,
                                                                    usage))
        for n, usage, used in figures:
            print("  %d keys: MEMORY USAGE %d (%.1f bytes/key), used_memory +%d (%.1f bytes/key)"
                  % (n, usage, (usage - base_usage) / n, used - base_used,
                     (used - base_used) / n))
        expect_true(figures[-1][1] > figures[0][1], "grows with keys")


def test_maxmemory_reached_alloc_answers_oom_and_reads_still_work():
    with server() as r:
        ns = Ns(r, "kv")
        ns.init(0, 10_000_000)
        pages, _ = ns.alloc(0, ["first"])
        expect_eq(ns.confirm(0, [("first", pages[0])]), 0)
        used = int(r.cmd("INFO", "memory").decode().split("used_memory:")[1].split()[0])
        r.cmd("CONFIG", "SET", "maxmemory", str(used + 4 * 1024 * 1024))
        n, oom, reserved = 0, None, None
        while oom is None and n < 2_000_000:
            keys = ["%032x" % (n + i) for i in range(1000)]
            n += 1000
            try:
                got, _ = ns.alloc(0, keys)
                reserved = (keys, got)
                ns.confirm(0, list(zip(keys, got))[:900])
            except RedisError as e:
                oom = str(e)
        expect_true(oom is not None and oom.startswith("OOM"), "OOM error, got %r" % oom)
        expect_eq(r.cmd("PING"), b"PONG")
        expect_eq(ns.exists(0, ["first", "nope"]), [1, 0])
        expect_eq(ns.lookup(0, ["first"]), pages)
        # a confirmation of pages reserved before is not refused
        keys, got = reserved
        expect_eq(ns.confirm(0, list(zip(keys, got))[900:]), 0)
        expect_eq(ns.cexists(["first"]), [1])
        expect_eq(ns.check(), b"OK")
        r.cmd("HF3FS.DELETE", ns.key, 0, CFG, 0, kl(["first"]))
        r.cmd("CONFIG", "SET", "maxmemory", "0")
        ns.alloc(0, ["after"])


# -- arguments ----------------------------------------------------------------

def test_malformed_arguments_answer_errors():
    with server() as r:
        ns = Ns(r, "kv")
        k = ns.key
        # a missing value
        for cmd in (("HF3FS.ALLOC", k, 0, CFG, 0, 1, kl(["a"])),
                    ("HF3FS.CONFIRM", k, 0, CFG, 0, kl(["a"]), pl([0]), b""),
                    ("HF3FS.EXISTS", k, 0, CFG, 0, kl(["a"])),
                    ("HF3FS.LOOKUP", k, 0, CFG, 0, kl(["a"])),
                    ("HF3FS.DELETE", k, 0, CFG, 0, kl(["a"])),
                    ("HF3FS.CLEARPOOL", k, 0, CFG, 0),
                    ("HF3FS.CLOC", k, 0, CFG, 0, kl(["a"])),
                    ("HF3FS.STATS", k, 0), ("HF3FS.CHECK", k), ("HF3FS.PAGES", k, 0, 0, 0, 1)):
            expect_error(lambda: r.cmd(*cmd), "ENOPOOL")
        expect_eq(ns.cexists(["a", "b"]), [0, 0])
        expect_eq(r.cmd("HF3FS.NAMESPACES"), [])
        # limits of the cfg: nothing created
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, "1,1,1,1,1,100,4", "kv", 0, 101), "EINVAL")
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, "1,1,1,1,1,100,4", "kv", 4, 10), "EINVAL")
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, CFG, "kv", -1, 10), "EINVAL")
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, CFG, "kv", 1 << 32, 10), "EINVAL")
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, CFG, "kv", 0, -5), "EINVAL")
        expect_eq(r.cmd("EXISTS", k), 0)
        expect_error(lambda: r.cmd("HF3FS.INIT", "hf3fs:{6b77}", 0, CFG, "kv", 0, 8), "ERR")
        expect_eq(ns.init(0, 8), [1, 8])
        expect_eq(ns.init(0, 16), [0, 8])
        expect_error(lambda: r.cmd("HF3FS.INIT", k, 0, CFG, "kw", 0, 8), "ERR")
        bad = [
            ("HF3FS.ALLOC", k, "x", CFG, 0, 1, kl(["a"])),
            ("HF3FS.ALLOC", k, -1, CFG, 0, 1, kl(["a"])),
            ("HF3FS.ALLOC", k, 0, "1,2,3", 0, 1, kl(["a"])),
            ("HF3FS.ALLOC", k, 0, CFG + ",9", 0, 1, kl(["a"])),
            ("HF3FS.ALLOC", k, 0, CFG, "r", 1, kl(["a"])),
            ("HF3FS.ALLOC", k, 0, CFG, 0, 2, kl(["a"])),
            ("HF3FS.ALLOC", k, 0, CFG, 0, 1, b"\x05\x00\x00\x00ab"),
            ("HF3FS.ALLOC", k, 0, CFG, 0, 1, b"\x01\x00"),
            ("HF3FS.ALLOC", k, 0, CFG, 0, 1, kl(["a", ""])),
            ("HF3FS.CONFIRM", k, 0, CFG, 0, kl(["a", "b"]), pl([1]), b""),
            ("HF3FS.CONFIRM", k, 0, CFG, 0, kl(["a"]), pl([1]) + b"x", b""),
            ("HF3FS.CONFIRM", k, 0, CFG, 0, kl(["a"]), pl([1]), b"1234567"),
            ("HF3FS.PAGES", k, 0, 0, -1, 1),
            ("HF3FS.APPLY", k, "kv", b"\x03"),
            ("HF3FS.REBUILD", k, "kv", b"", b""),
        ]
        for cmd in bad:
            expect_error(lambda: r.cmd(*cmd), "E")
        for cmd in (("HF3FS.ALLOC", k), ("HF3FS.INIT",), ("HF3FS.CHECK", k, "x"),
                    ("HF3FS.NAMESPACES", "x"), ("HF3FS.CLEARALL", "x")):
            expect_error(lambda: r.cmd(*cmd), "ERR wrong number of arguments")
        # out-of-range pages are refused items, not errors
        expect_eq(ns.confirm(0, [("a", 99), ("b", -7)], [1 << 40]), 3)
        r.cmd("SET", "plain", "x")
        expect_error(lambda: r.cmd("HF3FS.ALLOC", "plain", 0, CFG, 0, 1, kl(["a"])), "WRONGTYPE")
        expect_error(lambda: r.cmd("HF3FS.CEXISTS", "plain", 0, CFG, kl(["a"])), "WRONGTYPE")
        # random garbage in every position: errors or answers, never a crash
        rng = random.Random(7)
        names = ["HF3FS.INIT", "HF3FS.ALLOC", "HF3FS.CONFIRM", "HF3FS.EXISTS", "HF3FS.LOOKUP",
                 "HF3FS.DELETE", "HF3FS.CLEARPOOL", "HF3FS.CEXISTS", "HF3FS.CLOC", "HF3FS.STATS",
                 "HF3FS.CHECK", "HF3FS.PAGES", "HF3FS.APPLY", "HF3FS.REBUILD"]
        pieces = [b"", b"0", b"-1", b"1", b"18446744073709551616", CFG.encode(), b"kv",
                  kl(["a", "b"]), pl([0, 1]), b"\xff" * 9, b"\x00\x00\x00\x00", b"1,2"]
        conn = r.connect()
        cmds = []
        for _ in range(3000):
            args = [rng.choice(pieces) if rng.random() < 0.8 else
                    bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
                    for _ in range(rng.randrange(0, 8))]
            cmds.append((rng.choice(names), k) + tuple(args))
        conn.pipeline(cmds)
        expect_eq(r.cmd("PING"), b"PONG")
        expect_eq(ns.check(), b"OK")
        expect_eq(r.cmd("HF3FS.CLEARALL"), 1)
        expect_eq(r.cmd("EXISTS", k), 0)
        expect_eq(r.cmd("GET", "plain"), b"x")


def test_a_packed_key_list_names_the_same_keys_as_its_general_form():
    """Front ends send hex digests packed (half the bytes); keys written in
    one form are the same keys read, located and deleted in the other."""
    rng = random.Random(11)
    with server() as r:
        ns = Ns(r, "kv")
        ns.init(0, 64)
        ns.init(1, 64)
        def digests(chars):
            return ["".join(rng.choice("0123456789abcdef") for _ in range(chars))
                    for _ in range(6)]
        md5, sha = digests(32), digests(64)
        mha = [d + "-k" for d in digests(64)]  # SGLang's keys of an MHA model's pages
        k = ns.key
        for keys, hexchars in ((md5, 32), (sha, 64), (mha, 64)):
            mine = keys[:4]  # written in the general form, on both ranks
            for rank in (0, 1):
                pages, _ = ns.alloc(rank, mine)
                expect_eq(ns.confirm(rank, list(zip(mine, pages))), 0)
            # read in the packed form: the same answers as the general one
            expect_eq(flags_of(r.cmd("HF3FS.EXISTS", k, T0, CFG, 0, pkl(keys, hexchars))),
                      ns.exists(0, keys))
            expect_eq(flags_of(r.cmd("HF3FS.EXISTS", k, T0, CFG, 0, pkl(keys, hexchars))),
                      [1, 1, 1, 1, 0, 0])
            expect_eq(flags_of(r.cmd("HF3FS.CEXISTS", k, T0, CFG, pkl(keys, hexchars))),
                      [1, 1, 1, 1, 0, 0])
            expect_eq(pages_of(r.cmd("HF3FS.LOOKUP", k, T0, CFG, 1, pkl(keys, hexchars))),
                      ns.lookup(1, keys))
            # allocated in the packed form: not a second key
            p, _ = r.cmd("HF3FS.ALLOC", k, T0, CFG, 0, 1, pkl(keys, hexchars))
            expect_eq(pages_of(p)[:4], ns.lookup(0, mine))
            r.cmd("HF3FS.DELETE", k, T0, CFG, 0, pkl(mine[:2], hexchars))
            expect_eq(ns.exists(0, mine), [0, 0, 1, 1])
        expect_eq(ns.check(), b"OK")
        # a packed list that is cut, of another width, or a head alone: refused
        for bad in (pkl(md5)[:-1], pkl(sha)[:-5], pkl(mha, 64)[:-1],
                    b"\xff\xff\xff\xff\x11\x00" + bytes(17),
                    b"\xff\xff\xff\xff\x10\x09" + bytes(25), b"\xff\xff\xff\xff"):
            expect_error(lambda: r.cmd("HF3FS.EXISTS", k, T0, CFG, 0, bad), "ERR malformed")


def test_stats_answers_the_coarse_curve_unless_a_front_end_asks_for_the_fine_one():
    """HF3FS.STATS key now answers the estimate at the 5 scales 0.25 to 4, the
    row a front end of the previous release reads; with FINE (the capability
    "fine-curve", which HF3FS.VERSION lists) at the 21 scales 1/8 to 4, of
    which the 5 are every fourth from the fifth."""
    with server() as r:
        caps = r.cmd("HF3FS.VERSION")
        caps = caps[caps.index(b"capabilities") + 1]
        expect_true(b"fine-curve" in caps, "HF3FS.VERSION lists fine-curve: %r" % caps)
        ns = Ns(r, "kv")
        ns.init(0, 64)
        keys = ["key-%d" % i for i in range(40)]
        pages, _ = ns.alloc(0, keys)
        expect_eq(ns.confirm(0, list(zip(keys, pages))), 0)
        for i in range(30):  # cyclic reads: hits at the larger scales only
            ns.cexists(keys[i % 4 * 10:i % 4 * 10 + 10])
        coarse, = r.cmd("HF3FS.STATS", ns.key, T0)
        fine, = r.cmd("HF3FS.STATS", ns.key, T0, "FINE")
        expect_eq(len(fine), len(coarse) + 16, "21 scales against 5")
        head = len(coarse) - 5
        expect_eq(coarse[:head], fine[:head], "the pool's figures and the sampled blocks")
        expect_eq(coarse[head:], fine[head + 4::4], "the 5 scales are the fine curve's 0.25..4")
        expect_true(fine[-1] > 0 and fine[head] < fine[-1],
                    "hits climb with the scale: %r" % fine[head:])
        expect_error(lambda: r.cmd("HF3FS.STATS", ns.key, T0, "FINER"), "ERR HF3FS.STATS")
        expect_error(lambda: r.cmd("HF3FS.STATS", ns.key, T0, "FINE", "x"),
                     "ERR wrong number of arguments")


def test_clearall_deletes_this_nodes_values_on_its_replica_too():
    with server() as p, server() as rep:
        rep.cmd("REPLICAOF", "127.0.0.1", str(p.port))
        for name in ("kv", "a", ""):
            Ns(p, name).init(0, 4)
        wait_replica(p, rep)
        expect_eq(sorted(rep.cmd("HF3FS.NAMESPACES")), [b"", b"a", b"kv"])
        expect_eq(p.cmd("HF3FS.CLEARALL"), 3)
        wait_replica(p, rep)
        expect_eq(rep.cmd("DBSIZE"), 0)
        expect_eq(p.cmd("HF3FS.NAMESPACES"), [])


if __name__ == "__main__":
    if not os.path.exists(module_path()):
        print("FAIL setup: module %s does not exist (make builds it)" % module_path())
        print("0 passed, 1 failed")
        raise SystemExit(1)
    harness.main(globals())

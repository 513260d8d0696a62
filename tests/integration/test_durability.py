"""test_durability.py: the state survives restarts, kill -9 and a failing disk.

Each test keeps its data directory in its own temporary directory and starts
hf3fs-metad on it (with --data-dir) as many times as it needs. See
docs/durability.md and the header comment of src/wal/wal.c.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import (Server, disk_fault_env, expect_eq, expect_error, expect_status, expect_true, s_alloc,
                     s_confirm, s_delete, s_exists, s_init, s_pages, v_alloc, v_confirm, v_exists,
                     v_init, v_locations, wait_for)

SLOW = harness.SLOWDOWN


class DataDir:
    """A data directory that outlives the servers started on it."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="hf3fs-durability-")
        self.path = os.path.join(self.root, "data")

    def start(self, *flags, env=None):
        return Server("--data-dir", self.path, *flags, persistence=False, env=env).start()

    def serve(self, *flags, env=None):
        """start(), and a client of the server: (server, client)."""
        srv = self.start(*flags, env=env)
        return srv, srv.client()

    def files(self):
        return sorted(os.listdir(self.path))

    def segments(self):
        return [f for f in self.files() if f.endswith(".wal")]

    def last_segment(self):
        """The path of the newest log segment."""
        return os.path.join(self.path, self.segments()[-1])

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def kill9(srv):
    """SIGKILL the server (no shutdown, no final snapshot) and forget it."""
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    srv._reap()
    srv._cleanup_dir()


def own_each(c, n):
    """Keys k0..k<n-1> of rank 0 each allocated and confirmed by requests of
    their own (records of their own); {key: page}."""
    owned = {}
    for i in range(n):
        key = "k%d" % i
        owned[key] = s_alloc(c, 0, [key])[0][1]
        s_confirm(c, 0, [(key, owned[key])])
    return owned


def expect_acked_after_restart(d, acked, pages_of, what):
    """Serve d again: every acknowledged key (acked: key -> page) has its
    page, as pages_of(client, rank 0, keys) reads it, and the pools hold."""
    srv, c = d.serve()
    names = sorted(acked)
    expect_eq(pages_of(c, 0, names), [acked[k] for k in names], what)
    srv.check()
    srv.stop()


def run_server_expecting_exit(data_dir, *flags, timeout=10 * SLOW):
    """Start the binary on data_dir; it must exit by itself. (code, stderr)."""
    args = [os.path.abspath(harness.BIN), "--host", "127.0.0.1", "--port", "0",
            "--data-dir", data_dir] + list(flags)
    try:
        p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server started on %s instead of refusing" % data_dir)
    return p.returncode, p.stderr.decode("utf-8", "replace")


# -- a state with every kind of thing in it --------------------------------

HEX = ["%064x" % (0xabc0000 + i) for i in range(12)]


def snapshot_of(srv):
    """Per-pool figures from /v1/stats."""
    out = {}
    for key, p in srv.stats().items():
        out[key] = tuple(p[f] for f in ("num_pages", "free", "reserved", "owned", "draining",
                                         "keys"))
    return out


def check_round_trip(restart):
    with DataDir() as d:
        srv, c = d.serve("--read-lease", "0.3")
        v_init(c, 0, 16)
        v_init(c, 1, 16)
        vpages = {}
        for rank in (0, 1):
            pages = v_alloc(c, rank, HEX[:6])
            v_confirm(c, rank, list(zip(HEX[:5], pages[:5])))  # HEX[5] stays reserved
            vpages[rank] = pages
        s_init(c, 0, 4, ns="clock")
        got = s_alloc(c, 0, ["a", "b", "c", "d"], ns="clock")
        clock_pages = {k: p for k, (_, p) in zip("abcd", got)}
        s_confirm(c, 0, list(clock_pages.items()), ns="clock")
        s_exists(c, 0, ["a", "b"], ns="clock")  # uses: volatile, not logged
        s_init(c, 3, 8, ns="other")
        res = s_alloc(c, 3, ["r1", "r2", "key with spaces/and:colons"], ns="other")
        s_confirm(c, 3, [("r1", res[0][1])], ns="other")  # r2 and the third stay reserved
        before = snapshot_of(srv)
        srv = restart(d, srv)
        c = srv.client()
        expect_eq(snapshot_of(srv), before, "per-pool figures after the restart")
        srv.check()
        # Reservations survived: their confirmations are accepted.
        v_confirm(c, 0, [(HEX[5], vpages[0][5])])
        v_confirm(c, 1, [(HEX[5], vpages[1][5])])
        s_confirm(c, 3, [("r2", res[1][1])], ns="other")
        expect_eq(v_locations(c, 0, HEX[:6]), vpages[0][:6], "vLLM rank 0 pages")
        expect_eq(s_pages(c, 3, ["r1", "r2"], ns="other"), [res[0][1], res[1][1]],
                  "SGLang pages after confirming a reservation made before the restart")
        # Recency starts again (core.h "What is durable"): after the read
        # lease every page has after recovery, the clock takes pages from its
        # hand (page 0, where it was) on, whatever was read before.
        time.sleep(0.4)  # the recovery's read lease (0.3 s) is over
        new = s_alloc(c, 0, ["x", "y"], ns="clock")
        expect_eq(sorted(p for _, p in new), [0, 1], "pages the clock takes after a restart")
        expect_eq(s_pages(c, 0, ["a", "b", "c", "d"], ns="clock"),
                  [None if clock_pages[k] in (0, 1) else clock_pages[k] for k in "abcd"],
                  "keys left after eviction")
        srv.check()
        srv.stop()


def clean_restart(d, srv):
    srv.stop()
    files = d.files()
    expect_true(not d.segments() and sum(f.endswith(".snap") for f in files) == 1,
                "a clean shutdown leaves one snapshot and no log: %r" % files)
    return d.start("--read-lease", "0.3")


def kill_restart(d, srv):
    kill9(srv)
    expect_true(d.segments(), "kill -9 leaves the log: %r" % d.files())
    return d.start("--read-lease", "0.3")


def test_state_with_owned_keys_reservations_and_clock_hand_survives_a_clean_restart():
    check_round_trip(clean_restart)


def test_state_with_owned_keys_reservations_and_clock_hand_survives_kill_9():
    check_round_trip(kill_restart)


def test_pages_read_before_kill_9_are_not_handed_out_within_the_read_lease_and_are_after():
    def scenario(lease):
        with DataDir() as d:
            flags = ("--read-lease", "%.3f" % lease)
            srv, c = d.serve(*flags)
            s_init(c, 0, 2)
            got = s_alloc(c, 0, ["a", "b"])
            pages = [got[0][1], got[1][1]]
            s_confirm(c, 0, [("a", pages[0]), ("b", pages[1])])
            expect_eq(s_exists(c, 0, ["a", "b"]), [True, True], "exists")  # workers read a, b
            kill9(srv)  # the read leases were in memory only
            w = harness.LeaseWindow(lease)
            srv, c = d.serve(*flags)
            during = s_alloc(c, 0, ["c"])
            w.fits()
            # every owned page is read-leased for one lease after recovery
            expect_eq(during, [(False, -1)], "allocation in the read lease after recovery")
            expect_eq(s_pages(c, 0, ["a", "b"]), pages, "read keys kept")
            w.sleep_past()
            after = s_alloc(c, 0, ["c"])
            expect_true(after[0][1] in pages, "after the lease the clock evicts: %r" % (after,))
            srv.check()
            srv.stop()
    harness.with_lease(scenario, 1.0 * SLOW)


def test_a_read_only_load_writes_nothing_to_the_log():
    with DataDir() as d:
        srv, c = d.serve()
        keys = ["%032x" % i for i in range(128)]  # vLLM's keys: MD5 hex
        for rank in (0, 1):
            v_init(c, rank, 256)
            v_confirm(c, rank, list(zip(keys, v_alloc(c, rank, keys))))
        s_init(c, 0, 64, ns="sg")
        got = s_alloc(c, 0, keys[:8], ns="sg")
        s_confirm(c, 0, [(k, p) for k, (_, p) in zip(keys[:8], got)], ns="sg")

        def log_bytes():
            r = c.get("/v1/stats")
            expect_status(r, 200)
            return r.json()["server"]["persistence"]["log_bytes"]
        before = log_bytes()
        for _ in range(50):
            expect_eq(v_exists(c, keys), [True] * 128, "batch_exists")
            expect_eq(len(v_locations(c, 1, keys)), 128, "get_locations")
            expect_eq(s_exists(c, 0, keys[:8], ns="sg"), [True] * 8, "exists")
            expect_eq(len(s_pages(c, 0, keys[:8], ns="sg")), 8, "get_page_indices")
            expect_eq([e for e, _ in s_alloc(c, 0, keys[:8], ns="sg")], [True] * 8,
                      "an SGLang allocation of hits only")
        expect_eq(log_bytes(), before, "log bytes after 250 reads")
        srv.stop()


def test_reservation_deadlines_are_wall_clock_so_a_restart_neither_extends_nor_cuts_them():
    with DataDir() as d:
        flags = ("--reservation-timeout", str(2.0 * SLOW))
        srv, c = d.serve(*flags)
        s_init(c, 0, 8)
        t0 = time.monotonic()
        early = s_alloc(c, 0, ["early"])[0][1]
        kill9(srv)
        srv, c = d.serve(*flags)
        late = s_alloc(c, 0, ["late"])[0][1]
        s_confirm(c, 0, [("late", late)])  # within its lease: accepted
        expect_eq(s_pages(c, 0, ["late"]), [late], "a reservation confirmed in time")
        kill9(srv)
        wait_for(lambda: time.monotonic() - t0 > 2.0 * SLOW + 0.3, 10 * SLOW,
                 what="the first reservation's deadline")
        srv, c = d.serve(*flags)
        s_confirm(c, 0, [("early", early)])  # expired while the server was down: refused
        expect_eq(s_pages(c, 0, ["early", "late"]), [None, late],
                  "an expired reservation stays expired after a restart")
        srv.check()
        srv.stop()


def test_a_failing_write_answers_507_then_503_with_detail_reads_go_on_and_nothing_acked_is_lost():
    check_fault("write-fail-after=0,snapshot-fail")


def test_a_failing_sync_answers_507_then_503_with_detail_reads_go_on_and_nothing_acked_is_lost():
    check_fault("sync-fail-after=0,snapshot-fail")


def check_fault(items):
    with DataDir() as d:
        full = os.path.join(d.root, "disk-full")
        env = disk_fault_env("while-exists=%s,%s" % (full, items))
        srv, c = d.serve(env=env)
        v_init(c, 0, 64)
        acked = {}
        for i in range(10):
            key = "acked-%d" % i
            page = v_alloc(c, 0, [key])[0]
            v_confirm(c, 0, [(key, page)])
            acked[key] = page
        open(full, "w").close()  # the disk fails
        # The change that meets the failure took effect in memory: 507, which
        # the stock clients do not resend (they resend on 500/502/503/504).
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["uncertain-1"]})
        body = expect_error(r, 507)
        expect_true("may or may not survive" in body["detail"],
                    "the 507 says why: %r" % body["detail"])
        # Later changes are refused before anything changes: 503, retryable.
        r = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["refused-1"]})
        body = expect_error(r, 503)
        expect_true("write-ahead log" in body["detail"],
                    "the 503 says why: %r" % body["detail"])
        r = c.post("/keys/confirm_write", {"rank": 0, "confirmations": [["acked-0", 0]]})
        expect_error(r, 503)
        r = c.post("/0/initialize", {"num_pages": 4, "namespace": "new"})
        expect_error(r, 503)
        # Reads go on.
        names = sorted(acked)
        expect_eq(v_locations(c, 0, names), [acked[k] for k in names], "reads during the failure")
        expect_eq(v_exists(c, names), [True] * len(names), "batch_exists during the failure")
        r = c.get("/health")
        expect_status(r, 200)  # reads only: reads are served
        expect_true("reads_only" in r.body.decode() and "write-ahead log" in r.body.decode(),
                    "/health says reads only and why: %r" % r.body)
        os.unlink(full)  # the disk recovers: the log repairs itself
        wait_for(lambda: b'"ok"' in c.get("/health").body, 20 * SLOW, interval=0.1,
                 what="the log to be repaired")
        page = v_alloc(c, 0, ["after-repair"])[0]
        v_confirm(c, 0, [("after-repair", page)])
        acked["after-repair"] = page
        kill9(srv)
        expect_acked_after_restart(d, acked, v_locations,
                                   "every acknowledged confirmation after kill -9")


def test_a_failing_disk_at_kill_9_time_loses_nothing_acknowledged():
    with DataDir() as d:
        full = os.path.join(d.root, "disk-full")
        env = disk_fault_env("while-exists=%s,write-fail-after=0,snapshot-fail" % full)
        srv, c = d.serve(env=env)
        s_init(c, 0, 32)
        acked = own_each(c, 8)
        open(full, "w").close()
        expect_error(c.post("/0/reserve_and_allocate_page_indices", {"keys": [["z", ""]]}), 507)
        kill9(srv)  # while the log is failed: a restart is the other way to recover
        os.unlink(full)
        expect_acked_after_restart(d, acked, s_pages, "acknowledged keys")


def test_a_torn_tail_is_cut_and_reported_and_the_server_starts():
    with DataDir() as d:
        srv, c = d.serve()
        s_init(c, 0, 16)
        pages = s_alloc(c, 0, ["a", "b", "c"])
        s_confirm(c, 0, [("a", pages[0][1]), ("b", pages[1][1])])
        kill9(srv)
        seg = d.last_segment()
        size = os.path.getsize(seg)
        with open(seg, "r+b") as f:
            f.truncate(size - 3)  # the last record (b's OWN) is torn
        srv = d.start()
        expect_true("cut a torn tail" in srv.stderr(), "the cut is reported:\n%s" % srv.stderr())
        c = srv.client()
        expect_eq(s_pages(c, 0, ["a"]), [pages[0][1]], "records before the torn one are kept")
        srv.check()
        srv.stop()


def test_damage_before_the_tail_stops_the_start_unless_salvage_is_given():
    with DataDir() as d:
        srv, c = d.serve()
        s_init(c, 0, 64)
        own_each(c, 20)
        kill9(srv)
        seg = d.last_segment()
        size = os.path.getsize(seg)
        with open(seg, "r+b") as f:
            f.seek(size // 2)
            b = f.read(1)
            f.seek(size // 2)
            f.write(bytes([b[0] ^ 0x20]))
        before = open(seg, "rb").read()
        code, err = run_server_expecting_exit(d.path)
        expect_eq(code, 3, "exit code of a start on a damaged log (stderr: %s)" % err)
        expect_true("damaged before its tail" in err and "--salvage" in err,
                    "a clear message: %s" % err)
        expect_eq(open(seg, "rb").read(), before, "the damaged file is left as it was")
        srv = d.start("--salvage")
        expect_true("salvage" in srv.stderr(), "salvage is reported:\n%s" % srv.stderr())
        srv.check()
        srv.stop()
        expect_true(any(f.endswith(".damaged") for f in d.files()),
                    "the damaged segment is set aside: %r" % d.files())
        srv = d.start()  # and the next start needs no --salvage
        srv.check()
        srv.stop()


def test_a_foreign_data_directory_is_refused_and_left_untouched():
    root = tempfile.mkdtemp(prefix="hf3fs-foreign-")
    try:
        with open(os.path.join(root, "appendonly.aof"), "w") as f:
            f.write("*1\r\n$8\r\nFLUSHALL\r\n")
        code, err = run_server_expecting_exit(root)
        expect_eq(code, 4, "exit code of a start on a foreign directory (stderr: %s)" % err)
        expect_true("appendonly.aof" in err and "did not write" in err, "message: %s" % err)
        expect_eq(sorted(os.listdir(root)), ["appendonly.aof"], "nothing created or removed")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_start_up_line_names_the_directory_the_snapshot_and_the_records_replayed():
    with DataDir() as d:
        srv, c = d.serve()
        s_init(c, 0, 8)
        kill9(srv)
        srv = d.start()
        err = srv.stderr()
        expect_true(d.path in err and "loaded snapshot-" in err and "replayed" in err
                    and " ms" in err, "start-up line:\n%s" % err)
        srv.stop()


def test_in_memory_keeps_nothing_on_disk():
    srv = Server("--in-memory", persistence=False)
    srv.start()
    try:
        expect_eq(os.listdir(srv.workdir), ["stderr"], "files in the working directory")
    finally:
        srv.stop()


if __name__ == "__main__":
    harness.main(globals())

#!/usr/bin/python3
"""Leases across steps of the wall clock (docs/durability.md "Time").

Every lease runs on the server clock, which never steps (src/util/steady.h):
a step of the wall clock, forward or backward, while the server runs moves
no lease; across a restart, a deadline further than its own lease from the
new clock is cut to that lease.

The embedded server runs under libfaketime (Debian's faketime): its wall
clock is offset by the content of a timestamp file that libfaketime
re-reads every second (FAKETIME_TIMESTAMP_FILE, FAKETIME_CACHE_DURATION=1),
its monotonic clocks are left alone (FAKETIME_DONT_FAKE_MONOTONIC=1).
redis-server does not start under libfaketime (its jemalloc), so over Redis
the module is loaded with `test-clock [ms]`, which offsets the wall clock it
reads, and HF3FS.CLOCK STEP ms steps it (src/module/module.c "Time").

The load is test_page_integrity's: the vLLM and SGLang stock clients' call
sequences writing and reading simulated page files, tiny pools, constant
eviction; the wall clock steps forward by 700 s three times (each step far
past the reservation timeout and the read and write leases), then back by
700 s.
"""

import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import test_page_integrity as integrity  # noqa: E402
from harness import Server, expect_eq, expect_true  # noqa: E402
import metrics_text  # noqa: E402

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
STEP_S = 700
STEPS = (STEP_S, STEP_S, STEP_S, -STEP_S)
LOAD_BETWEEN_S = 0.5  # of load before the first step and after each step is seen
SECONDS = LOAD_BETWEEN_S * (1 + len(STEPS))  # at least; each step also waits to be seen
SHORT_LEASE_S = 2.0  # the reservation timeout of the tests that time a lease


class FakedWallClock:
    """The wall clock of a server started with env(): offset by step()."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="hf3fs-faketime-")
        self.path = os.path.join(self.dir, "timestamp")
        self.offset = 0
        self._write()

    def _write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+d\n" % self.offset)
        os.replace(tmp, self.path)

    def step(self, seconds):
        self.offset += seconds
        self._write()

    def env(self):
        # an ASan build's runtime must come first in the library list: told
        # not to insist, it works behind libfaketime
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": self.path,
                "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def stepping(step, steps_seen):
    """meanwhile() of run_engines: every step of STEPS under load, each one
    only once the server counted the one before (steps_seen()), so that no
    two steps fall between two of its comparisons and count as one."""
    def run():
        for n, s in enumerate(STEPS, 1):
            time.sleep(LOAD_BETWEEN_S)
            step(s)
            harness.wait_for(lambda: steps_seen() == n, 10 * harness.SLOWDOWN,
                             what="the server to count step %d" % n)
    return run


def metric(srv, name):
    c = srv.client()
    try:
        r = c.get("/metrics")
    finally:
        c.close()
    return metrics_text.value(metrics_text.parse(r.body.decode()), name)


def expect_no_lease_ended_early(stats):
    """Every reservation made before a step confirmed after it, every write
    lease ended by its writer's confirmation: nothing expired, nothing
    refused."""
    for pool, p in stats.items():
        expect_eq(p["expired_reservations"], 0, "reservations expired in %r" % (pool,))
        expect_eq(p["write_leases_expired"], 0, "write leases expired in %r" % (pool,))
        expect_eq(p["refused_confirmations"], dict.fromkeys(p["refused_confirmations"], 0),
                  "confirmations refused in %r" % (pool,))


def run_stepped(srv, step, steps_seen, name):
    integrity.initialize(srv)
    files, stats = integrity.run_engines([srv], SECONDS, meanwhile=stepping(step, steps_seen))
    integrity.check_run(name, files, stats)
    expect_no_lease_ended_early(stats)
    srv.check()


def check_embedded_run(flags):
    if integrity.requests is None:
        raise AssertionError("python3-requests is missing (make deps installs it)")
    clock = FakedWallClock()
    srv = Server(*integrity.LEASE_FLAGS, *flags, env=clock.env(), store="").start()
    try:
        # (a scrape compares the server clock with the wall clock)
        run_stepped(srv, clock.step, lambda: metric(srv, "hf3fs_metad_clock_steps_total"),
                    "wall clock stepped %r" % (STEPS,))
        expect_eq(metric(srv, "hf3fs_metad_clock_steps_total"), len(STEPS), "steps counted")
        offset = metric(srv, "hf3fs_metad_clock_offset_seconds")
        expect_true(sum(STEPS) - 1 < offset <= sum(STEPS) + 0.01,
                    "clock offset %r after steps of %r s" % (offset, STEPS))
        warned = re.findall(r"warn: the wall clock stepped by ([+-]\d+\.\d) s; leases are "
                            r"unaffected", srv.stderr())
        expect_eq(sorted(warned), sorted("%+.1f" % s for s in STEPS), "steps logged")
    finally:
        srv.stop()
        clock.close()


@harness.embedded_only
def test_wall_clock_steps_share_no_page_and_end_no_lease_in_memory():
    check_embedded_run(["--in-memory"])


@harness.embedded_only
def test_wall_clock_steps_share_no_page_and_end_no_lease_with_the_data_directory():
    check_embedded_run([])


def reserve_whole_pool(c, pages):
    """SGLang reserves every page of rank 0 ("sg") for keys never confirmed."""
    r = c.post("/0/reserve_and_allocate_page_indices",
               {"keys": [["held%d" % i, None] for i in range(pages)], "namespace": "sg"})
    got = [page for _, page in r.json()["indices"]]
    expect_true(all(p >= 0 for p in got), "the pool was not free: %r" % (got,))


def seconds_until_a_page_is_free(c, limit_s, since=None):
    """Poll a one-key reservation until it gets a page: the seconds from
    `since` (time.monotonic(); default: now)."""
    t0 = time.monotonic() if since is None else since
    while time.monotonic() - t0 < limit_s:
        r = c.post("/0/reserve_and_allocate_page_indices",
                   {"keys": [["late", None]], "namespace": "sg"})
        # (over Redis, a restarted redis-server answers 503 while it loads)
        if r.status == 200 and r.json()["indices"][0][1] >= 0:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError("no page came back within %.0f s: leases outlived their length"
                         % limit_s)


def expect_back_within_one_lease(took, what, not_before=True):
    """A reservation of SHORT_LEASE_S ends after SHORT_LEASE_S, give or take
    the 1% slew: took counts from before the reservation was asked for (so
    never less, not_before), or from a restart (so never more), plus a loaded
    machine's delays."""
    expect_true(took <= SHORT_LEASE_S * 1.01 + 1.0 * harness.SLOWDOWN,
                "%s: pages came back after %.2f s, their lease is %.1f s"
                % (what, took, SHORT_LEASE_S))
    expect_true(not not_before or took >= SHORT_LEASE_S * 0.99,
                "%s: pages came back after %.2f s, before their lease of %.1f s ended"
                % (what, took, SHORT_LEASE_S))


@harness.embedded_only
def test_pages_reserved_before_a_backward_step_come_back_within_their_lease():
    clock = FakedWallClock()
    srv = Server("--in-memory", "--reservation-timeout", SHORT_LEASE_S, env=clock.env(),
                 store="").start()
    try:
        c = srv.client()
        harness.s_init(c, 0, 4, ns="sg")
        t0 = time.monotonic()
        reserve_whole_pool(c, 4)
        clock.step(-STEP_S)  # libfaketime sees it within its 1 s cache
        took = seconds_until_a_page_is_free(c, 60, since=t0)
        expect_back_within_one_lease(took, "after a step back of %d s" % STEP_S)
        c.close()
    finally:
        srv.stop()
        clock.close()


def restart_across_a_step(step_s):
    """Own one key and reserve the rest of a pool, stop the server, step the wall
    clock by step_s while it is down, start it again on the same data
    directory: (client, seconds from the restart until a page is free)."""
    clock = FakedWallClock()
    data = tempfile.mkdtemp(prefix="hf3fs-clock-data-")
    # no eviction: a page comes back only when its reservation ends
    flags = ("--data-dir", data, "--reservation-timeout", SHORT_LEASE_S, "--eviction", "none")
    try:
        srv = Server(*flags, env=clock.env(), store="", persistence=False).start()
        c = srv.client()
        harness.s_init(c, 0, 3, ns="sg")
        r = c.post("/0/reserve_and_allocate_page_indices",
                   {"keys": [["kept", None]], "namespace": "sg"})
        page = r.json()["indices"][0][1]
        harness.expect_no_body(c.post("/0/confirm_write", {"written_keys_to_confirm": [
            ["kept", page]], "pages_to_release": [], "namespace": "sg"}))
        reserve_whole_pool(c, 2)
        c.close()
        srv.stop()
        clock.step(step_s)
        srv = Server(*flags, env=clock.env(), store="", persistence=False).start()
        try:
            c = srv.client()
            took = seconds_until_a_page_is_free(c, 60)
            r = c.post("/0/exists", {"keys": ["kept"], "namespace": "sg"})
            expect_eq(r.json()["exists"], [True], "the confirmed key after the restart")
            c.close()
            return took
        finally:
            srv.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)
        clock.close()


@harness.embedded_only
def test_a_restart_after_a_backward_step_cuts_reservations_to_one_lease():
    took = restart_across_a_step(-STEP_S)
    expect_back_within_one_lease(took, "restarted %d s back" % STEP_S, not_before=False)


@harness.embedded_only
def test_a_restart_after_a_forward_step_ends_reservations_at_once():
    took = restart_across_a_step(STEP_S)
    expect_true(took < 1.0 * harness.SLOWDOWN,
                "reservations outlived a forward step while down: %.2f s" % took)


# ---- over Redis: the module's clock, stepped through its test seam ----

def module_clock(redis):
    """HF3FS.CLOCK: [now_ms, wall_ms, offset_ms, steps]."""
    c = redis.connect()
    try:
        return c.cmd("HF3FS.CLOCK")
    finally:
        c.close()


def module_step(redis):
    def step(seconds):
        c = redis.connect()
        try:
            c.cmd("HF3FS.CLOCK", "STEP", str(seconds * 1000))
        finally:
            c.close()
    return step


@harness.embedded_only  # it starts a redis-server of its own, with the seam
def test_module_clock_steps_share_no_page_and_end_no_lease():
    if integrity.requests is None:
        raise AssertionError("python3-requests is missing (make deps installs it)")
    from redis_server import RedisServer
    with RedisServer(module_args=["test-clock"]) as redis:
        srv = Server(*integrity.LEASE_FLAGS, store=redis.url).start()
        try:
            run_stepped(srv, module_step(redis), lambda: module_clock(redis)[3],
                        "module clock stepped %r" % (STEPS,))
            now, wall, offset, steps = module_clock(redis)
            expect_eq(steps, len(STEPS), "steps counted by the module")
            expect_true(sum(STEPS) * 1000 - 1000 < offset <= sum(STEPS) * 1000,
                        "module clock offset %r ms after steps of %r s" % (offset, STEPS))
            expect_true(re.search(r"the wall clock stepped by -700\.0 s; leases are unaffected",
                                  redis.log()), "the module logged the steps")
        finally:
            srv.stop()


@harness.embedded_only
def test_module_pages_reserved_before_a_backward_step_come_back_within_their_lease():
    from redis_server import RedisServer
    with RedisServer(module_args=["test-clock"]) as redis:
        srv = Server("--reservation-timeout", SHORT_LEASE_S, store=redis.url).start()
        try:
            c = srv.client()
            harness.s_init(c, 0, 4, ns="sg")
            t0 = time.monotonic()
            reserve_whole_pool(c, 4)
            module_step(redis)(-STEP_S)
            took = seconds_until_a_page_is_free(c, 60, since=t0)
            expect_back_within_one_lease(took, "module, after a step back")
            c.close()
        finally:
            srv.stop()


@harness.embedded_only
def test_module_restart_after_a_backward_step_cuts_reservations_to_one_lease():
    """Redis restarted from its AOF with its wall clock 700 s behind: the
    reservations of the AOF end one lease after the first command."""
    from redis_server import RedisServer
    with RedisServer(appendonly=True, module_args=["test-clock"]) as redis:
        srv = Server("--reservation-timeout", SHORT_LEASE_S, "--eviction", "none",
                     store=redis.url).start()
        try:
            c = srv.client()
            harness.s_init(c, 0, 2, ns="sg")
            reserve_whole_pool(c, 2)
            redis.kill9()
            redis.module_args = ["test-clock", str(-STEP_S * 1000)]
            redis.start()
            took = seconds_until_a_page_is_free(c, 60)
            expect_back_within_one_lease(took, "module restarted %d s back" % STEP_S,
                                         not_before=False)
            c.close()
        finally:
            srv.stop()


if __name__ == "__main__":
    harness.main(globals())

"""The cluster routing (src/cluster/) against a real local Redis Cluster.

A cluster of 3 primaries + 3 replicas (redis_cluster.py) is started once and
shared by the tests, in definition order; the failover test comes last
because it kills a primary. The routing is driven through
$BUILD/cluster-tests/cluster_driver (tests/cluster/cluster_driver.c), one
JSON line per command.

HF3FS_CLUSTER_LONG=1 makes the failover test long: three failovers in a row
under a load of acknowledged writes (WAIT 1), each checked after the
promotion.
"""

import hashlib
import json
import os
import random
import select
import subprocess
import sys
import tempfile
import threading
import time

import harness
import redis_cluster
from redis_cluster import Conn, ReplyError, pick_port

DRIVER = os.path.join(os.path.dirname(harness.BIN), "cluster-tests", "cluster_driver")
LONG = os.environ.get("HF3FS_CLUSTER_LONG") == "1"
TIMEOUT_MS = 1000  # the driver's command timeout
FAILOVER_BOUND_S = 5.0  # service within this long after the promotion

def cluster():
    """The shared cluster, started on first use."""
    return redis_cluster.shared(node_timeout_ms=2000)  # failovers under test


def _token(arg):
    data = arg if isinstance(arg, bytes) else str(arg).encode("latin-1")
    return "".join(chr(b) if 0x21 <= b < 0x7f and b != 0x25 else "%%%02X" % b for b in data)


class Driver:
    """One cluster_driver process: one cluster_t."""

    def __init__(self):
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, bufsize=0)
        self.buf = b""

    def send(self, *lines, timeout=30.0):
        """Write lines (one command), return its answer."""
        self.write(*lines)
        return self.receive(lines[0], timeout)

    def write(self, *lines):
        self.proc.stdin.write("".join(line + "\n" for line in lines).encode())

    def receive(self, what, timeout=30.0):
        deadline = time.monotonic() + timeout * harness.SLOWDOWN
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError("driver: no answer to %r within %ss" % (what, timeout))
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError("driver died: %s" % self.stderr())
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def open(self, seeds, **opts):
        opts.setdefault("timeout", TIMEOUT_MS)
        words = ["open", "seeds=" + seeds] + ["%s=%s" % (k, _token(v)) for k, v in opts.items()]
        return self.send(" ".join(words))

    def run(self, key, *args, idempotent=False):
        verb = "runi" if idempotent else "run"
        return self.send(" ".join([verb, _token(key)] + [_token(a) for a in args]))

    def node(self, index, *args):
        return self.send(" ".join(["node", str(index)] + [_token(a) for a in args]))

    @staticmethod
    def batch_lines(cmds):
        return ["batch %d" % len(cmds)] + [" ".join(_token(a) for a in cmd) for cmd in cmds]

    def batch(self, cmds, timeout=30.0):
        return self.send(*self.batch_lines(cmds), timeout=timeout)

    def slot(self, key):
        return self.send("slot " + _token(key))["slot"]

    def stats(self):
        return self.send("stats")

    def node_of_slot(self, slot):
        return self.send("slotnode %d" % slot)["addr"]

    def quit(self):
        """End the process; it must exit 0 (under ASan: no leak)."""
        self.proc.stdin.write(b"quit\n")
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=10)
        if rc != 0:
            raise AssertionError("driver exit %d: %s" % (rc, self.stderr()[-3000:]))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *rest):
        if exc_type is None:
            self.quit()
        else:
            self.proc.kill()
            self.proc.wait()


def opened(**opts):
    d = Driver()
    r = d.open(cluster().seeds(), **opts)
    assert r == {"ok": True}, r
    return d


def reply(result):
    assert "reply" in result, "expected a reply, got %r" % (result,)
    return result["reply"]


def node_figures(d):
    """{port: figures of that node} from the driver's stats."""
    return {int(n["addr"].rsplit(":", 1)[1]): n for n in d.stats()["nodes"]}


def tags_per_primary(rc, prefix, count=1):
    """{primary port: [count hash tags whose slot it serves]}."""
    smap = rc.slot_map()
    out = {p: [] for p in set(smap.values())}
    i = 0
    while any(len(v) < count for v in out.values()):
        tag = "{%s%d}" % (prefix, i)
        i += 1
        owner = smap[rc.keyslot(tag)]
        if len(out[owner]) < count:
            out[owner].append(tag)
    return out


def direct_get(rc, port, key, asking=False):
    """GET on one node, no redirect followed: the value, or the error text."""
    c = Conn(port)
    try:
        if asking:
            c.call("ASKING")
        r = c.call("GET", key, errors=True)
        return str(r) if isinstance(r, ReplyError) else r
    finally:
        c.close()


# ---- routing ----

def test_key_slot_equals_cluster_keyslot_for_tags_and_binary_keys():
    rc = cluster()
    rnd = random.Random(13)
    keys = [b"{pool}a", b"{}x", b"a{b}c{d}", b"{{x}}", b"}{y}", b"no tag", b"\x00{\x00}\xff"]
    alphabet = b"ab{} \x00\xff%"
    keys += [bytes(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 12))) for _ in range(300)]
    c = Conn(rc.ports()[0])
    try:
        with Driver() as d:
            for k in keys:
                want = c.call("CLUSTER", "KEYSLOT", k)
                got = d.slot(k)
                assert got == want, "key %r: slot %d, Redis says %d" % (k, got, want)
    finally:
        c.close()


def test_keys_go_to_the_primary_of_their_slot_without_redirects():
    rc = cluster()
    tags = tags_per_primary(rc, "route", count=4)
    with opened() as d:
        before = node_figures(d)
        keys = [(port, "%s:%d" % (tag, j)) for port, ts in tags.items() for tag in ts
                for j in range(3)]
        for port, key in keys:
            assert reply(d.run(key, "SET", key, "v-" + key)) == {"status": "OK"}
        for port, key in keys:
            assert direct_get(rc, port, key) == "v-" + key, (port, key)
        after = node_figures(d)
        for port in tags:
            sent = after[port]["requests"] - before.get(port, {"requests": 0})["requests"]
            assert sent == 12, "primary %d: %d requests, want 12" % (port, sent)
            assert after[port]["moved"] == 0 and after[port]["ask"] == 0, after[port]
        assert d.stats()["refreshes"] == 1  # the map of open, nothing since


def test_batch_over_three_primaries_answers_in_request_order_in_one_round():
    rc = cluster()
    tags = tags_per_primary(rc, "batch", count=2)
    all_tags = [t for ts in tags.values() for t in ts]
    with opened() as d:
        keys = ["%s:%d" % (all_tags[i % len(all_tags)], i) for i in range(300)]
        r = d.batch([(k, "SET", k, "value-%d" % i) for i, k in enumerate(keys)])
        assert r["rc"] == 0 and all(reply(x) == {"status": "OK"} for x in r["results"]), r
        rounds = d.stats()["rounds"]
        before = node_figures(d)
        cmds = []
        for i, k in enumerate(keys):  # interleave reads, counters and misses
            cmds.append((k, "GET", k) if i % 3 else (k, "INCR", k + ":n"))
            cmds.append((k, "GET", k + ":missing"))
        r = d.batch(cmds)
        assert r["rc"] == 0, r
        for i, k in enumerate(keys):
            got = reply(r["results"][2 * i])
            assert got == (("value-%d" % i) if i % 3 else 1), (i, k, got)
            assert reply(r["results"][2 * i + 1]) is None
        assert d.stats()["rounds"] == rounds + 1, "the batch took more than one round"
        after = node_figures(d)
        for port in tags:
            assert after[port]["requests"] - before[port]["requests"] == 200, after[port]


def test_batch_has_every_node_working_at_once():
    """A batch of one blocking BLPOP per primary: all three are blocked in
    Redis at the same time (so the nodes were asked in parallel, not one
    after the other), and the replies come back in request order."""
    rc = cluster()
    tags = tags_per_primary(rc, "par")
    lists = {port: ts[0] + ":list" for port, ts in tags.items()}
    with opened(timeout=15000) as d:
        cmds = [(lists[p], "BLPOP", lists[p], 10) for p in sorted(lists)]
        cmds.insert(1, (lists[sorted(lists)[0]], "PING"))
        d.write(*d.batch_lines(cmds))
        deadline = time.monotonic() + 8
        blocked = set()
        while blocked != set(lists) and time.monotonic() < deadline:
            for port in lists:
                if "cmd=blpop" in rc.call(port, "CLIENT", "LIST"):
                    blocked.add(port)
                else:
                    blocked.discard(port)
            time.sleep(0.01)
        assert blocked == set(lists), "blocked at once on %s of %s" % (blocked, set(lists))
        for port, key in lists.items():
            rc.call(port, "RPUSH", key, "from-%d" % port)
        r = d.receive("batch")
        assert r["rc"] == 0, r
        results = [reply(x) for x in r["results"]]
        ports = sorted(lists)
        assert results[1] == {"status": "PONG"}
        assert [results[0]] + results[2:] == [[lists[p], "from-%d" % p] for p in ports], results


def test_raw_commands_reach_the_named_node_and_evalsha_falls_back_to_eval_there():
    rc = cluster()
    tags = tags_per_primary(rc, "lua")
    script = "return redis.call('INCR', KEYS[1])"
    sha = hashlib.sha1(script.encode()).hexdigest()
    with opened() as d:
        addrs = [n["addr"] for n in d.stats()["nodes"]]
        for i, addr in enumerate(addrs):
            info = reply(d.node(i, "INFO", "server"))
            assert "tcp_port:%s" % addr.rsplit(":", 1)[1] in info, (addr, info[:200])
            reply(d.node(i, "SCRIPT", "FLUSH"))
        ports = sorted(tags)
        first = tags[ports[0]][0] + ":n"
        assert reply(d.run(first, "EVALSHA", sha, 1, first))["err"].startswith("NOSCRIPT")
        assert reply(d.run(first, "EVAL", script, 1, first)) == 1
        assert reply(d.run(first, "EVALSHA", sha, 1, first)) == 2
        other = tags[ports[1]][0] + ":n"  # another node: its own script cache
        assert reply(d.run(other, "EVALSHA", sha, 1, other))["err"].startswith("NOSCRIPT")


# ---- redirects ----

def test_moved_after_a_slot_migration_is_followed_and_the_map_refreshed():
    rc = cluster()
    tags = tags_per_primary(rc, "moved")
    src, dst = sorted(tags)[:2]
    key = tags[src][0] + ":k"
    slot = rc.keyslot(key)
    with opened() as d:
        assert reply(d.run(key, "SET", key, "here")) == {"status": "OK"}
        assert d.node_of_slot(slot).endswith(":%d" % src)
        refreshes = d.stats()["refreshes"]
        rc.migrate_slot(slot, src, dst)
        assert reply(d.run(key, "GET", key)) == "here"
        figures = node_figures(d)
        assert figures[src]["moved"] == 1, figures[src]
        assert d.stats()["refreshes"] == refreshes + 1
        assert d.node_of_slot(slot).endswith(":%d" % dst), d.node_of_slot(slot)
        assert reply(d.run(key, "GET", key)) == "here"
        assert node_figures(d)[src]["moved"] == 1, "the second call was redirected again"


def test_ask_during_a_migration_is_followed_for_one_command():
    rc = cluster()
    tags = tags_per_primary(rc, "ask")
    src, dst = sorted(tags)[1:3]
    tag = tags[src][0]
    moved_key, staying_key, new_key = tag + ":moved", tag + ":staying", tag + ":new"
    slot = rc.keyslot(tag)
    with opened() as d:
        for k in (moved_key, staying_key):
            assert reply(d.run(k, "SET", k, "v-" + k)) == {"status": "OK"}
        rc.begin_migration(slot, src, dst)
        rc.move_keys(slot, src, dst, keys=[moved_key])
        try:
            assert reply(d.run(moved_key, "GET", moved_key)) == "v-" + moved_key
            assert node_figures(d)[src]["ask"] == 1
            assert d.node_of_slot(slot).endswith(":%d" % src), "ASK changed the map"
            assert reply(d.run(staying_key, "GET", staying_key)) == "v-" + staying_key
            assert node_figures(d)[src]["ask"] == 1, "a key still on the source was redirected"
            # A new key of a migrating slot is created on the target.
            assert reply(d.run(new_key, "SET", new_key, "fresh")) == {"status": "OK"}
            assert node_figures(d)[src]["ask"] == 2
            assert direct_get(rc, dst, new_key, asking=True) == "fresh"
        finally:
            rc.move_keys(slot, src, dst)
            rc.end_migration(slot, dst)
            rc.wait_ok()
        for k, v in ((moved_key, "v-" + moved_key), (staying_key, "v-" + staying_key),
                     (new_key, "fresh")):
            assert reply(d.run(k, "GET", k)) == v
        assert d.node_of_slot(slot).endswith(":%d" % dst)


def later(seconds, fn, *args):
    """Run fn(*args) in a thread after `seconds`; join() it."""
    def body():
        time.sleep(seconds)
        fn(*args)
    t = threading.Thread(target=body)
    t.start()
    return t


def run_past_late_retries(client, key, *command, calls=5):
    """The call's result, called again while it ends as "timed out".

    A call retries TRYAGAIN and CLUSTERDOWN until its deadline; a retry
    still in flight at the deadline fails as "timed out" (it may have run).
    A loaded machine can make the last retry late, so a few calls, of which
    the caller requires one to end with the error that kept it."""
    for _ in range(calls):
        r = client.run(key, *command)
        if r.get("name") != "timed out":
            break
    return r


def test_tryagain_is_retried_until_the_deadline_then_fails_as_try_again():
    """MGET of two keys of a migrating slot, one moved, one not: the source
    answers TRYAGAIN until both are on one side."""
    rc = cluster()
    tags = tags_per_primary(rc, "again")
    src, dst = sorted(tags)[:2]
    tag = tags[src][0]
    a, b = tag + ":a", tag + ":b"
    slot = rc.keyslot(tag)
    # quick's deadline bounds its TRYAGAIN retries (as below, for CLUSTERDOWN).
    with opened(timeout=1000) as quick, opened(timeout=5000) as patient:
        for k in (a, b):
            assert reply(patient.run(k, "SET", k, "v-" + k)) == {"status": "OK"}
        rc.begin_migration(slot, src, dst)
        try:
            rc.move_keys(slot, src, dst, keys=[a])
            r = run_past_late_retries(quick, a, "MGET", a, b)
            assert r.get("name") == "try again" and "TRYAGAIN" in r["detail"], r
            assert node_figures(quick)[src]["retries"] >= 2, node_figures(quick)[src]
            # The other key follows while the call retries: then it succeeds.
            mover = later(0.3, rc.move_keys, slot, src, dst, [b])
            r = patient.run(a, "MGET", a, b)
            mover.join()
            assert reply(r) == ["v-" + a, "v-" + b], r
            assert node_figures(patient)[src]["retries"] >= 1
        finally:
            rc.move_keys(slot, src, dst)
            rc.end_migration(slot, dst)
            rc.wait_ok()


def test_clusterdown_is_retried_until_the_deadline_then_fails_as_cluster_down():
    """A slot that no node serves puts the cluster down: every node answers
    CLUSTERDOWN until the slot is served again."""
    rc = cluster()
    tags = tags_per_primary(rc, "down")
    owner, other = sorted(tags)[:2]
    key, elsewhere = tags[owner][0] + ":k", tags[other][0] + ":k"
    slot = rc.keyslot(key)
    # quick's deadline bounds its CLUSTERDOWN retries: 1 s (retries every
    # 10 ms or more; 300 ms failed on a loaded machine with "no reply").
    with opened(timeout=1000) as quick, opened(timeout=5000) as patient:
        assert reply(patient.run(key, "SET", key, "kept")) == {"status": "OK"}
        try:
            # The owner first, so that it stops claiming the slot; a heartbeat
            # it sent before may still reach a node after that node's DELSLOTS
            # and assign the slot again there: delete it again until every
            # node has it unassigned.
            ports = [owner] + [p for p in rc.ports() if p != owner]
            deadline = time.monotonic() + 10
            while "cluster_state:fail" not in rc.call(other, "CLUSTER", "INFO"):
                assert time.monotonic() < deadline, "the cluster did not go down"
                for p in ports:
                    rc.call(p, "CLUSTER", "DELSLOTS", slot, errors=True)
                time.sleep(0.01)
            r = run_past_late_retries(quick, elsewhere, "GET", elsewhere)
            assert r.get("name") == "cluster down" and "CLUSTERDOWN" in r["detail"], r
            assert node_figures(quick)[other]["retries"] >= 2
            adder = later(0.3, rc.call, owner, "CLUSTER", "ADDSLOTS", slot)
            r = patient.run(key, "GET", key)
            adder.join()
            assert reply(r) == "kept", r
        finally:
            rc.call(owner, "CLUSTER", "ADDSLOTS", slot, errors=True)  # if not done yet
            rc.wait_ok()


# ---- authentication and refusals ----

def test_acl_user_and_password_authenticate_every_connection():
    rc = cluster()
    for p in rc.ports():
        rc.call(p, "ACL", "SETUSER", "metad", "reset", "on", ">s3cret", "~*", "&*", "+@all")
    try:
        tags = tags_per_primary(rc, "acl")
        with opened(user="metad", password="s3cret") as d:
            for port, ts in tags.items():
                key = ts[0] + ":k"
                assert reply(d.run(key, "SET", key, "x")) == {"status": "OK"}
                assert reply(d.run(key, "ACL", "WHOAMI")) == "metad"
        with Driver() as d:
            r = d.open(rc.seeds(), user="metad", password="wrong")
            assert r["name"] == "authentication failed", r
            assert "WRONGPASS" in r["detail"], r
    finally:
        for p in rc.ports():
            rc.call(p, "ACL", "DELUSER", "metad")


def test_open_on_a_standalone_redis_says_it_is_not_a_cluster():
    port = pick_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", tmp],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    Conn(port).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "standalone redis did not start"
                    time.sleep(0.02)
            with Driver() as d:
                r = d.open("127.0.0.1:%d" % port)
                assert r["name"] == "protocol error", r
                assert "cluster support disabled" in r["detail"], r
        finally:
            proc.kill()
            proc.wait()


# ---- failover (last: it kills a primary) ----

def _failover_once(rc, d, key, value, load):
    """Kill -9 the primary of key's slot; keep asking for key until it is
    served again. Returns (gap after the promotion, outage since the kill)."""
    slot = rc.keyslot(key)
    victim = rc.slot_owner(slot)
    assert reply(d.run(key, "WAIT", 1, 2000)) >= 1, "the replica did not take the write"
    promoted = {}

    def watch():
        try:
            promoted["port"], promoted["t"] = rc.wait_failover(victim)
        except AssertionError as e:
            promoted["error"] = e

    t_kill = rc.kill9(victim)
    watcher = threading.Thread(target=watch)
    watcher.start()
    failures = {}
    last = None
    t_back = None
    while time.monotonic() < t_kill + 60:
        t0 = time.monotonic()
        r = d.run(key, "GET", key, idempotent=True)
        took = time.monotonic() - t0
        assert took < (TIMEOUT_MS / 1000.0 + 2) * harness.SLOWDOWN, "a call took %.2f s" % took
        if "reply" in r and "t" in promoted:
            assert r["reply"] == value, r
            t_back = time.monotonic()
            break
        if "error" in r:
            failures[r["name"]] = failures.get(r["name"], 0) + 1
            last = r
        load()
    watcher.join()
    assert "error" not in promoted, promoted["error"]
    assert t_back is not None, "not served again within 60 s of the kill: %s, the last: %s, watcher: %s" \
        % (failures, last, promoted)
    gap = max(0.0, t_back - promoted["t"])
    print("  failover of primary %d: promoted %.2f s after the kill, served %.2f s after "
          "the promotion (outage %.2f s; failures meanwhile: %s)"
          % (victim, promoted["t"] - t_kill, gap, t_back - t_kill, failures), flush=True)
    assert set(failures) <= {"node unreachable", "cluster down", "connection lost", "timed out"}, \
        failures
    assert gap <= FAILOVER_BOUND_S, "served %.2f s after the promotion" % gap
    return victim


def test_failover_promoted_replica_serves_within_5s_of_its_promotion():
    rc = cluster()
    key = "{failover}:k"
    acked = {}
    counter = [0]
    with opened() as d:
        tags = tags_per_primary(rc, "load", count=2)
        load_keys = [t + ":w" for ts in tags.values() for t in ts]

        def load():
            """Writes to every primary; remembers those WAIT 1 acknowledged."""
            if not LONG:
                return
            counter[0] += 1
            cmds = []
            for k in load_keys:
                cmds += [(k, "SET", k, counter[0]), (k, "WAIT", 1, 200)]
            r = d.batch(cmds)
            for i, k in enumerate(load_keys):
                s, w = r["results"][2 * i], r["results"][2 * i + 1]
                if "reply" in s and "reply" in w and w["reply"] >= 1:
                    acked[k] = counter[0]

        rounds = 3 if LONG else 1
        for n in range(rounds):
            value = "v%d" % n
            assert reply(d.run(key, "SET", key, value)) == {"status": "OK"}
            victim = _failover_once(rc, d, key, value, load)
            rc.restart(victim)  # back as a replica of the promoted node
            rc.wait_ok()
        for k, v in acked.items():
            assert int(reply(d.run(k, "GET", k))) >= v, "acknowledged write of %s lost" % k
        if LONG:
            assert acked, "the load had no write acknowledged"
            print("  %d keys' last acknowledged writes found after %d failovers"
                  % (len(acked), rounds), flush=True)
        figures = d.stats()
        assert figures["refreshes"] >= 2


if __name__ == "__main__":
    if not os.path.exists(DRIVER):
        print("FAIL setup: %s does not exist (make units)" % DRIVER)
        sys.exit(1)
    harness.main(globals())  # the shared cluster is stopped at exit (redis_cluster.py)

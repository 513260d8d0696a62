"""redis_cluster.py: a local Redis Cluster for tests (stdlib only).

    from redis_cluster import RedisCluster

    with RedisCluster() as rc:            # 3 primaries + 3 replicas, cluster_state:ok
        rc.seeds()                        # "127.0.0.1:p1,127.0.0.1:p2,..."
        port = rc.slot_owner(rc.call(rc.ports()[0], "CLUSTER", "KEYSLOT", "k"))
        rc.kill9(port)                    # SIGKILL one node
        new, t = rc.wait_failover(port)   # its replica promoted (and when)
        rc.migrate_slot(slot, src, dst)   # SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE

Each node is a redis-server (redis_server.spawn) in its own directory
of one temporary directory, bound to 127.0.0.1 on a port p such that p and
its cluster bus port p + 10000 were both free, with the hf3fs-metad module
loaded (redis_server.module_of(); loadmodule=False: without); `redis-cli --cluster create
--cluster-replicas 1` forms the cluster. Leaving the `with` block (or the
process exiting) kills every node and removes the directory.

call() uses redis_server.Resp: it returns str for bulk strings, int, None,
lists, and raises ReplyError for error replies (or returns it with
errors=True).
"""

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time

from redis_server import RedisError, Resp, kill, module_env, module_of, pick_port, spawn

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"

_live = set()


def _kill_all():
    for cluster in list(_live):
        cluster.stop()


atexit.register(_kill_all)


ReplyError = RedisError  # an error reply of Redis (its text is str(e))


class ClusterError(AssertionError):
    """The cluster did not start or did not reach the state waited for."""


def _text(reply):
    """A Resp reply with its strings as str (bulk strings as latin-1)."""
    if isinstance(reply, bytes):
        return reply.decode("latin-1")
    if isinstance(reply, list):
        return [_text(e) for e in reply]
    return reply


class Conn(Resp):
    """One connection to one node; call() answers with str, not bytes."""

    def __init__(self, port, password=None, timeout=5.0, host="127.0.0.1"):
        super().__init__(host=host, port=port, timeout=timeout)
        if password:
            self.call("AUTH", password)

    def call(self, *args, errors=False):
        self.sock.sendall(self.encode(args))
        r = _text(self.read())
        if isinstance(r, ReplyError) and not errors:
            raise r
        return r


class Node:
    def __init__(self, port, directory, module=None):
        self.port = port
        self.dir = directory
        self.proc = None
        self.module = module  # its own module's path (None: the cluster's)


class RedisCluster:
    """primaries primaries with replicas replicas each; node_timeout_ms is
    cluster-node-timeout (failure detection: a failover takes about that
    plus one second)."""

    def __init__(self, primaries=3, replicas=1, node_timeout_ms=2000, password=None,
                 loadmodule=True, module_args=()):
        self.module = module_of(loadmodule)  # as RedisServer's: True, False or a path
        self.module_args = list(module_args)  # the module's load arguments
        self.primaries = primaries
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.password = password
        self.dir = None
        self.nodes = {}

    # ---- life ----

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="hf3fs-cluster-")
        _live.add(self)
        try:
            for _ in range(self.primaries * (1 + self.replicas)):
                self._start_new_node()
            self._create()
        except BaseException:
            self.stop()
            raise

    def stop(self):
        for node in self.nodes.values():
            kill(node.proc)
        self.nodes = {}
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        _live.discard(self)

    def _config(self, node):
        lines = [
            "port %d" % node.port,
            "bind 127.0.0.1",
            "dir %s" % node.dir,
            "logfile %s" % os.path.join(node.dir, "redis.log"),
            "daemonize no",
            "cluster-enabled yes",
            "cluster-config-file nodes.conf",
            "cluster-node-timeout %d" % self.node_timeout_ms,
            "appendonly no",
            'save ""',
            "repl-diskless-sync-delay 0",
        ]
        if self.password:
            lines += ["requirepass %s" % self.password, "masterauth %s" % self.password]
        if node.module or self.module:
            lines.append(" ".join(["loadmodule", node.module or self.module] +
                                  self.module_args))
        path = os.path.join(node.dir, "redis.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def _spawn(self, node):
        module = node.module or self.module
        node.proc = spawn([self._config(node)], node.port, self.password,
                          env=module_env(module) if module else None)
        return node.proc is not None

    def _start_new_node(self, module=None):
        for _ in range(5):  # a port taken meanwhile: another one
            port = pick_port(self.nodes)
            node = Node(port, os.path.join(self.dir, str(port)), module)
            os.makedirs(node.dir, exist_ok=True)
            if self._spawn(node):
                self.nodes[port] = node
                return node
            shutil.rmtree(node.dir, ignore_errors=True)
        raise ClusterError("redis-server did not start (see %s)" % self.dir)

    def _create(self):
        if self.primaries < 3:
            self._create_small()
            return
        cmd = [REDIS_CLI, "--cluster", "create"]
        cmd += ["%s:%d" % (self.host(p), p) for p in self.nodes]
        cmd += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        if self.password:
            cmd += ["-a", self.password, "--no-auth-warning"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if r.returncode != 0:
            raise ClusterError("redis-cli --cluster create failed:\n%s" % r.stdout.decode())
        self.wait_ok()

    def _create_small(self):
        """1 or 2 primaries, which `redis-cli --cluster create` refuses (it
        wants 3): the slots split evenly with CLUSTER ADDSLOTSRANGE, the
        nodes introduced with CLUSTER MEET, replicas attached with CLUSTER
        REPLICATE (benchmarks of 1 and 2 shards)."""
        ports = list(self.nodes)
        prim, reps = ports[:self.primaries], ports[self.primaries:]
        per = 16384 // self.primaries
        for i, p in enumerate(prim):
            last = 16383 if i == len(prim) - 1 else (i + 1) * per - 1
            self.call(p, "CLUSTER", "ADDSLOTSRANGE", str(i * per), str(last))
        for p in ports[1:]:
            self.call(p, "CLUSTER", "MEET", self.host(ports[0]), str(ports[0]))
        deadline = time.monotonic() + 30
        while True:
            known = [len(self.call(p, "CLUSTER", "NODES").strip().splitlines()) for p in ports]
            if min(known) == len(ports):
                break
            if time.monotonic() > deadline:
                raise ClusterError("nodes did not meet: %s" % known)
            time.sleep(0.1)
        for j, p in enumerate(reps):
            self.call(p, "CLUSTER", "REPLICATE", self.node_id(prim[j % len(prim)]))
        self.wait_ok()

    # ---- talking to nodes ----

    def call(self, port, *args, errors=False):
        """One command on one node (a connection per call)."""
        c = Conn(port, self.password, host=self.host(port))
        try:
            return c.call(*args, errors=errors)
        finally:
            c.close()

    def host(self, port):
        """The address of the node on port (netns.py's nodes each have one)."""
        return "127.0.0.1"

    def ports(self):
        """The ports of the nodes that run."""
        return [p for p, n in self.nodes.items() if n.proc and n.proc.poll() is None]

    def seeds(self):
        return ",".join("%s:%d" % (self.host(p), p) for p in self.nodes)

    def node_id(self, port):
        return self.call(port, "CLUSTER", "MYID")

    def role(self, port):
        """"master" or "slave" (ROLE's first word), None if unreachable."""
        try:
            return self.call(port, "ROLE")[0]
        except (OSError, ReplyError):
            return None

    def slot_map(self, port=None):
        """{slot: primary port} from CLUSTER SLOTS of one node that runs."""
        ports = [port] if port else self.ports()
        for p in ports:
            try:
                ranges = self.call(p, "CLUSTER", "SLOTS")
            except (OSError, ReplyError):
                continue
            out = {}
            for r in ranges:
                for s in range(r[0], r[1] + 1):
                    out[s] = r[2][1]
            return out
        raise ClusterError("no node answers CLUSTER SLOTS")

    def slot_owner(self, slot):
        return self.slot_map()[slot]

    def primaries_ports(self):
        return sorted(set(self.slot_map().values()))

    def replicas_of(self, port):
        """The ports of the replicas of primary `port` (CLUSTER REPLICAS)."""
        lines = self.call(self._live_other(port), "CLUSTER", "REPLICAS", self.node_id(port))
        return [int(line.split()[1].split("@")[0].rsplit(":", 1)[1]) for line in lines]

    def _live_other(self, port):
        for p in self.ports():
            if p != port:
                return p
        raise ClusterError("no other node runs")

    def keyslot(self, key):
        return self.call(self.ports()[0], "CLUSTER", "KEYSLOT", key)

    # ---- waiting ----

    def _agreed(self):
        """Every running node says cluster_state:ok, sees every slot served,
        and they agree on who serves each slot."""
        maps = []
        for p in self.ports():
            info = self.call(p, "CLUSTER", "INFO")
            if "cluster_state:ok" not in info:
                return False
            m = self.slot_map(p)
            if len(m) != 16384:
                return False
            maps.append(m)
        return all(m == maps[0] for m in maps)

    def wait_ok(self, timeout=30):
        """Until the cluster is ok and every replica's link is up."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if self._agreed() and self._replicas_linked():
                    return
            except (OSError, ReplyError) as e:
                last = e
            time.sleep(0.05)
        raise ClusterError("cluster not ok after %ss (%s)" % (timeout, last))

    def wait_bus_linked(self, port, timeout=30):
        """Until every running node's CLUSTER NODES shows node `port`
        connected and not failing: a node just restarted is known to the
        others only once their cluster bus links to it are up again, and a
        CLUSTER FAILOVER it starts before then is dropped by Redis without
        a word (5 s later)."""
        nid = self.node_id(port)
        deadline = time.monotonic() + timeout
        while True:
            seen = []
            for p in self.ports():
                try:
                    for line in self.call(p, "CLUSTER", "NODES").splitlines():
                        f = line.split()
                        if f[0] == nid:
                            seen.append(f[7] == "connected" and "fail" not in f[2])
                except (OSError, ReplyError):
                    seen.append(False)
            if seen and all(seen):
                return
            if time.monotonic() > deadline:
                raise ClusterError("node %d not connected in every node's view after %ss"
                                   % (port, timeout))
            time.sleep(0.05)

    def _replicas_linked(self):
        for p in self.ports():
            info = self.call(p, "INFO", "replication")
            if "role:slave" in info and "master_link_status:up" not in info:
                return False
        return True

    # ---- faults ----

    def kill9(self, port):
        """SIGKILL the node; returns time.monotonic() of the kill."""
        node = self.nodes[port]
        node.proc.send_signal(signal.SIGKILL)
        t = time.monotonic()
        node.proc.wait()
        return t

    def restart(self, port, module=None):
        """Start a killed node again on its port and directory (it rejoins
        with its nodes.conf: a former primary comes back as a replica);
        module: with that module's path from now on."""
        node = self.nodes[port]
        if module:
            node.module = os.path.abspath(module)
        if not self._spawn(node):
            raise ClusterError("node %d did not restart" % port)

    def add_node(self, module=None):
        """A new empty node (module: its own module's path) that met the
        cluster, a primary of no slot until CLUSTER REPLICATE; its port."""
        node = self._start_new_node(module and os.path.abspath(module))
        self.call(node.port, "CLUSTER", "MEET", "127.0.0.1", str(self._live_other(node.port)))
        deadline = time.monotonic() + 30
        while len(self.call(node.port, "CLUSTER", "NODES").strip().splitlines()) < len(self.nodes):
            if time.monotonic() > deadline:
                raise ClusterError("node %d did not meet the cluster" % node.port)
            time.sleep(0.05)
        return node.port

    def wait_replicas_online(self, primary, n, timeout=30):
        """Until primary has n replicas in sync (INFO replication,
        state=online)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.call(primary, "INFO", "replication").count(",state=online,") >= n:
                    return
            except (OSError, ReplyError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError("primary %d has not %d replicas in sync after %ss"
                                   % (primary, n, timeout))
            time.sleep(0.02)

    def wait_failover(self, dead_port, timeout=30):
        """Until a replica of dead_port (a killed primary) is a primary.
        Returns (its port, time.monotonic() when it was first seen so,
        polled every 10 ms)."""
        replicas = [p for p in self.ports() if p != dead_port and
                    self.call(p, "ROLE")[0] == "slave" and
                    self.call(p, "ROLE")[2] == dead_port]
        if not replicas:
            raise ClusterError("primary %d has no running replica" % dead_port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in replicas:
                if self.role(p) == "master":
                    return p, time.monotonic()
            time.sleep(0.01)
        raise ClusterError("no replica of %d promoted after %ss" % (dead_port, timeout))

    # ---- resharding ----

    def begin_migration(self, slot, src, dst):
        """Mark slot IMPORTING on dst and MIGRATING on src: from now on src
        answers ASK for the keys of the slot it no longer has."""
        self.call(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(src))
        self.call(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(dst))

    def move_keys(self, slot, src, dst, keys=None):
        """MIGRATE keys (default: all that src holds in the slot) to dst."""
        auth = ["AUTH", self.password] if self.password else []
        while True:
            batch = keys if keys is not None else \
                self.call(src, "CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not batch:
                return
            self.call(src, "MIGRATE", self.host(dst), dst, "", 0, 5000, *auth, "KEYS", *batch)
            if keys is not None:
                return

    def end_migration(self, slot, dst):
        """Give the slot to dst on every primary: src answers MOVED from now on."""
        dst_id = self.node_id(dst)
        self.call(dst, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        for p in self.primaries_ports():
            if p != dst:
                self.call(p, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def migrate_slot(self, slot, src, dst):
        """The whole move of one slot with its keys, then waits for every
        node to agree."""
        self.begin_migration(slot, src, dst)
        self.move_keys(slot, src, dst)
        self.end_migration(slot, dst)
        self.wait_ok()


_shared = None


# cluster-node-timeout of a cluster whose failovers are not under test:
# Redis's own default. With 2 s a machine loaded by other suites could miss
# a primary's heartbeats long enough for its replica to take over, which
# resets the volatile figures (refusal counts, hits) that a test compares.
QUIET_NODE_TIMEOUT_MS = 15000


def shared(node_timeout_ms=QUIET_NODE_TIMEOUT_MS):
    """The test process's cluster (3 primaries + 3 replicas), started on
    first use and stopped at exit: one per process, for every test of it
    that needs a cluster. The suites that fail nodes over ask for a short
    node timeout (the first call's value is the cluster's)."""
    global _shared
    if _shared is None:
        rc = RedisCluster(node_timeout_ms=node_timeout_ms)
        rc.start()
        _shared = rc
    return _shared


def flush(rc):
    """Empty every primary of the cluster rc (FLUSHALL), for a test that
    wants a clean state on a cluster that other tests used."""
    for port in rc.primaries_ports():
        rc.call(port, "FLUSHALL")


if __name__ == "__main__":
    # For tests in C (tests/engines.h, HF3FS_TEST_ENGINE=redis-cluster):
    # start a cluster, print "redis-cluster://SEEDS" on a line, and keep it
    # until stdin closes (the test process ended), then stop it.
    import sys

    with RedisCluster(node_timeout_ms=QUIET_NODE_TIMEOUT_MS) as rc:
        sys.stdout.write("redis-cluster://%s\n" % rc.seeds())
        sys.stdout.flush()
        sys.stdin.read()

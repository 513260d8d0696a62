"""netns.py: a small network on one machine, whose links the tests cut (root,
iproute2 and nftables; stdlib only).

    from netns import Net, NetCluster

    with Net() as net:                         # a bridge and a /24 of 10.213.X.0
        a, b = net.add("a"), net.add("b")      # a network namespace each, on the bridge
        a.popen(["redis-server", ...])         # runs inside a's namespace
        net.cut([a], [b])                      # packets between them dropped
        net.cut([a], [b], one_way=True)        # only those from a to b
        net.heal()                             # every cut gone
    with NetCluster(net) as rc:                # redis_cluster.RedisCluster, a node per host

Each host is a network namespace named PREFIX<pid>-<name> with one veth
pair: `eth0` inside, with the host's address, and its peer on the run's
bridge `hfb<pid>`, which has the address .1 in the machine's own namespace.
The test process (the workers of test_page_integrity.py, the control
connections to Redis) reaches every host through that address; hosts reach
each other through the bridge only (the machine does not route between
them). Nothing listens outside the namespaces: every server binds its host's
address. The third byte X of 10.213.X.0/24 is claimed per run (a lock file
under /tmp/hf3fs-netns-UID, held while the process lives, and no interface
using it), so that runs beside each other do not meet.

A cut is two nftables sets in every host's namespace (table `inet hf3fs`):
`mute`, whose addresses the host's packets to are dropped (hook output), and
`deaf`, whose addresses packets from are dropped (hook input). Dropped, not
refused: a TCP peer sees silence until its own timeouts, as across a cut
network. The host's own bridge address (.1) is never cut: the workers and
the test reach every host whatever the partition.

Clean-up: Net.close() (the `with` block's end, atexit, SIGTERM) kills every
process in the run's namespaces and deletes them and the bridge (the veths
go with their namespaces). A run killed with SIGKILL leaves them: each Net
first removes the namespaces and links of runs whose process is gone.
"""

import atexit
import fcntl
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import redis_cluster
from redis_server import Resp, RedisError, kill, module_env, spawn

PREFIX = "hf3fsnet-"            # namespaces: PREFIX<pid>-<name>
BRIDGE = "hfb"                  # bridges: hfb<pid>
VETH = "hfv"                    # veths, machine side: hfv<pid>x<n>
SUBNET = "10.213.%d.0/24"
IP = shutil.which("ip") or "/usr/sbin/ip"
NFT = shutil.which("nft") or "/usr/sbin/nft"
_LOCK_DIR = "/tmp/hf3fs-netns-%d" % os.getuid()

_live = set()


def _run(argv, check=True, stdin=None):
    r = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetError("%s: exit %d: %s" % (" ".join(argv), r.returncode, r.stdout.strip()))
    return r.stdout


class NetError(AssertionError):
    """A step of building or cutting the network failed."""


def usable():
    """Why the tests cannot build a network here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in (IP, NFT):
        if not os.access(tool, os.X_OK):
            return "%s is missing (make deps installs iproute2 and nftables)" % tool
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_in(ns):
    """SIGKILL every process of namespace ns."""
    for pid in _run([IP, "netns", "pids", ns], check=False).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, OSError):
            pass


def remove_stale():
    """The namespaces and links of runs whose process is gone: removed.
    Returns their names."""
    gone = []
    for line in _run([IP, "netns", "list"], check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if m and not _alive(int(m.group(1))):
            _kill_in(name)
            _run([IP, "netns", "del", name], check=False)
            gone.append(name)
    for line in _run([IP, "-o", "link", "show"], check=False).splitlines():
        m = re.match(r"\d+: (%s|%s)(\d+)[x@:]" % (BRIDGE, VETH), line)
        if m and not _alive(int(m.group(2))):
            name = line.split(":")[1].strip().split("@")[0]
            _run([IP, "link", "del", name], check=False)
            gone.append(name)
    return gone


class Host:
    """One network namespace on the bridge, with one address."""

    def __init__(self, net, name, ip, n):
        self.net = net
        self.name = name
        self.ns = "%s%d-%s" % (PREFIX, os.getpid(), name)
        self.ip = ip
        self.veth = "%s%dx%d" % (VETH, os.getpid(), n)
        self.sets = ([], [])  # (mute, deaf) as last written into its nftables

    def __repr__(self):
        return "%s(%s)" % (self.name, self.ip)

    @property
    def prefix(self):
        """What runs a command inside the namespace."""
        return [IP, "netns", "exec", self.ns]

    def popen(self, argv, **kw):
        return subprocess.Popen(self.prefix + list(argv), **kw)

    def run(self, argv, check=True, stdin=None):
        return _run(self.prefix + list(argv), check, stdin)


class Net:
    """The run's bridge and hosts; cut() and heal() change what they hear."""

    def __init__(self):
        why = usable()
        if why:
            raise NetError(why)
        self.stale = remove_stale()
        self.hosts = []
        self.bridge = "%s%d" % (BRIDGE, os.getpid())
        self.third, self._lock = self._claim()
        self.cuts = set()  # (from host, to host): packets dropped
        self._mutex = threading.Lock()
        self.closed = False
        _live.add(self)
        try:
            _run([IP, "link", "add", self.bridge, "type", "bridge"])
            _run([IP, "addr", "add", self.address(1) + "/24", "dev", self.bridge])
            _run([IP, "link", "set", self.bridge, "up"])
        except BaseException:
            self.close()
            raise

    def address(self, n):
        return "10.213.%d.%d" % (self.third, n)

    @staticmethod
    def _claim():
        """A third byte no interface uses and no other live run holds."""
        os.makedirs(_LOCK_DIR, exist_ok=True)
        used = _run([IP, "-4", "-o", "addr", "show"], check=False)
        for third in range(256):
            if re.search(r"inet 10\.213\.%d\." % third, used):
                continue
            f = open(os.path.join(_LOCK_DIR, str(third)), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            return third, f
        raise NetError("no free /24 in 10.213.0.0/16")

    def add(self, name):
        """A new host: its namespace, veth pair and address, loopback up,
        and its nftables table with the two sets empty."""
        n = len(self.hosts) + 2
        h = Host(self, name, self.address(n), n)
        self.hosts.append(h)
        _run([IP, "netns", "add", h.ns])
        _run([IP, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0",
              "netns", h.ns])
        _run([IP, "link", "set", h.veth, "master", self.bridge, "up"])
        _run([IP, "-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"])
        _run([IP, "-n", h.ns, "link", "set", "eth0", "up"])
        _run([IP, "-n", h.ns, "link", "set", "lo", "up"])
        h.run([NFT, "-f", "-"], stdin="""table inet hf3fs {
    set mute { type ipv4_addr; }
    set deaf { type ipv4_addr; }
    chain output { type filter hook output priority 0; policy accept; ip daddr @mute drop; }
    chain input { type filter hook input priority 0; policy accept; ip saddr @deaf drop; }
}
""")
        return h

    # ---- cuts ----

    def cut(self, side_a, side_b, one_way=False):
        """Drop every packet from a host of side_a to one of side_b, and
        (unless one_way) from side_b to side_a. Cuts add up until heal()."""
        with self._mutex:
            for a in side_a:
                for b in side_b:
                    if a is not b:
                        self.cuts.add((a, b))
                        if not one_way:
                            self.cuts.add((b, a))
            self._apply()

    def partition(self, *sides):
        """Only the given sides (lists of hosts) hear each other within a
        side; every earlier cut is replaced."""
        with self._mutex:
            self.cuts = set()
            for i, a in enumerate(sides):
                for b in sides[i + 1:]:
                    for x in a:
                        for y in b:
                            self.cuts.add((x, y))
                            self.cuts.add((y, x))
            self._apply()

    def heal(self):
        """Every cut gone."""
        with self._mutex:
            self.cuts = set()
            self._apply()

    def _apply(self):
        """Each host's sets made what self.cuts says: a dropped (a, b) is in
        a's mute set and b's deaf set."""
        for h in self.hosts:
            mute = sorted(b.ip for a, b in self.cuts if a is h)
            deaf = sorted(a.ip for a, b in self.cuts if b is h)
            if h.sets == (mute, deaf):
                continue
            h.sets = (mute, deaf)
            script = "flush set inet hf3fs mute\nflush set inet hf3fs deaf\n"
            if mute:
                script += "add element inet hf3fs mute { %s }\n" % ", ".join(mute)
            if deaf:
                script += "add element inet hf3fs deaf { %s }\n" % ", ".join(deaf)
            h.run([NFT, "-f", "-"], stdin=script)

    def describe(self):
        """The cuts now, as 'a->b' words (both ways: 'a<->b')."""
        out = []
        for a, b in sorted(self.cuts, key=lambda c: (c[0].name, c[1].name)):
            if (b, a) in self.cuts:
                if a.name < b.name:
                    out.append("%s<->%s" % (a.name, b.name))
            else:
                out.append("%s->%s" % (a.name, b.name))
        return " ".join(out) or "none"

    # ---- life ----

    def close(self):
        if self.closed:
            return
        self.closed = True
        for h in self.hosts:
            _kill_in(h.ns)
        for h in self.hosts:
            _run([IP, "netns", "del", h.ns], check=False)
        # a namespace outlives its name while a process killed above is
        # still exiting, and its veth pair with it: deleted by name
        for h in self.hosts:
            if os.path.exists("/sys/class/net/" + h.veth):
                _run([IP, "link", "del", h.veth], check=False)
        _run([IP, "link", "del", self.bridge], check=False)
        if self._lock:
            self._lock.close()
        _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _close_all():
    for net in list(_live):
        net.close()


atexit.register(_close_all)


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # so that atexit (and finally blocks) run


if threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _on_sigterm)


class NetCluster(redis_cluster.RedisCluster):
    """redis_cluster.RedisCluster with each node in a host of its own of
    net, bound to that host's address only (port 7000 + n, so that ports
    still name nodes); cluster-announce-ip is the host's address."""

    def __init__(self, net, **kw):
        super().__init__(**kw)
        self.net = net
        self.host_of = {}  # port -> Host

    def host(self, port):
        return self.host_of[port].ip

    def _config(self, node):
        path = super()._config(node)
        h = self.host_of[node.port]
        with open(path) as f:
            text = f.read().replace("bind 127.0.0.1", "bind %s" % h.ip)
        text += "cluster-announce-ip %s\nprotected-mode no\n" % h.ip
        with open(path, "w") as f:
            f.write(text)
        return path

    def _spawn(self, node):
        h = self.host_of[node.port]
        node.proc = spawn([self._config(node)], node.port, self.password,
                          env=module_env(self.module) if self.module else None,
                          host=h.ip, prefix=h.prefix)
        return node.proc is not None

    def _start_new_node(self):
        n = len(self.nodes)
        port = 7000 + n
        h = self.net.add("redis%d" % n)
        self.host_of[port] = h
        node = redis_cluster.Node(port, os.path.join(self.dir, str(port)))
        os.makedirs(node.dir, exist_ok=True)
        if not self._spawn(node):
            raise redis_cluster.ClusterError("redis-server did not start in %s (see %s)"
                                             % (h.ns, node.dir))
        self.nodes[port] = node
        return node

    def node_host(self, port):
        return self.host_of[port]

    def answers(self, port, timeout=0.5):
        """Whether the node answers PING within timeout (from the machine)."""
        try:
            c = Resp(host=self.host(port), port=port, timeout=timeout)
            try:
                return c.cmd("PING") == b"PONG"
            finally:
                c.close()
        except (OSError, RedisError):
            return False


__all__ = ["Net", "NetCluster", "NetError", "Host", "remove_stale", "usable", "kill"]

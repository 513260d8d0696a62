"""Ports for the servers the tests start, safe among suites that run at once.

A port is picked at random in a range below Linux's ephemeral ports (where
clients' connections take their local ports), checked free by binding it,
and claimed for the picking process: a file named after the port under
/tmp/hf3fs-test-ports-UID holds the claimant's pid (written whole, then
hard-linked into place). Another suite never picks a claimed port, also while
the claimant's server is stopped and about to start again on it; a claim whose
process is gone is taken over. Ranges: redis_server.pick_port 20000-22699 (and
its cluster bus, + 10000), harness.free_port 23000-29999. Both harnesses
count a server as started only when its own process listens on its port
(listens), not when another suite's server answers there.
"""

import os
import random
import socket

# Machine-wide, not under TMPDIR (each run of the suites has its own).
_DIR = "/tmp/hf3fs-test-ports-%d" % os.getuid()


def is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listens(pid, port):
    """Whether process pid holds a TCP socket listening on port: the server
    that answers there is that one, not another suite's."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        with open("/proc/%d/net/tcp" % pid) as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return False
    for row in rows:
        fields = row.split()
        if (fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port
                and fields[9] in inodes):
            return True
    return False


def _claim(port):
    """True when port is now this process's (or already was)."""
    os.makedirs(_DIR, exist_ok=True)
    path = os.path.join(_DIR, str(port))
    mine = os.path.join(_DIR, ".pid-%d" % os.getpid())
    if not os.path.exists(mine):
        with open(mine + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(mine + ".tmp", mine)
    for _ in range(2):
        try:
            os.link(mine, path)
            return True
        except FileExistsError:
            pass
        try:
            with open(path) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            return False
        if pid == os.getpid():
            return True
        if os.path.exists("/proc/%d" % pid):
            return False
        try:
            os.unlink(path)  # its process is gone
        except OSError:
            pass
    return False


def pick(lo, hi, taken=(), also_free=None):
    """A port p in [lo, hi) not in taken, free now (and p + also_free too,
    when given), claimed by this process."""
    for _ in range(1000):
        p = random.randrange(lo, hi)
        if p in taken or not is_free(p) or (also_free and not is_free(p + also_free)):
            continue
        if _claim(p):
            return p
    raise RuntimeError("no free port in [%d, %d)" % (lo, hi))

"""redis_server.py: a real redis-server for the tests, and a tiny RESP client (stdlib only).

    with RedisServer() as r:            # redis-server on a free port in a temp dir
        r.url                           # "redis://127.0.0.1:PORT"
        r.cmd("DBSIZE")                 # one command, its reply
        r.kill9(); r.start()            # SIGKILL, then start again on the same port and dir

The server binds 127.0.0.1 only, keeps its files in its own temporary directory
and is killed when the `with` block ends (or at exit, whatever happened).
appendonly=True starts it with `appendonly yes` and `appendfsync always`.

It loads the hf3fs-metad module unless loadmodule=False (a Redis without
it, for the start-up check):

    with RedisServer() as r:                  # with the hf3fs Redis module
        r.cmd("MODULE", "LIST")

loadmodule=True (the default) loads module_path() (env HF3FS_REDIS_MODULE,
else hf3fs_metad_redis.so next to $HF3FS_METAD_BIN: build/ or build/asan/,
else build/'s); loadmodule="PATH" loads that file; module_args are its
arguments (e.g. ["allocator", "libc"]). A module built with AddressSanitizer
runs with the ASan runtime preloaded (module_env()). The cluster's nodes
(redis_cluster.py) load it the same way.
"""

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import ports

REDIS_SERVER = os.environ.get("HF3FS_REDIS_SERVER", "redis-server")
MODULE_FILE = "hf3fs_metad_redis.so"
_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
_live = set()


def module_path():
    """The Redis module the tests load: $HF3FS_REDIS_MODULE, else
    hf3fs_metad_redis.so in the directory of $HF3FS_METAD_BIN (default
    build/hf3fs-metad), else build/'s, as an absolute path (Redis runs in its
    own directory); RuntimeError if there is none."""
    path = os.environ.get("HF3FS_REDIS_MODULE")
    if path:
        return os.path.abspath(path)
    binary = os.environ.get("HF3FS_METAD_BIN", os.path.join(_ROOT, "build", "hf3fs-metad"))
    tried = []
    for d in (os.path.dirname(os.path.abspath(binary)), os.path.join(_ROOT, "build")):
        path = os.path.join(d, MODULE_FILE)
        if os.path.exists(path):
            return path
        tried.append(path)
    raise RuntimeError("the hf3fs-metad Redis module is not built (%s): run make, or set "
                       "HF3FS_REDIS_MODULE" % " nor ".join(tried))


def module_is_sanitized(path):
    """Whether the module at path was built with -fsanitize=address."""
    try:
        with open(path, "rb") as f:
            return b"libasan.so" in f.read()
    except OSError:
        return False


def module_env(path):
    """The environment for a redis-server that loads the module at path:
    ours, plus (for a module built with -fsanitize=address) LD_PRELOAD of
    the ASan runtime, which must come before every other library; leak
    detection is off (Redis's own allocations are not ours to judge)."""
    env = dict(os.environ)
    if module_is_sanitized(path):
        cc = os.environ.get("CC", "gcc")
        lib = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
        env["LD_PRELOAD"] = " ".join(x for x in (lib, env.get("LD_PRELOAD", "")) if x)
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


def module_of(loadmodule):
    """The .so that loadmodule names (True: module_path()), or None."""
    if not loadmodule:
        return None
    return module_path() if loadmodule is True else os.path.abspath(loadmodule)


def _kill_all():
    for proc in list(_live):
        kill(proc)


atexit.register(_kill_all)


def pick_port(taken=()):
    """A port p where p and p + 10000 (its cluster bus) are free now, claimed
    by this process (ports.py)."""
    return ports.pick(20000, 22700, taken, also_free=10000)


def spawn(args, port, password=None, timeout=10.0, env=None, host="127.0.0.1", prefix=()):
    """redis-server with args (flags or a config file), once it answers PING
    on host:port (AUTH first with password) and its own process
    listens there (ports.listens): another test's server that took the port
    in the meantime does not count. None if it
    exited (the port taken) or did not answer within timeout (then it is
    killed). env: its environment (default ours); prefix: what runs it
    (netns.py: `ip netns exec NS`, which execs it: the same process)."""
    proc = subprocess.Popen(list(prefix) + [REDIS_SERVER] + list(args), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _live.add(proc)
    deadline = time.monotonic() + timeout
    while True:
        try:
            c = Resp(host=host, port=port, timeout=min(timeout, 2.0))
            try:
                if password:
                    c.cmd("AUTH", password)
                c.cmd("PING")
            finally:
                c.close()
            answers = True
        except RedisError as e:
            answers = "LOADING" not in str(e)
        except OSError:
            answers = False
        if answers and ports.listens(proc.pid, port):
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            kill(proc)
            return None
        time.sleep(0.02)


def kill(proc):
    """SIGKILL proc (a spawn()ed redis-server) if it runs, and wait for it."""
    if proc and proc.poll() is None:
        proc.kill()
        proc.wait()
    _live.discard(proc)


def info_fields(text):
    """An INFO reply (bytes or str) as {field: value}, both strings."""
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            name, value = line.split(":", 1)
            out[name] = value.strip()
    return out


class RedisError(Exception):
    pass


class Resp:
    """A blocking RESP2 connection: cmd(*args) -> reply (bytes, int, list, None)."""

    def __init__(self, host="127.0.0.1", port=6379, unix=None, timeout=10.0):
        if unix:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("redis closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("redis closed the connection")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return RedisError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RedisError("bad reply %r" % line)

    def cmd(self, *args):
        self.sock.sendall(self.encode(args))
        reply = self.read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def pipeline(self, commands):
        self.sock.sendall(b"".join(self.encode(c) for c in commands))
        return [self.read() for _ in commands]

    def close(self):
        self.sock.close()


class RedisServer:
    """redis-server on a free port (its bus port + 10000 free too) in a temp dir.
    loadmodule: True (module_path(), the default), a module's path, or False/None
    (a Redis without it); module_args: the arguments it is loaded with; host:
    the address it binds, prefix: what runs it (netns.py: a network
    namespace of its own, whose address host is)."""

    def __init__(self, appendonly=False, password=None, extra=(), loadmodule=True,
                 module_args=(), host="127.0.0.1", prefix=()):
        self.dir = tempfile.mkdtemp(prefix="hf3fs-redis.")
        self.host = host
        self.prefix = list(prefix)
        self.port = pick_port()
        self.appendonly = appendonly
        self.password = password
        self.extra = list(extra)
        self.module = module_of(loadmodule)
        self.module_args = [str(a) for a in module_args]
        self.proc = None
        self.unix = os.path.join(self.dir, "redis.sock")
        self._conn = None

    @property
    def url(self):
        return "redis://%s:%d" % (self.host, self.port)

    @property
    def unix_url(self):
        return "unix://" + self.unix

    def start(self, timeout=10.0):
        args = ["--port", str(self.port), "--bind", self.host,
                "--dir", self.dir, "--save", "", "--unixsocket", self.unix,
                "--unixsocketperm", "700", "--protected-mode", "no", "--daemonize", "no",
                "--logfile", os.path.join(self.dir, "redis.log")]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        if self.password:
            args += ["--requirepass", self.password]
        env = None
        if self.module:
            args += ["--loadmodule", self.module] + self.module_args
            env = module_env(self.module)
            if module_is_sanitized(self.module):  # reports beside redis.log (log())
                env["ASAN_OPTIONS"] += ":log_path=" + os.path.join(self.dir, "asan")
                env["UBSAN_OPTIONS"] += ":log_path=" + os.path.join(self.dir, "ubsan")
        args += self.extra
        first = self.proc is None
        for _ in range(5):
            self.proc = spawn(args, self.port, self.password, timeout, env, self.host,
                              self.prefix)
            if self.proc is not None or not first:
                break
            # another test's server took the port since pick_port: another one
            self.port = pick_port()
            args[args.index("--port") + 1] = str(self.port)
        if self.proc is None:
            raise RuntimeError("redis-server did not start: " + self.log())
        return self

    def log(self):
        """The end of redis.log, then any sanitizer report of the module."""
        out = ""
        for name in ["redis.log"] + sorted(n for n in os.listdir(self.dir)
                                           if n.startswith(("asan.", "ubsan."))):
            try:
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    out += f.read()[-3000:]
            except OSError:
                pass
        return out

    def sanitizer_reports(self):
        """The module's AddressSanitizer / UBSan reports so far (text)."""
        return "".join(open(os.path.join(self.dir, n), errors="replace").read()
                       for n in sorted(os.listdir(self.dir)) if n.startswith(("asan.", "ubsan.")))

    def connect(self):
        c = Resp(host=self.host, port=self.port)
        if self.password:
            c.cmd("AUTH", self.password)
        return c

    def cmd(self, *args):
        if self._conn is None:
            self._conn = self.connect()
        try:
            return self._conn.cmd(*args)
        except (OSError, ConnectionError):
            self._conn = None
            raise

    def replicate(self, primary, timeout=10.0):
        """This Redis follows primary (a RedisServer), until the primary
        counts it in sync (state=online: the replicas that WAIT counts)."""
        self.cmd("REPLICAOF", primary.host, str(primary.port))
        deadline = time.monotonic() + timeout
        while b",state=online," not in primary.cmd("INFO", "replication"):
            if time.monotonic() > deadline:
                raise AssertionError("replica %d not in sync with %d after %ss"
                                     % (self.port, primary.port, timeout))
            time.sleep(0.05)

    def kill9(self):
        self._conn = None
        kill(self.proc)

    @contextlib.contextmanager
    def frozen(self):
        """Redis gets no CPU (SIGSTOP) inside the block, and again after it,
        whatever ends it (SIGCONT)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield self
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def drop_clients(self):
        """Redis closes every client connection but the one asking: a
        front end opens its own again when next it needs one."""
        c = self.connect()
        try:
            c.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        finally:
            c.close()

    def stop(self):
        self._conn = None
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _live.discard(self.proc)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)


class Sentinel:
    """A Redis Sentinel (`redis-server CONFIG --sentinel`, Debian's
    redis-sentinel) on a free port, with its config file in a temp dir (it
    rewrites it), watching the primary `name` at 127.0.0.1:primary_port with
    the given quorum and short timeouts, so that a failover takes seconds:

        with Sentinel("hf3fs", primary.port) as s:
            s.cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "hf3fs")
            s.primary_port()            # the port it names, or None
    """

    def __init__(self, name, primary_port, quorum=2, down_after_ms=1000, failover_timeout_ms=3000,
                 taken=()):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="hf3fs-sentinel.")
        self.port = pick_port(taken)
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
                    "logfile %s\n" % (self.port, self.dir, os.path.join(self.dir, "sentinel.log")))
            f.write("sentinel monitor %s 127.0.0.1 %d %d\n" % (name, primary_port, quorum))
            f.write("sentinel down-after-milliseconds %s %d\n" % (name, down_after_ms))
            f.write("sentinel failover-timeout %s %d\n" % (name, failover_timeout_ms))
        self.proc = None

    def start(self, timeout=10.0):
        self.proc = spawn([self.conf, "--sentinel"], self.port, None, timeout)
        if self.proc is None:
            raise RuntimeError("redis-sentinel did not start: " + self.log())
        return self

    def log(self):
        try:
            with open(os.path.join(self.dir, "sentinel.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def cmd(self, *args):
        c = Resp(port=self.port, timeout=2.0)
        try:
            return c.cmd(*args)
        finally:
            c.close()

    def primary_port(self):
        """The port of the primary it names now, or None."""
        try:
            addr = self.cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
        except (OSError, ConnectionError, RedisError):
            return None
        return int(addr[1]) if addr else None

    def ready(self, sentinels, replicas):
        """Whether it knows that many other sentinels and replicas."""
        try:
            return (len(self.cmd("SENTINEL", "SENTINELS", self.name)) >= sentinels
                    and len(self.cmd("SENTINEL", "REPLICAS", self.name)) >= replicas)
        except (OSError, ConnectionError, RedisError):
            return False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        kill(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

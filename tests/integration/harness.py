"""harness.py: start hf3fs-metad on a free port and talk to it (stdlib only).

Used by every tests/integration/test_*.py script:

    import harness
    from harness import Server, expect_json, expect_error

    def test_something_that_must_hold():
        with Server("--eviction", "none") as srv:
            c = srv.client()
            r = c.post("/rank/0/initialize", {"role": "worker", "num_pages": 4})
            expect_json(r, 200, {"message": "Rank 0 initialized with 4 pages"})

    if __name__ == "__main__":
        harness.main(globals())

The binary is $HF3FS_METAD_BIN (default build/hf3fs-metad). Each Server runs in
its own temporary directory (its working directory and --persistence-path), on
127.0.0.1 and a port found by binding port 0; start-up waits for GET /health to
answer 200. Leaving the `with` block sends SIGTERM and fails the test unless the
server exits 0 within a few seconds: a clean shutdown is required, and under
AddressSanitizer a leak makes the exit status non-zero, so this catches leaks.

Engines: HF3FS_TEST_ENGINE=mem (the default) runs the embedded engine (as the
unit tests do: tests/engines.h); with HF3FS_TEST_ENGINE=redis every Server runs over Redis (--store):
one redis-server per test process (tests/integration/redis_server.py, started
on first use, killed at exit), one Redis database per Server object, emptied
when that Server first starts, so that a Server restarted with stop()/start()
finds its state again, as it does in its data directory with the embedded
engine. HF3FS_TEST_ENGINE=redis-cluster: the same over a local Redis Cluster
(tests/integration/redis_cluster.py: 3 primaries + 3 replicas, started on
first use), which has one database only: each new Server object empties it
(FLUSHALL on every primary). Server(..., store=URL) puts one server on a given
Redis whatever the variable says (several front ends over one Redis). A test
that only makes sense for one engine says so with @embedded_only or
@redis_only (both Redis engines).

Timeouts are multiplied by SLOWDOWN ($HF3FS_TEST_SLOWDOWN, default 3 when the
binary path contains "asan", else 1).
"""

import atexit
import contextlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import ports  # noqa: E402

BIN = os.environ.get("HF3FS_METAD_BIN", "build/hf3fs-metad")
# A command put before the server's (tests/valgrind.sh sets it to valgrind).
WRAPPER = shlex.split(os.environ.get("HF3FS_METAD_WRAPPER", ""))
# The --redis-timeout and --redis-connect-timeout of a suite run again over
# Redis (see Server).
ENGINE_REDIS_TIMEOUT_S = 10
SLOWDOWN = float(os.environ.get("HF3FS_TEST_SLOWDOWN", "3" if "asan" in BIN else "1"))
STARTUP_TIMEOUT = 5.0 * SLOWDOWN
SHUTDOWN_TIMEOUT = 5.0 * SLOWDOWN
REQUEST_TIMEOUT = 10.0 * SLOWDOWN

ENGINE = os.environ.get("HF3FS_TEST_ENGINE") or "mem"
if ENGINE not in ("mem", "redis", "redis-cluster"):
    raise SystemExit("HF3FS_TEST_ENGINE must be mem (the embedded engine), redis or "
                     "redis-cluster, not %r" % ENGINE)
# Both run the Redis engine: over one redis-server, or over a local Redis
# Cluster (3 primaries + 3 replicas, redis_cluster.py) shared by the tests
# of the process and emptied (FLUSHALL on every primary) for each new store.
REDIS_ENGINES = ("redis", "redis-cluster")

_shared_redis = None
_next_db = [0]

_SOURCE_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def release_versions():
    """What a build of this tree must say it is, read from the sources rather
    than from any binary: {"version": the file VERSION, "module_version":
    HF3FS_MODULE_VERSION and "value_encoding_version": HF3FS_TYPE_ENCVER
    (src/wire/wire.h), "data_format_version": WAL_VERSION and
    "data_format_oldest": WAL_VERSION_OLDEST (src/wal/format.h)}, all strings."""
    def read(path):
        with open(os.path.join(_SOURCE_ROOT, path)) as f:
            return f.read()

    def define(text, name):
        m = re.search(r"^#define %s\s+(?:\\\s*)?(\d+)\b" % name, text, re.M)
        assert m, "no #define %s found" % name
        return m.group(1)

    wire, wal = read("src/wire/wire.h"), read("src/wal/format.h")
    return {"version": read("VERSION").strip(),
            "module_version": define(wire, "HF3FS_MODULE_VERSION"),
            "value_encoding_version": define(wire, "HF3FS_TYPE_ENCVER"),
            "data_format_version": define(wal, "WAL_VERSION"),
            "data_format_oldest": define(wal, "WAL_VERSION_OLDEST")}


def shared_redis():
    """The test process's redis-server (started on first use)."""
    global _shared_redis
    if _shared_redis is None:
        from redis_server import RedisServer
        _shared_redis = RedisServer(extra=["--databases", "100000"]).start()
        atexit.register(_shared_redis.__exit__)
    return _shared_redis


def shared_cluster():
    """The test process's Redis Cluster (started on first use)."""
    import redis_cluster
    return redis_cluster.shared()


def new_redis_db():
    """A Redis URL of a database no other Server of this process uses; over
    the cluster (one database only), the cluster emptied."""
    if ENGINE == "redis-cluster":
        from redis_cluster import flush
        rc = shared_cluster()
        flush(rc)
        return "redis-cluster://" + rc.seeds()
    r = shared_redis()
    _next_db[0] += 1
    return "%s/%d" % (r.url, _next_db[0])


def embedded_only(fn):
    """Run this test only with the embedded engine (it is about its files)."""
    fn.engines = ("mem",)
    return fn


def redis_only(fn):
    fn.engines = REDIS_ENGINES
    return fn


_live_servers = set()
_live_lock = threading.Lock()


def _kill_leftovers():
    # Never leave a server running, whatever happened to the test.
    with _live_lock:
        procs = list(_live_servers)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


atexit.register(_kill_leftovers)


class ServerError(AssertionError):
    """The server did not start, died, or did not shut down cleanly."""


def free_port():
    """A port free now and claimed by this process (ports.py): no other
    suite's server and no client connection takes it meanwhile."""
    return ports.pick(23000, 30000)


def _tail(text, limit=4000):
    return text if len(text) <= limit else "...\n" + text[-limit:]


class Server:
    """One hf3fs-metad process. Use as a context manager, or start()/stop()."""

    def __init__(self, *flags, debug_api=True, persistence=True, port=None, store=None,
                 env=None, default_stripes=False, default_wait=False, binary=None,
                 host="127.0.0.1", prefix=()):
        self.flags = [str(f) for f in flags]
        self.binary = binary  # another build's hf3fs-metad (default BIN)
        # the address it listens on, and what runs it (netns.py: `ip netns
        # exec NS`, a network namespace of its own whose address host is)
        self.host = host
        self.prefix = list(prefix)
        # over a cluster: --redis-wait 0 unless given, or default_wait (the
        # store's own choice: 1 when every primary has a replica)
        self.default_wait = default_wait
        # over Redis: --stripes HF3FS_TEST_STRIPES if set (STRIPES), unless
        # default_stripes (the store's own choice, whatever the variable says)
        self.default_stripes = default_stripes
        self.env = env  # added to the server's environment
        self.debug_api = debug_api
        self.persistence = persistence
        self.store = store or None  # store="": the embedded engine whatever ENGINE says
        self._flush_store = False
        # a suite run again over Redis (HF3FS_TEST_ENGINE): Redis shares the
        # machine's 2 cores with every suite running at once, so its calls get
        # command and connect timeouts that a loaded machine cannot reach
        # (the suites that test a timeout itself pass their own)
        self._engine_run = store is None and ENGINE in REDIS_ENGINES
        if self._engine_run:
            self.store = new_redis_db()
            self._flush_store = ENGINE == "redis"
        self.proc = None
        self.port = None
        self.fixed_port = port  # a restart on the port of an earlier server
        self.workdir = None
        self._stderr_path = None
        self._clients = []

    # -- life cycle -------------------------------------------------------

    def start(self):
        last_error = None
        for _attempt in range(5):
            self.workdir = tempfile.mkdtemp(prefix="hf3fs-metad-test-")
            self.port = self.fixed_port or free_port()
            args = self.prefix + WRAPPER + [os.path.abspath(self.binary or BIN), "--host",
                                            self.host, "--port", str(self.port)]
            if self.store:
                args += ["--store", self.store]
                if os.environ.get("HF3FS_TEST_STRIPES") and not self.default_stripes:
                    args += ["--stripes", os.environ["HF3FS_TEST_STRIPES"]]
                if self._flush_store:
                    self._flush_store = False
                    r = shared_redis()
                    c = r.connect()
                    c.cmd("SELECT", self.store.rsplit("/", 1)[1])
                    c.cmd("FLUSHDB")
                    c.close()
            elif self.persistence:
                args += ["--persistence-path", os.path.join(self.workdir, "data")]
            if self.debug_api:
                args.append("--debug-api")
            for flag in ("--redis-timeout", "--redis-connect-timeout"):
                if self._engine_run and not any(f.startswith(flag) for f in self.flags):
                    args += [flag, str(ENGINE_REDIS_TIMEOUT_S)]
            # the test clusters have a replica per primary, so the default
            # would WAIT for one after every change: the suites test the
            # state and the routes at the speed of the primaries (WAIT and
            # its default: test_redis, test_cluster_engine)
            if (self.store and self.store.startswith("redis-cluster://")
                    and not self.default_wait
                    and not any(f.startswith("--redis-wait") for f in self.flags)):
                args += ["--redis-wait", "0"]
            args += self.flags
            self.args = args
            self._stderr_path = os.path.join(self.workdir, "stderr")
            with open(self._stderr_path, "wb") as err:
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err,
                                             stderr=subprocess.STDOUT, cwd=self.workdir,
                                             env=dict(os.environ, **(self.env or {})))
            with _live_lock:
                _live_servers.add(self.proc)
            try:
                self._wait_healthy()
                return self
            except ServerError as e:
                last_error = e
                died = self.proc.poll() is not None
                self._reap()
                text = str(e).lower()
                busy = "address already in use" in text or "eaddrinuse" in text or "bind" in text
                if died and busy and not self.fixed_port:
                    self._cleanup_dir()
                    continue  # somebody took the port: try another one
                self._cleanup_dir()
                raise
        raise last_error

    def _wait_healthy(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerError("server exited with status %s during start-up (%s)\n%s"
                                  % (rc, " ".join(self.args), _tail(self.stderr())))
            try:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
                conn.request("GET", "/health")
                resp = conn.getresponse()
                resp.read()
                conn.close()
                if resp.status == 200 and ports.listens(self.proc.pid, self.port):
                    return
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                raise ServerError("GET /health did not answer 200 within %.1f s (%s)\n%s"
                                  % (STARTUP_TIMEOUT, " ".join(self.args),
                                     _tail(self.stderr())))
            time.sleep(0.02)

    def stderr(self):
        try:
            with open(self._stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM; raise ServerError unless the server exits 0 in time."""
        if self.proc is None:
            return
        for c in self._clients:
            c.close()
        self._clients = []
        proc = self.proc
        try:
            if proc.poll() is not None:
                raise ServerError("server had already exited with status %s before SIGTERM\n%s"
                                  % (proc.returncode, _tail(self.stderr())))
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=SHUTDOWN_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise ServerError("server did not exit within %.1f s of SIGTERM\n%s"
                                  % (SHUTDOWN_TIMEOUT, _tail(self.stderr())))
            if rc != 0:
                raise ServerError("server exited with status %s after SIGTERM (a clean shutdown"
                                  " exits 0; under ASan a leak also makes it fail)\n%s"
                                  % (rc, _tail(self.stderr())))
        finally:
            self._reap()
            self._cleanup_dir()

    def _reap(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            with _live_lock:
                _live_servers.discard(self.proc)
            self.proc = None

    def _cleanup_dir(self):
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        try:
            self.stop()
        except ServerError as e:
            if exc is None:
                raise
            exc.add_note("and at shutdown: " + str(e))
        return False

    # -- talking to it ----------------------------------------------------

    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def client(self, timeout=None):
        c = Client(self.port, timeout, self.host)
        self._clients.append(c)
        return c

    def raw(self, timeout=None):
        return RawConn(self.port, timeout)

    def get_once(self, path):
        """GET path on a connection of its own, closed after the answer."""
        c = Client(self.port, host=self.host)
        try:
            return c.get(path)
        finally:
            c.close()

    def check(self):
        """GET /v1/check must answer 200 {"ok": true} (needs --debug-api)."""
        r = self.get_once("/v1/check")
        body = r.json_or_none()
        if r.status != 200 or not isinstance(body, dict) or body.get("ok") is not True:
            raise AssertionError("invariant checker failed: GET /v1/check -> %s %r"
                                 % (r.status, r.body[:2000]))

    def stats(self):
        """{(namespace, rank): pool stats dict} from GET /v1/stats."""
        r = self.get_once("/v1/stats")
        expect_status(r, 200)
        body = r.json()
        assert isinstance(body, dict) and isinstance(body.get("pools"), list), \
            "GET /v1/stats: no 'pools' list: %r" % (body,)
        out = {}
        for p in body["pools"]:
            out[(p["namespace"], p["rank"])] = p
        return out


# -- HTTP clients ----------------------------------------------------------

class LoggedServer(Server):
    """A Server whose whole log, its shutdown included, stays readable
    (last_stderr) after it stopped. Read once the process has exited: the
    start-up lines are written after the port answers /health, so a log read
    before SIGTERM could miss them on a loaded machine."""

    last_stderr = ""

    def _cleanup_dir(self):
        if self.workdir:
            self.last_stderr = self.stderr()
        super()._cleanup_dir()


class TokenFile:
    """A token file in a temporary directory, mode 600."""

    def __init__(self, content):
        self.dir = tempfile.mkdtemp(prefix="hf3fs-metad-auth-")
        self.path = os.path.join(self.dir, "token")
        with open(self.path, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        os.chmod(self.path, 0o600)

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        os.unlink(self.path)
        os.rmdir(self.dir)
        return False


class _Answer:
    """What Response and RawResponse share: headers as a list of (name,
    value), a body, and _said() naming the answer in a failure."""

    def header(self, name):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError("%s: body is not JSON: %r" % (self._said(), self.body[:500]))

    def json_or_none(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class Response(_Answer):
    def __init__(self, method, path, status, headers, body):
        self.method = method
        self.path = path
        self.status = status
        self.headers = headers  # a list of (name, value)
        self.body = body

    def _said(self):
        return "%s %s -> %s" % (self.method, self.path, self.status)

    def __repr__(self):
        return "%s %s -> %s %r" % (self.method, self.path, self.status, self.body[:500])


def encode_body(body):
    if body is None or isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body).encode("utf-8")


class Client:
    """A keep-alive HTTP/1.1 client on one connection (http.client)."""

    def __init__(self, port, timeout=None, host="127.0.0.1"):
        self.port = port
        self.conn = http.client.HTTPConnection(host, port,
                                               timeout=timeout or REQUEST_TIMEOUT)

    def request(self, method, path, body=None, headers=None):
        data = encode_body(body)
        hdrs = {}
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        self.conn.request(method, path, body=data, headers=hdrs)
        resp = self.conn.getresponse()
        payload = resp.read()
        return Response(method, path, resp.status, resp.getheaders(), payload)

    def post(self, path, body=None, headers=None):
        return self.request("POST", path, b"" if body is None else body, headers)

    def get(self, path, headers=None):
        return self.request("GET", path, None, headers)

    def socket(self):
        return self.conn.sock

    def close(self):
        self.conn.close()


class RawResponse(_Answer):
    def __init__(self, version, status, reason, headers, body):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def _said(self):
        return "status %s" % self.status

    def __repr__(self):
        return "%s %s %r" % (self.version, self.status, self.body[:500])


class RawConn:
    """A raw TCP connection for what http.client cannot do: pipelining,
    hand-made chunked bodies, Expect: 100-continue, HTTP/1.0."""

    def __init__(self, port, timeout=None):
        self.sock = socket.create_connection(("127.0.0.1", port),
                                             timeout=timeout or REQUEST_TIMEOUT)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed by the server (buffered: %r)" % self.buf[:200])
        self.buf += chunk

    def read_until(self, sep, limit=1 << 20):
        while sep not in self.buf:
            if len(self.buf) > limit:
                raise AssertionError("no %r within %d bytes" % (sep, limit))
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        """Status line and headers: (version, status, reason, headers)."""
        head = self.read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers.append((k.strip(), v.strip()))
        return version, status, reason, headers

    def read_response(self, head_request=False):
        """One response; an interim 1xx is returned as is (without body)."""
        version, status, reason, headers = self.read_head()
        hdr = {k.lower(): v for k, v in headers}
        if 100 <= status < 200 or status in (204, 304) or head_request:
            body = b""
        elif "chunked" in hdr.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size_line = self.read_until(b"\r\n")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    # trailers until the empty line
                    while self.read_until(b"\r\n") != b"\r\n":
                        pass
                    break
                body += self.read_exact(size)
                self.read_exact(2)
        elif "content-length" in hdr:
            body = self.read_exact(int(hdr["content-length"]))
        else:
            body = self.read_to_close()
        return RawResponse(version, status, reason, headers, body)

    def read_to_close(self, timeout=None):
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            self.buf += chunk
        out, self.buf = self.buf, b""
        return out

    def closed_by_peer(self, timeout):
        """True if the server closes the connection within timeout seconds
        (any bytes it sends first are kept in the buffer)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def raw_request(method, path, body=b"", headers=None, version="HTTP/1.1", content_length=True):
    """Bytes of one request; adds Host and (unless told not to) Content-Length."""
    body = encode_body(body) or b""
    lines = ["%s %s %s" % (method, path, version), "Host: 127.0.0.1"]
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    if content_length and not any(k.lower() in ("content-length", "transfer-encoding")
                                  for k in (headers or {})):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(body, sizes):
    """body in chunked transfer encoding, cut into pieces of the given sizes
    (the last size is repeated)."""
    body = encode_body(body)
    out = b""
    i = 0
    k = 0
    while i < len(body):
        n = sizes[min(k, len(sizes) - 1)]
        piece = body[i:i + n]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
        i += n
        k += 1
    return out + b"0\r\n\r\n"


# -- assertions ------------------------------------------------------------

def fail(msg):
    raise AssertionError(msg)


def expect_status(resp, status):
    ok = resp.status in status if isinstance(status, (set, tuple, list)) else resp.status == status
    if not ok:
        raise AssertionError("expected status %s, got %r" % (status, resp))


def expect_json(resp, status, body=None):
    """Status, Content-Type application/json, and (if given) the exact body."""
    expect_status(resp, status)
    ctype = resp.header("Content-Type") or ""
    if not ctype.lower().startswith("application/json"):
        raise AssertionError("expected Content-Type application/json, got %r on %r"
                             % (ctype, resp))
    got = resp.json()
    if body is not None and got != body:
        raise AssertionError("expected body %r, got %r" % (body, resp))
    return got


def expect_no_body(resp, status=204):
    expect_status(resp, status)
    if resp.body not in (b"",):
        raise AssertionError("expected no body, got %r" % (resp,))


def expect_error(resp, status, detail=None):
    """An error answer: status (or one of a set), a JSON object with a
    non-empty string detail, exactly `detail` if given."""
    expect_status(resp, status)
    got = resp.json_or_none()
    if not isinstance(got, dict):
        raise AssertionError("error answer is not a JSON object: %r" % (resp,))
    d = got.get("detail")
    if not isinstance(d, str) or not d:
        raise AssertionError("error answer has no non-empty string detail: %r" % (resp,))
    if detail is not None and d != detail:
        raise AssertionError("expected detail %r, got %r (%r)" % (detail, d, resp))
    return got


def expect_eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: expected %r, got %r" % (what or "value", want, got))


def expect_true(cond, what):
    if not cond:
        raise AssertionError(what)


def disk_fault_env(spec):
    """The environment that makes a server started with it meet disk faults
    beneath its log: tests/fault/fault.h (the library the build puts in
    tests/ beside the binary, preloaded) says what `spec` may hold."""
    lib = os.path.join(os.path.dirname(os.path.abspath(BIN)), "tests", "libhf3fs_fault.so")
    if not os.path.exists(lib):
        raise AssertionError("%s does not exist: make units builds it" % lib)
    asan = os.environ.get("ASAN_OPTIONS", "")
    # The sanitizer runtime wants to be the first library loaded; this one is.
    asan = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    return {"LD_PRELOAD": lib, "HF3FS_TEST_FAULT": spec, "ASAN_OPTIONS": asan}


class TooSlow(Exception):
    """The steps that had to fit inside a lease took the lease or longer: on
    this (loaded) machine the test's premise did not hold, so it judged
    nothing. with_lease() runs the test again with a longer lease."""


class LeaseWindow:
    """Times the steps that a test needs to happen inside a lease of `seconds`,
    from the moment it is made (before the first step that starts a lease).

        w = LeaseWindow(lease)
        ...steps that must all happen before the lease ends...
        w.fits()          # raises TooSlow if they did not
        ...judge what they answered...
        w.sleep_past()    # now every lease started in the window is over
    """

    def __init__(self, seconds):
        self.seconds = seconds
        self.start = time.monotonic()

    def fits(self):
        # Half the lease: the server's clock starts the lease a little after
        # our start, and a reply read late does not mean the server was late.
        took = time.monotonic() - self.start
        if took >= self.seconds / 2:
            raise TooSlow("steps took %.3f s of a %.3f s lease" % (took, self.seconds))

    def sleep_past(self, margin=0.1):
        """Sleep until every lease started in the window has ended: fits()
        holds the steps to half a lease, so 1.5 leases from the start."""
        time.sleep(max(0.0, self.start + self.seconds * 1.5 + margin - time.monotonic()))


def with_lease(scenario, seconds, tries=4):
    """Run scenario(lease) with lease = seconds; when its steps did not fit in
    the lease (TooSlow), run it again with a lease twice as long, at most
    `tries` times. A test whose premise never held fails: a machine that
    cannot do a few requests in seconds is a finding too."""
    for attempt in range(tries):
        try:
            return scenario(seconds)
        except TooSlow as e:
            sys.stderr.write("# %s; again with a %.2f s lease\n" % (e, seconds * 2))
            seconds *= 2
    raise AssertionError("the steps never fit inside a lease, up to %.2f s" % (seconds / 2))


@contextlib.contextmanager
def running(threads, stop, join_s):
    """Start threads that run until stop is set; at the end of the block,
    whatever ended it (an assertion included), set stop and join each for
    up to join_s seconds."""
    for t in threads:
        t.start()
    try:
        yield threads
    finally:
        stop.set()
        for t in threads:
            t.join(join_s)


def wait_for(predicate, timeout, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def stock_session():
    """A requests session with the stock clients' retry policy and no
    timeout (Debian's python3-requests, installed by `make deps`)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry
    s = requests.Session()
    retry = Retry(total=3, backoff_factor=0.3, status_forcelist=[500, 502, 503, 504],
                  allowed_methods=["GET", "POST"])
    s.mount("http://", HTTPAdapter(max_retries=retry))
    return s


# -- the two dialects, answers checked for shape -----------------------------

def _ns_body(body, ns):
    if ns is not None:
        body = dict(body, namespace=ns)
    return body


def v_init(c, rank, num_pages, role="worker"):
    r = c.post("/rank/%d/initialize" % rank, {"role": role, "num_pages": num_pages})
    expect_json(r, 200, {"message": "Rank %d initialized with %d pages" % (rank, num_pages)})


def v_alloc(c, rank, keys):
    """vLLM batch_allocate; keys are strings or [key, prefix] pairs. Returns
    the pages (one per key, -1 = none) after checking the answer's shape."""
    r = c.post("/keys/batch_allocate", {"rank": rank, "keys": keys})
    body = expect_json(r, 200)
    names = [k if isinstance(k, str) else k[0] for k in keys]
    expect_eq(body.get("rank"), rank, "batch_allocate rank echo")
    results = body.get("results")
    expect_true(isinstance(results, list) and len(results) == len(keys),
                "batch_allocate results: one per key expected: %r" % (body,))
    pages = []
    for name, item in zip(names, results):
        expect_true(isinstance(item, list) and len(item) == 2 and item[0] == name
                    and type(item[1]) is int,
                    "batch_allocate result item should be [%r, page]: %r" % (name, item))
        pages.append(item[1])
    return pages


def v_confirm(c, rank, confirmations, release=None):
    body = {"rank": rank, "confirmations": [list(x) for x in confirmations]}
    if release is not None:
        body["pages_to_release"] = list(release)
    expect_no_body(c.post("/keys/confirm_write", body), 204)


# What a read answers for each key, and its name in a failure.
A_BOOL = ("one bool", lambda x: type(x) is bool)
A_PAGE = ("one page or null", lambda x: x is None or type(x) is int)
AN_ENTRY = ("one entry", lambda x: True)


def per_key(r, field, keys, answer):
    """The list `field` of a 200 answer r: one item per key, each an answer
    (A_BOOL, A_PAGE, AN_ENTRY)."""
    body = expect_json(r, 200)
    got = body.get(field)
    what, fits = answer
    expect_true(isinstance(got, list) and len(got) == len(keys) and all(fits(x) for x in got),
                "%s: %s per key expected: %r" % (r.path.rsplit("/", 1)[-1], what, body))
    return got


def v_exists(c, keys):
    return per_key(c.post("/keys/batch_exists", {"keys": keys}), "exists", keys, A_BOOL)


def v_locations(c, rank, keys):
    r = c.post("/keys/get_locations", {"rank": rank, "keys": keys})
    return per_key(r, "locations", keys, A_PAGE)


def s_init(c, rank, num_pages, ns=None):
    r = c.post("/%d/initialize" % rank, _ns_body({"num_pages": num_pages}, ns))
    expect_no_body(r, 204)


def s_alloc(c, rank, keys, ns=None):
    """SGLang reserve_and_allocate_page_indices; returns [(existed, page)]."""
    pairs = [[k, ""] if isinstance(k, str) else k for k in keys]
    r = c.post("/%d/reserve_and_allocate_page_indices" % rank, _ns_body({"keys": pairs}, ns))
    out = []
    for item in per_key(r, "indices", keys, AN_ENTRY):
        expect_true(isinstance(item, list) and len(item) == 2 and type(item[0]) is bool
                    and type(item[1]) is int,
                    "reserve_and_allocate_page_indices item should be [bool, page]: %r" % (item,))
        out.append((item[0], item[1]))
    return out


def s_confirm(c, rank, confirmations=None, release=None, ns=None):
    body = {}
    if confirmations is not None:
        body["written_keys_to_confirm"] = [list(x) for x in confirmations]
    if release is not None:
        body["pages_to_release"] = list(release)
    expect_no_body(c.post("/%d/confirm_write" % rank, _ns_body(body, ns)), 204)


def s_exists(c, rank, keys, ns=None):
    r = c.post("/%d/exists" % rank, _ns_body({"keys": keys}, ns))
    return per_key(r, "exists", keys, A_BOOL)


def s_pages(c, rank, keys, ns=None):
    """SGLang get_page_indices: page or None per key."""
    r = c.post("/%d/get_page_indices" % rank, _ns_body({"keys": keys}, ns))
    return per_key(r, "indices", keys, A_PAGE)


def s_delete(c, rank, keys, ns=None):
    expect_no_body(c.post("/%d/delete_keys" % rank, _ns_body({"keys": keys}, ns)), 204)


def s_clear(c, rank, ns=None):
    expect_no_body(c.post("/%d/clear" % rank, _ns_body({}, ns)), 204)


# The stripes of the namespaces a suite run over Redis creates
# (HF3FS_TEST_STRIPES, given to every Server as --stripes); 1 otherwise:
# without --stripes a pool of fewer than 2 x 2,500 pages creates a
# namespace of one stripe over a cluster too (docs/many-nodes.md "Choosing
# S"), and the pools whose pages the suites count are smaller (at most
# 1,024 pages; test_stripes.py checks the count itself).
STRIPES = (int(os.environ.get("HF3FS_TEST_STRIPES") or 1) if ENGINE in REDIS_ENGINES else 1)


_bench = {}


def bench_module(name):
    """bench/<name> (a Python script without .py) as a module, loaded once."""
    if name not in _bench:
        import importlib.machinery
        import importlib.util
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                            name)
        loader = importlib.machinery.SourceFileLoader("bench_" + name, path)
        spec = importlib.util.spec_from_loader("bench_" + name, loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        _bench[name] = mod
    return _bench[name]


def bench_replay():
    """bench/replay as a module (its trace readers and its stripe_of)."""
    return bench_module("replay")


def stripe_of(key, count):
    """wire_stripe_of (src/wire/wire.c), by bench/replay's stripe_of (its
    one Python copy, pinned by test_trace_replay.py's vectors)."""
    return bench_replay().stripe_of(key.encode() if isinstance(key, str) else key, count)


def in_stripe0(name):
    """A key named after `name` that belongs to stripe 0 of a namespace of
    STRIPES stripes: `name` itself at one stripe. A test that counts the
    pages of a tiny pool uses such keys and STRIPES times the pages: stripe 0
    then has the pages the test counts (pages 0, S, 2S, ...: a page p of the
    test at one stripe is p x S), and every other stripe as many, free (so
    counted in the pool's free pages). At S = 1 the test is unchanged."""
    key, i = name, 0
    while stripe_of(key, STRIPES) != 0:
        i += 1
        key = "%s.%d" % (name, i)
    return key


# What a page number is not, and how a refusal names it: JSON's true is not
# page 1, nor "3" page 3.
NOT_PAGE_NUMBERS = ((True, "a boolean"), (False, "a boolean"), (1.5, "a non-integer number"),
                    ("3", "a string"))


def expect_page_numbers_refused(c, path, base, confirm_field, key):
    """Each of NOT_PAGE_NUMBERS as the page of key's confirmation (the list
    confirm_field) and as a page to release, in a confirm_write to path whose
    body has base's members too (vLLM's rank): a 400 that names the field."""
    for value, kind in NOT_PAGE_NUMBERS:
        for field, extra in (("%s[0][1]" % confirm_field, {confirm_field: [[key, value]]}),
                             ("pages_to_release[0]", {confirm_field: [], "pages_to_release": [value]})):
            try:
                expect_error(c.post(path, dict(base, **extra)), 400,
                             "'%s' must be an integer page number, got %s" % (field, kind))
            except AssertionError as e:
                raise AssertionError("%s = %s: %s" % (field, json.dumps(value), e))


def pool_states(stats, ns, rank):
    """(num_pages, free, reserved, owned, draining, keys) of one pool."""
    p = stats[(ns, rank)]
    return tuple(p[f] for f in ("num_pages", "free", "reserved", "owned", "draining", "keys"))


# -- runner ----------------------------------------------------------------

class Skip(Exception):
    """Raised by a test that cannot run here, saying why: printed as SKIP,
    counted apart, never a failure."""


# What ended a thread of a test with an exception (an assertion in a load
# thread ends only that thread): the test it happened during fails.
_thread_errors = []
_thread_errors_lock = threading.Lock()
_default_excepthook = threading.excepthook


def _thread_excepthook(args):
    if not issubclass(args.exc_type, SystemExit):
        with _thread_errors_lock:
            _thread_errors.append("%s: %s: %s" % (args.thread.name if args.thread else "a thread",
                                                  args.exc_type.__name__, args.exc_value))
    _default_excepthook(args)


threading.excepthook = _thread_excepthook


class _Tally:
    """PASS/FAIL/SKIP lines as results come, and the counts for the summary."""

    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def report(self, ok, name, text=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print("%s %s%s" % ("PASS" if ok else "FAIL", name, text), flush=True)

    def run(self, name, fn):
        t0 = time.monotonic()
        with _thread_errors_lock:
            seen = len(_thread_errors)
        try:
            fn()
            with _thread_errors_lock:
                new = _thread_errors[seen:]
            if new:
                raise AssertionError("an exception ended %d thread(s) of the test: %s"
                                     % (len(new), " | ".join(new[:3])))
        except Skip as s:
            self.skipped += 1
            print("SKIP %s: %s" % (name, s), flush=True)
        except BaseException as e:  # noqa: B902 - a test must never stop the run
            if isinstance(e, KeyboardInterrupt):
                raise
            lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
            first = " | ".join(lines[:2]) or type(e).__name__
            self.report(False, name, " (%.2fs): %s: %s" % (time.monotonic() - t0,
                                                           type(e).__name__, first[:400]))
            sys.stderr.write("---- %s\n" % name)
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
        else:
            self.report(True, name, " (%.2fs)" % (time.monotonic() - t0))


# How long the end of a script waits for the threads its tests started (a
# thread that loops until a test tells it to stop loops forever if the test
# failed first); those still running then fail the script, which exits
# without them.
THREADS_GRACE_S = 10.0 * SLOWDOWN


def _threads_left(grace_s):
    """The tests' threads still running after waiting up to grace_s for them."""
    deadline = time.monotonic() + grace_s
    left = []
    for t in threading.enumerate():
        if t is threading.main_thread() or t.daemon:
            continue
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            left.append(t)
    return left


def main(namespace, first=None):
    """Run every test_* function of the module in definition order (or only
    those whose names contain one of argv[1:]); print PASS/FAIL/SKIP per test
    and "N passed, N failed[, N skipped]"; exit 0 only if none failed and one
    passed. first(report), if given, runs before the tests and reports
    results of its own with report(ok, name, text) (test_client_lib: the C
    program's tests)."""
    wanted = sys.argv[1:]
    tests = [(name, fn) for name, fn in namespace.items()
             if name.startswith("test_") and callable(fn)
             and ENGINE in getattr(fn, "engines", ("mem",) + REDIS_ENGINES)
             and (not wanted or any(w in name for w in wanted))]
    if not os.path.exists(BIN):
        print("FAIL setup: server binary %s does not exist (set HF3FS_METAD_BIN)" % BIN)
        print("0 passed, %d failed" % max(1, len(tests)))
        sys.exit(1)
    tally = _Tally()
    t_all = time.monotonic()
    if first:
        first(tally.report)
    for name, fn in tests:
        tally.run(name, fn)
    _kill_leftovers()
    left = _threads_left(THREADS_GRACE_S)
    if left:
        tally.report(False, "threads-left", ": %d thread(s) of the tests still running %.0f s "
                     "after the last test (a test that failed before it stopped its load?): %s"
                     % (len(left), THREADS_GRACE_S, ", ".join(t.name for t in left)))
    print("# %s (%s engine): %.1f s" % (os.path.basename(sys.argv[0]), ENGINE,
                                        time.monotonic() - t_all))
    line = "%d passed, %d failed" % (tally.passed, tally.failed)
    if tally.skipped:
        line += ", %d skipped" % tally.skipped
    print(line, flush=True)
    code = 0 if tally.failed == 0 and tally.passed > 0 else 1
    if left:
        # Python would join them at exit, forever if they loop: end here
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

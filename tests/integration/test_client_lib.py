#!/usr/bin/python3
"""libhf3fsmeta against a live hf3fs-metad.

Runs the C test program (tests/client/test_client.c, built by `make units`
into <build>/client-tests/test_client) against a server on a free port and
relays its PASS/FAIL lines: unit tests of the HTTP and JSON readers, the
transport against scripted fake servers (retries, timeouts, auth headers,
chunked answers), and every library call against the real server. Then the
example program of docs/client.md, the shared library through ctypes, its exported
symbols, and auth (skipped while the server has no --auth-token-file).

The build directory is the one of $HF3FS_METAD_BIN (as tests/run-all.sh sets
it), so `build/asan` runs the sanitized test program.
"""

import ctypes
import os
import re
import shutil
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Server, Skip, TokenFile, expect_eq, expect_true  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.path.dirname(os.path.abspath(harness.BIN))
TEST_CLIENT = os.path.join(BUILD_DIR, "client-tests", "test_client")
EXAMPLE = os.path.join(BUILD_DIR, "client-tests", "example")
SHARED_LIB = os.path.join(BUILD_DIR, "libhf3fsmeta.so")
HEADER = os.path.join(ROOT, "include", "hf3fs_meta.h")
SANITIZED = "asan" in BUILD_DIR
C_TIMEOUT = 300 * (3 if SANITIZED else 1)


def url_of(srv, userinfo=None):
    return "http://%s127.0.0.1:%d" % (userinfo + "@" if userinfo else "", srv.port)


def need(path, what):
    if not os.path.exists(path):
        raise AssertionError("%s %s does not exist (build it with `make units`)" % (what, path))


def run_c_program(args):
    """Run test_client; returns (returncode, [(status, name, text)], output)."""
    need(TEST_CLIENT, "test program")
    proc = subprocess.run([TEST_CLIENT] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=C_TIMEOUT)
    out = proc.stdout.decode("utf-8", "replace")
    results = []
    for line in out.splitlines():
        m = re.match(r"^(PASS|FAIL) (\S+)(.*)$", line)
        if m:
            results.append((m.group(1), m.group(2), m.group(3)))
    return proc.returncode, results, out


def server_supports_auth():
    try:
        out = subprocess.run([os.path.abspath(harness.BIN), "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=10).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return False
    return "--auth-token-file" in out


# -- Python-side tests ---------------------------------------------------------

def test_docs_example_allocates_confirms_and_finds_its_keys():
    need(EXAMPLE, "example program")
    with Server() as srv:
        p = subprocess.run([EXAMPLE, url_of(srv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30)
        expect_eq(p.returncode, 0, "example exit status (stderr %r)" % p.stderr)
        lines = p.stdout.decode().splitlines()
        expect_eq(len(lines), 2, "example output lines %r" % lines)
        for line in lines:
            expect_true(line.endswith("exists yes"), "example line %r" % line)
        st = srv.stats()
        expect_eq((st[("kv", 0)]["owned"], st[("kv", 0)]["keys"]), (2, 2), "pool after example")


def test_docs_example_reports_the_server_detail_on_failure():
    need(EXAMPLE, "example program")
    with Server("--max-pages", "100") as srv:  # 1024 pages is over this limit: 400
        p = subprocess.run([EXAMPLE, url_of(srv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30)
        expect_eq(p.returncode, 1, "example exit status")
        err = p.stderr.decode()
        expect_true("HTTP 400: Invalid initialization parameters" in err,
                    "example stderr should carry the server's detail: %r" % err)


def test_shared_library_exports_exactly_the_public_api():
    need(SHARED_LIB, "shared library")
    nm = shutil.which("nm")
    if not nm:
        raise Skip("nm is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", SHARED_LIB], stdout=subprocess.PIPE,
                         timeout=30).stdout.decode()
    exported = {ln.split()[-1] for ln in out.splitlines()
                if len(ln.split()) >= 3 and ln.split()[1] in ("T", "W")}
    with open(HEADER) as f:
        declared = set(re.findall(r"HF3FS_META_API[^;]*?\b(hf3fs_meta_\w+)\s*\(", f.read()))
    expect_true(len(declared) >= 30, "header declarations found: %r" % sorted(declared))
    expect_eq(sorted(exported), sorted(declared), "exported functions vs. the header")


def test_shared_library_needs_only_the_c_library():
    need(SHARED_LIB, "shared library")
    out = subprocess.run(["ldd", SHARED_LIB], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=30).stdout.decode()
    libs = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    allowed = ("linux-vdso", "libc.so", "/lib64/ld-linux", "ld-linux")
    if SANITIZED:
        allowed += ("libasan", "libubsan", "libm.so", "libgcc_s", "libstdc++", "libpthread",
                    "libdl", "librt")
    extra = [lib for lib in libs if not lib.startswith(allowed) and not any(a in lib for a in allowed)]
    expect_eq(extra, [], "libraries libhf3fsmeta.so depends on (ldd: %r)" % out)


def test_shared_library_works_through_ctypes():
    need(SHARED_LIB, "shared library")
    if SANITIZED:
        raise Skip("an ASan-instrumented .so cannot be loaded into an uninstrumented python")
    lib = ctypes.CDLL(SHARED_LIB)
    lib.hf3fs_meta_version.restype = ctypes.c_char_p
    lib.hf3fs_meta_strerror.restype = ctypes.c_char_p
    lib.hf3fs_meta_strerror.argtypes = [ctypes.c_int]
    lib.hf3fs_meta_last_error.restype = ctypes.c_char_p
    lib.hf3fs_meta_last_error.argtypes = [ctypes.c_void_p]
    lib.hf3fs_meta_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.hf3fs_meta_close.argtypes = [ctypes.c_void_p]
    lib.hf3fs_meta_health.argtypes = [ctypes.c_void_p]
    lib.hf3fs_meta_vllm_init_worker.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    lib.hf3fs_meta_vllm_batch_exists.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                                 ctypes.c_size_t, ctypes.POINTER(ctypes.c_bool)]
    expect_eq(lib.hf3fs_meta_version(), b"0.1.0", "version")
    expect_eq(lib.hf3fs_meta_strerror(-31406), b"pool not initialized (HTTP 404)", "strerror")
    with Server() as srv:
        c = ctypes.c_void_p()
        expect_eq(lib.hf3fs_meta_open(url_of(srv).encode(), ctypes.byref(c)), 0, "open")
        try:
            expect_eq(lib.hf3fs_meta_health(c), 0, "health")
            expect_eq(lib.hf3fs_meta_vllm_init_worker(c, 0, 0), -31405, "init with 0 pages")
            expect_true(b"Invalid initialization parameters" in lib.hf3fs_meta_last_error(c),
                        "last error %r" % lib.hf3fs_meta_last_error(c))
            keys = (ctypes.c_char_p * 2)(b"a", b"b")
            out = (ctypes.c_bool * 2)()
            expect_eq(lib.hf3fs_meta_vllm_batch_exists(c, keys, 2, out), 0, "batch_exists")
            expect_eq(list(out), [False, False], "exists")
        finally:
            lib.hf3fs_meta_close(c)


def test_basic_auth_from_url_against_a_server_with_a_token():
    if not server_supports_auth():
        raise Skip("hf3fs-metad has no --auth-token-file yet (client side tested against a fake"
                   " server in test_client: basic_auth_*, bearer_token_*)")
    need(EXAMPLE, "example program")
    with TokenFile("s3cret-token\n") as path, Server("--auth-token-file", path) as srv:
        ok = subprocess.run([EXAMPLE, url_of(srv, ":s3cret-token")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
        expect_eq(ok.returncode, 0, "example with the right token (stderr %r)" % ok.stderr)
        bad = subprocess.run([EXAMPLE, url_of(srv, ":wrong")], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=30)
        expect_eq(bad.returncode, 1, "example with a wrong token")
        expect_true(b"401" in bad.stderr, "a wrong token should be a 401: %r" % bad.stderr)


# -- runner --------------------------------------------------------------------

def c_program_tests(report):
    """The C program: unit, fake-server and live tests on one server, each
    reported as test_client.NAME (run before the Python-side tests)."""
    def c_group(label, server_flags, extra_args):
        try:
            with Server(*server_flags) as srv:
                rc, results, out = run_c_program(["--url", url_of(srv)] + extra_args)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            report(False, "test_client.%s" % label, ": %s: %s" % (type(e).__name__, e))
            traceback.print_exc(file=sys.stderr)
            return
        for status, name, text in results:
            report(status == "PASS", "test_client." + name, text)
        fails = sum(1 for r in results if r[0] == "FAIL")
        if rc != 0 and fails == 0:
            report(False, "test_client.%s_exit_status" % label,
                   ": exited %s with no FAIL line (a sanitizer report?)\n%s" % (rc, out[-3000:]))
        if not results:
            report(False, "test_client.%s_ran_tests" % label, ": no test ran\n%s" % out[-3000:])

    c_group("all", [], [])
    c_group("idle", ["--idle-timeout", "1"], ["--idle"])


if __name__ == "__main__":
    harness.main(globals(), first=c_program_tests)

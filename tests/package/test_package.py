"""test_package.py: the Debian package serves, unpacked and uninstalled.

    /usr/bin/python3 tests/package/test_package.py [build/deb/hf3fs-metad_VERSION_ARCH.deb]

Run by `make test-deb` after `make deb` (mk/deb.mk), not by `make test`: the
package takes a minute to build on 2 cores. The .deb (default: the one of
VERSION and this machine's architecture in build/deb/) is unpacked with
`dpkg-deb -x` into a temporary directory, nothing is installed; its server
then serves a vLLM session and an SGLang session (the README's, answer for
answer) on the embedded engine and again over a redis-server that loaded
the package's module, and its files are where Debian looks for them."""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

with open(os.path.join(ROOT, "VERSION")) as _f:
    VERSION = _f.read().strip()
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                      check=True).stdout.strip()
DEB = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 and sys.argv[1].endswith(".deb")
                      else os.path.join(ROOT, "build", "deb",
                                        "hf3fs-metad_%s_%s.deb" % (VERSION, ARCH)))
if not os.path.exists(DEB):
    print("FAIL setup: %s does not exist (make deb)" % DEB)
    print("0 passed, 1 failed")
    sys.exit(1)

UNPACKED = tempfile.mkdtemp(prefix="hf3fs-metad-deb-")
subprocess.run(["dpkg-deb", "-x", DEB, UNPACKED], check=True)
SERVER = os.path.join(UNPACKED, "usr", "sbin", "hf3fs-metad")
CLI = os.path.join(UNPACKED, "usr", "bin", "hf3fs-meta")
MODULE = os.path.join(UNPACKED, "usr", "lib", "redis", "modules", "hf3fs_metad_redis.so")
# harness reads the binary to run from the environment when imported
os.environ["HF3FS_METAD_BIN"] = SERVER

import harness  # noqa: E402
from harness import Server, expect_eq, expect_json, expect_no_body, expect_true  # noqa: E402
import redis_server  # noqa: E402


def field(name):
    return subprocess.run(["dpkg-deb", "-f", DEB, name], capture_output=True, text=True,
                          check=True).stdout.strip()


# -- what the package holds ------------------------------------------------------

def test_package_is_named_for_the_release_and_holds_every_file_in_its_debian_place():
    expect_eq(field("Package"), "hf3fs-metad", "Package")
    expect_eq(field("Version"), VERSION, "Version (debian/changelog, checked against VERSION)")
    expect_eq(field("Architecture"), ARCH, "Architecture")
    for dep in ("libhiredis", "libhttp-parser", "libyajl"):
        expect_true(dep in field("Depends"), "Depends names %s: %r" % (dep, field("Depends")))
    for path in ("usr/sbin/hf3fs-metad", "usr/bin/hf3fs-meta",
                 "usr/lib/redis/modules/hf3fs_metad_redis.so",
                 "lib/systemd/system/hf3fs-metad.service",
                 "lib/systemd/system/hf3fs-metad-redis.service",
                 "etc/default/hf3fs-metad",
                 "usr/share/man/man8/hf3fs-metad.8.gz", "usr/share/man/man1/hf3fs-meta.1.gz",
                 "usr/share/doc/hf3fs-metad/copyright",
                 "usr/share/doc/hf3fs-metad/operations.md.gz",
                 "usr/share/doc/hf3fs-metad/examples/redis/hf3fsmeta.conf"):
        expect_true(os.path.exists(os.path.join(UNPACKED, path)), "the package holds /%s" % path)
    for path in (SERVER, CLI):
        expect_true(os.access(path, os.X_OK), "%s is executable" % path)
    # nothing under /usr/local, which is the administrator's
    expect_true(not os.path.exists(os.path.join(UNPACKED, "usr", "local")), "no /usr/local")


def test_configuration_is_a_conffile_and_the_units_run_the_packaged_server():
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["dpkg-deb", "-e", DEB, d], check=True)
        with open(os.path.join(d, "conffiles")) as f:
            conffiles = f.read().split()
    expect_eq(conffiles, ["/etc/default/hf3fs-metad"], "conffiles")
    for unit in ("hf3fs-metad.service", "hf3fs-metad-redis.service"):
        with open(os.path.join(UNPACKED, "lib", "systemd", "system", unit)) as f:
            text = f.read()
        expect_true("ExecStart=/usr/sbin/hf3fs-metad " in text,
                    "%s runs /usr/sbin/hf3fs-metad:\n%s" % (unit, text))
        expect_true("/usr/local" not in text, "%s names no /usr/local path" % unit)
    with open(os.path.join(UNPACKED, "lib", "systemd", "system", "hf3fs-metad.service")) as f:
        expect_true("EnvironmentFile=-/etc/default/hf3fs-metad" in f.read(),
                    "hf3fs-metad.service reads /etc/default/hf3fs-metad")


def test_both_programs_print_the_release_of_the_tree_it_was_built_from():
    want = harness.release_versions()
    out = subprocess.run([SERVER, "--version"], capture_output=True, text=True, timeout=10)
    expect_eq(out.returncode, 0, "hf3fs-metad --version")
    expect_eq(out.stdout.splitlines()[0], "hf3fs-metad %s" % VERSION, "hf3fs-metad --version")
    expect_true("hf3fsmeta version %s," % want["module_version"] in out.stdout,
                "the module version: %r" % out.stdout)
    out = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=10)
    expect_eq(out.returncode, 0, "hf3fs-meta --version")
    expect_eq(out.stdout.splitlines()[0], "hf3fs-meta %s" % VERSION, "hf3fs-meta --version")


# -- the README's sessions, answer for answer --------------------------------------

def vllm_session(c):
    expect_json(c.post("/rank/0/initialize", {"role": "worker", "num_pages": 1024}), 200,
                {"message": "Rank 0 initialized with 1024 pages"})
    expect_json(c.post("/rank/1/initialize", {"role": "worker", "num_pages": 1024}), 200,
                {"message": "Rank 1 initialized with 1024 pages"})
    expect_json(c.post("/keys/batch_allocate",
                       {"rank": 0, "keys": [["a1b2", None], ["c3d4", "a1b2"]]}), 200,
                {"rank": 0, "results": [["a1b2", 0], ["c3d4", 1]]})
    expect_no_body(c.post("/keys/confirm_write",
                          {"rank": 0, "confirmations": [["a1b2", 0], ["c3d4", 1]]}))
    expect_json(c.post("/keys/batch_allocate", {"rank": 1, "keys": ["a1b2"]}), 200,
                {"rank": 1, "results": [["a1b2", 0]]})
    expect_no_body(c.post("/keys/confirm_write", {"rank": 1, "confirmations": [["a1b2", 0]]}))
    expect_json(c.post("/keys/batch_exists", {"keys": ["a1b2", "c3d4"]}), 200,
                {"exists": [True, False]})
    expect_json(c.post("/keys/get_locations", {"rank": 1, "keys": ["a1b2", "c3d4"]}), 200,
                {"locations": [0, None]})


def sglang_session(c):
    ns = {"namespace": "sg"}
    expect_no_body(c.post("/0/initialize", dict(num_pages=256, **ns)))
    expect_json(c.post("/0/reserve_and_allocate_page_indices",
                       dict(keys=[["k1", None], ["k2", "k1"]], **ns)), 200,
                {"indices": [[False, 0], [False, 1]]})
    expect_no_body(c.post("/0/confirm_write", dict(written_keys_to_confirm=[["k1", 0]],
                                                   pages_to_release=[1], **ns)))
    expect_json(c.post("/0/exists", dict(keys=["k1", "k2"], **ns)), 200,
                {"exists": [True, False]})
    expect_json(c.post("/0/get_page_indices", dict(keys=["k1", "k2"], **ns)), 200,
                {"indices": [0, None]})
    expect_json(c.post("/0/reserve_and_allocate_page_indices", dict(keys=[["k1", None]], **ns)),
                200, {"indices": [[True, 0]]})


def test_unpacked_server_serves_a_vllm_and_an_sglang_session_from_its_data_directory():
    with tempfile.TemporaryDirectory(prefix="hf3fs-metad-deb-data-") as d:
        srv = Server("--data-dir", d, store="", persistence=False)
        with srv:
            c = srv.client()
            vllm_session(c)
            sglang_session(c)
        # a restart finds both sessions' keys in the data directory
        with srv:
            c = srv.client()
            expect_json(c.post("/keys/batch_exists", {"keys": ["a1b2", "c3d4"]}), 200,
                        {"exists": [True, False]})
            expect_json(c.post("/0/get_page_indices", {"keys": ["k1"], "namespace": "sg"}), 200,
                        {"indices": [0]})


def test_unpacked_module_loads_into_redis_server_and_serves_both_sessions():
    with redis_server.RedisServer(loadmodule=MODULE) as r:
        mods = r.cmd("MODULE", "LIST")
        names = {m[1]: m[3] for m in mods}
        want = int(harness.release_versions()["module_version"])
        expect_eq(names, {b"hf3fsmeta": want}, "MODULE LIST of a Redis that loaded %s" % MODULE)
        with Server(store=r.url) as srv:
            c = srv.client()
            vllm_session(c)
            sglang_session(c)
            stats = expect_json(c.get("/v1/stats"), 200)["server"]
            expect_eq(stats["version"], VERSION, "server.version of the packaged front end")
        # the state is in Redis: one value per namespace (kv and sg)
        expect_eq(len(r.cmd("KEYS", "hf3fs:*")), 2, "namespaces kept in Redis")


if __name__ == "__main__":
    try:
        harness.main(globals())
    finally:
        shutil.rmtree(UNPACKED, ignore_errors=True)

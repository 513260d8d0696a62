"""test_units.py: the shipped systemd units and Redis configuration fail clearly.

- every unit in deploy/ (and the redis-server drop-in, over Debian's
  redis-server.service) passes `systemd-analyze verify`, with ExecStart
  pointing at the built binary (the shipped path, /usr/local/bin, is not
  installed here);
- the exits that mean the configuration is wrong (2, 5, 6 over Redis; 2, 3,
  4 for the embedded engine) are not restarted (RestartPreventExitStatus);
- the shipped Redis configuration (deploy/redis/hf3fsmeta.conf) and the
  Redis-backed unit agree on the password: a redis-server started from that
  file with its auth file serves a front end given the unit's flags and the
  same password file; the front end without it exits 5; Redis without the
  auth file does not start.
About 2 s.
"""

import configparser
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import harness
from harness import Server, expect_eq, expect_true
import redis_server
from redis_server import RedisServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
BIN = os.path.abspath(harness.BIN)
SHIPPED_BIN = "/usr/local/bin/hf3fs-metad"
DEBIAN_REDIS_UNIT = "/lib/systemd/system/redis-server.service"
DROP_IN = os.path.join(DEPLOY, "redis", "redis-server.service.d", "hf3fsmeta.conf")


def units():
    return sorted(os.path.join(DEPLOY, n) for n in os.listdir(DEPLOY) if n.endswith(".service"))


def read_unit(path):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(path)
    return unit


def verify(paths, cwd):
    """(status, output) of systemd-analyze verify --man=no on paths."""
    exe = shutil.which("systemd-analyze")
    if not exe:
        raise harness.Skip("systemd-analyze is not installed (Debian package systemd)")
    p = subprocess.run([exe, "verify", "--man=no"] + paths, cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    out = (p.stdout + p.stderr).strip()
    # a container without what the manager needs to start (not a finding
    # about the unit): say so and skip, with systemd's own words
    if p.returncode != 0 and re.search(r"Failed to (initialize manager|set up|allocate)", out):
        raise harness.Skip("systemd-analyze verify cannot run here: " + out[:300])
    return p.returncode, out


def test_every_unit_in_deploy_passes_systemd_analyze_verify():
    d = tempfile.mkdtemp(prefix="hf3fs-units.")
    try:
        copies = []
        for path in units():
            with open(path) as f:
                text = f.read()
            expect_true(SHIPPED_BIN in text, "%s runs %s" % (path, SHIPPED_BIN))
            copy = os.path.join(d, os.path.basename(path))
            with open(copy, "w") as f:
                f.write(text.replace(SHIPPED_BIN, BIN))
            copies.append(copy)
        expect_eq(len(copies), 2, "units in deploy/: %r" % copies)
        if os.path.exists(DEBIAN_REDIS_UNIT):  # the drop-in over Debian's unit
            shutil.copy(DEBIAN_REDIS_UNIT, d)
            os.makedirs(os.path.join(d, "redis-server.service.d"))
            shutil.copy(DROP_IN, os.path.join(d, "redis-server.service.d"))
            copies.append(os.path.join(d, "redis-server.service"))
        for copy in copies:
            rc, out = verify([copy], d)
            expect_true(rc == 0 and out == "",
                        "systemd-analyze verify %s: status %d\n%s" % (copy, rc, out))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_unit_that_names_a_missing_binary_fails_verify():
    """The check above can fail: a binary that is not there is a finding."""
    d = tempfile.mkdtemp(prefix="hf3fs-units.")
    try:
        copy = os.path.join(d, "hf3fs-metad.service")
        shutil.copy(os.path.join(DEPLOY, "hf3fs-metad.service"), copy)  # /usr/local/bin: absent
        if os.path.exists(SHIPPED_BIN):
            raise harness.Skip("%s is installed on this machine" % SHIPPED_BIN)
        rc, out = verify([copy], d)
        expect_true(rc != 0 and SHIPPED_BIN in out, "status %d: %s" % (rc, out))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_exits_that_mean_the_configuration_is_wrong_are_not_restarted():
    want = {"hf3fs-metad.service": {2, 3, 4}, "hf3fs-metad-redis.service": {2, 5, 6}}
    for path in units():
        svc = read_unit(path)["Service"]
        expect_eq(svc.get("Restart"), "on-failure", "%s Restart" % path)
        prevent = {int(x) for x in svc.get("RestartPreventExitStatus", "").split()}
        name = os.path.basename(path)
        expect_true(want[name] <= prevent, "%s: RestartPreventExitStatus=%s lacks %s"
                    % (name, sorted(prevent), sorted(want[name] - prevent)))
        expect_true(1 not in prevent, "%s: exit 1 (the port taken) is worth a restart" % name)


SHIPPED_MODULE = "/usr/lib/redis/modules/hf3fs_metad_redis.so"


def shipped_module_args():
    """The arguments deploy/redis/hf3fsmeta.conf loads the module with."""
    with open(os.path.join(DEPLOY, "redis", "hf3fsmeta.conf")) as f:
        lines = [line.split() for line in f if line.startswith("loadmodule ")]
    expect_eq([line[1] for line in lines], [SHIPPED_MODULE], "hf3fsmeta.conf loads the module")
    return lines[0][2:]


def shipped_redis_args(tmp, auth):
    """redis-server's arguments for deploy/redis/hf3fsmeta.conf as installed:
    a copy whose auth file is the test's, and without its loadmodule line
    (RedisServer loads the build's module, with shipped_module_args() and
    the environment a sanitized one needs)."""
    with open(os.path.join(DEPLOY, "redis", "hf3fsmeta.conf")) as f:
        text = f.read()
    expect_true("\ninclude /etc/redis/hf3fsmeta-auth.conf\n" in text,
                "hf3fsmeta.conf includes the auth file")
    text = text.replace("/etc/redis/hf3fsmeta-auth.conf", auth)
    text = text.replace("\nloadmodule ", "\n# loadmodule ")
    conf = os.path.join(tmp, "hf3fsmeta.conf")
    with open(conf, "w") as f:
        f.write(text)
    return ["--include", conf]


def test_the_shipped_redis_configuration_loads_the_module_with_settle_replicate():
    """A fresh install runs one release everywhere: its Redis nodes load the
    module with settle-replicate, so a promoted replica can settle."""
    expect_eq(shipped_module_args(), ["settle-replicate"], "the module's arguments")


def unit_flags(password_file):
    """The flags of hf3fs-metad-redis.service's ExecStart that concern the
    store, with the credential's path given."""
    svc = read_unit(os.path.join(DEPLOY, "hf3fs-metad-redis.service"))["Service"]
    argv = shlex.split(svc["ExecStart"].replace("\\\n", " "))
    expect_true("--redis-password-file" in argv, "the unit passes a password file: %r" % argv)
    expect_eq(argv[argv.index("--redis-password-file") + 1],
              "${CREDENTIALS_DIRECTORY}/redis-password", "the password file is the credential")
    expect_true(svc.get("LoadCredential", "").startswith("redis-password:"),
                "LoadCredential: %r" % svc.get("LoadCredential"))
    return ["--redis-password-file", password_file]


def test_the_shipped_redis_configuration_and_the_redis_unit_agree_on_the_password():
    tmp = tempfile.mkdtemp(prefix="hf3fs-units.")
    try:
        password = "pw-" + os.urandom(8).hex()
        auth = os.path.join(tmp, "hf3fsmeta-auth.conf")
        with open(auth, "w") as f:
            f.write("requirepass %s\nmasterauth %s\n" % (password, password))
        pwfile = os.path.join(tmp, "redis-password")
        with open(pwfile, "w") as f:
            f.write(password + "\n")
        os.chmod(pwfile, 0o600)
        flags = unit_flags(pwfile)
        with RedisServer(password=password, extra=shipped_redis_args(tmp, auth),
                         module_args=shipped_module_args()) as r:
            with Server(*flags, store=r.url) as srv:
                # serving; the one Redis has no replica, which /health names
                expect_eq(srv.client().get("/health").json(),
                          {"status": "ok", "unreplicated": ["127.0.0.1:%d" % r.port]},
                          "the front end with the unit's flags over the shipped Redis")
            p = subprocess.run(harness.WRAPPER + [BIN, "--port", "0", "--store", r.url],
                               capture_output=True, timeout=20 * harness.SLOWDOWN)
            expect_eq(p.returncode, 5, "without the password: exit 5 (not restarted): %s"
                      % p.stderr.decode(errors="replace")[-300:])
        os.unlink(auth)
        # without the auth file Redis refuses to start ("Fatal error, can't
        # open config file"), rather than run without a password
        p = subprocess.run([redis_server.REDIS_SERVER, "--port", "0"]
                           + shipped_redis_args(tmp, auth), capture_output=True, text=True,
                           timeout=20)
        expect_true(p.returncode != 0 and "hf3fsmeta-auth.conf" in p.stdout + p.stderr,
                    "redis-server without its auth file: status %d: %s"
                    % (p.returncode, (p.stdout + p.stderr)[-300:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    harness.main(globals())

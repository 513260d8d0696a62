"""test_ops.py: what an operator reads: the start-up line, log levels, the
access log, the periodic summary line, /health's 200 reads_only while the log fails,
and the systemd unit."""

import configparser
import os
import re
import shutil
import subprocess
import tempfile
import time

import harness
from harness import (LoggedServer, expect_error, expect_eq, expect_json, expect_true, s_alloc,
                     s_confirm, s_init, v_alloc, v_confirm, v_init, wait_for)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def help_flags():
    """Every --flag that `hf3fs-metad --help` lists."""
    out = subprocess.run([harness.BIN, "--help"], stdout=subprocess.PIPE, check=True,
                         timeout=10).stdout.decode()
    return sorted(set(re.findall(r"^\s+--([a-z][a-z0-9-]*)", out, re.M)))


def test_docs_operations_md_shows_the_help_text_exactly():
    out = subprocess.run([harness.BIN, "--help"], stdout=subprocess.PIPE, check=True,
                         timeout=10).stdout.decode()
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        doc = f.read()
    start = doc.index("```\nUsage:") + 4
    shown = doc[start:doc.index("```", start)]
    expect_eq(shown, out, "the --help block of docs/operations.md")


# Flags that are another spelling of a setting the line already shows, or
# that choose between settings rather than being one.
SAME_AS = {
    "help": None,
    "version": None,                 # prints and exits (the first line names the release)
    "host": "url",                   # http://HOST:PORT
    "port": "url",
    "persistence-path": "data-dir",  # the existing servers' name for --data-dir
    "in-memory": "data-dir",         # the line says "in memory only" instead
}


def test_start_up_line_lists_every_effective_setting():
    with tempfile.TemporaryDirectory(prefix="hf3fs-metad-token-") as d:
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("secret\n")
        os.chmod(token, 0o600)
        with LoggedServer("--threads", "3", "--max-keys", "777", "--read-lease", "1.5",
                          "--auth-token-file", token, "--access-log",
                          "--log-summary-interval", "42") as srv:
            pass
    log = srv.last_stderr
    start = log[:log.find("SIGTERM")]
    missing = [f for f in help_flags()
               if f not in SAME_AS and not re.search(r"\b%s\b" % re.escape(f), start)]
    expect_eq(missing, [], "flags of --help missing from the start-up lines:\n" + start)
    release = harness.release_versions()["version"]
    expect_true(re.search(r"hf3fs-metad %s starting \(Redis module version \d+, data directory "
                          r"format \d+\)" % re.escape(release), start),
                "the start-up lines should name the release %s:\n%s" % (release, start))
    for setting in ("threads 3", "max-keys 777", "read-lease 1.5 s", "auth on",
                    "access-log on", "log-summary-interval 42 s", "http://127.0.0.1:%d" % srv.port):
        expect_true(setting in start, "start-up line should say %r:\n%s" % (setting, start))
    expect_true("secret" not in log, "the token itself must never be logged")


def test_version_prints_the_release_and_the_formats_it_speaks_and_starts_nothing():
    want = harness.release_versions()
    # after other flags too: --version wins, binds no port, touches no directory
    with tempfile.TemporaryDirectory(prefix="hf3fs-metad-version-") as d:
        p = subprocess.run([os.path.abspath(harness.BIN), "--port", "1", "--data-dir", os.path.join(d, "data"),
                            "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=10, cwd=d)
        expect_eq(p.returncode, 0, "--version exits 0: %r" % p)
        expect_eq(os.listdir(d), [], "--version creates nothing")
    lines = p.stdout.decode().splitlines()
    expect_eq(lines, [
        "hf3fs-metad %s" % want["version"],
        "redis module: hf3fsmeta version %s, values of encoding version %s (reads 1..%s)"
        % (want["module_version"], want["value_encoding_version"],
           want["value_encoding_version"]),
        "data directory: log and snapshots of format %s (reads %s..%s)"
        % (want["data_format_version"], want["data_format_oldest"],
           want["data_format_version"]),
    ], "hf3fs-metad --version")
    expect_eq(p.stderr, b"", "--version writes nothing on stderr")


def test_debian_changelog_names_the_release_of_the_version_file():
    # VERSION is the one place of the release; the package's version comes
    # from debian/changelog's first entry (`make deb` refuses a mismatch too)
    with open(os.path.join(ROOT, "debian", "changelog")) as f:
        first = f.readline()
    m = re.match(r"hf3fs-metad \(([^)]+)\) \w+; urgency=\w+$", first)
    expect_true(m, "debian/changelog's first line: %r" % first)
    expect_eq(m.group(1), harness.release_versions()["version"], "debian/changelog's version")


def test_man_pages_name_every_flag_of_the_help_texts():
    def flags_of(argv):
        out = subprocess.run(argv, stdout=subprocess.PIPE, check=True, timeout=10).stdout
        return sorted(set(re.findall(r"^\s+--([a-z][a-z0-9-]*)", out.decode(), re.M)))

    cli = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "hf3fs-meta")
    for page, flags in (("hf3fs-metad.8", flags_of([harness.BIN, "--help"])),
                        ("hf3fs-meta.1", flags_of([cli, "--help"]))):
        with open(os.path.join(ROOT, "man", page)) as f:
            text = f.read().replace("\\-", "-")
        expect_true(len(flags) >= 8, "flags found in the help of %s: %r" % (page, flags))
        missing = [fl for fl in flags if not re.search(r"(?<![\w-])--%s(?![\w-])" % fl, text)]
        expect_eq(missing, [], "flags of --help missing from man/%s" % page)
    # the release the pages name is VERSION's
    for page in ("hf3fs-metad.8", "hf3fs-meta.1"):
        with open(os.path.join(ROOT, "man", page)) as f:
            th = [line for line in f if line.startswith(".TH ")][0]
        expect_true('"hf3fs-metad %s"' % harness.release_versions()["version"] in th,
                    "man/%s's .TH names the release: %r" % (page, th))


def test_eviction_lru_is_an_accepted_name_for_clock():
    # The rule is CLOCK-class; "lru" was the flag's value before and still
    # starts the same server.
    for value in ("clock", "lru"):
        with LoggedServer("--eviction", value) as srv:
            pass
        start = srv.last_stderr[:srv.last_stderr.find("SIGTERM")]
        expect_true("eviction clock" in start, "--eviction %s starts with eviction clock:\n%s"
                    % (value, start))
    p = subprocess.run([harness.BIN, "--eviction", "lfu"], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=10)
    expect_eq(p.returncode, 2, "--eviction lfu is refused")
    expect_true("clock or none" in p.stderr.decode(), "the refusal names the values: %r" % p.stderr)


def test_a_bad_value_is_refused_with_the_name_of_its_own_flag():
    # A value no flag taking one accepts ("" is not a number, a level, a
    # path that exists...). The message must name the flag given, whatever
    # the order of the flag table.
    checked = 0
    for flag in help_flags():
        # --port last: a flag that takes any string then fails on it instead of starting
        with tempfile.TemporaryDirectory(prefix="hf3fs-metad-flags-") as cwd:
            p = subprocess.run([os.path.abspath(harness.BIN), "--" + flag, "\x01bad", "--port",
                                "nope"], stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=10, cwd=cwd)
        err = p.stderr.decode("utf-8", "replace")
        if flag != "port" and err.startswith("hf3fs-metad: --port:"):
            continue  # a flag that takes any string
        if p.returncode == 0 or "is not" not in err:
            continue  # a flag without a value
        checked += 1
        expect_true(err.startswith("hf3fs-metad: --%s:" % flag),
                    "--%s with a bad value: the message names another flag: %r" % (flag, err))
    expect_true(checked >= 15, "only %d flags refused a bad value" % checked)


def test_no_line_is_logged_per_request_by_default():
    with LoggedServer() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        # The last start-up line ("state is kept in ...") may come after
        # /health answers; count from there.
        wait_for(lambda: "state is kept in" in srv.stderr(), 5 * harness.SLOWDOWN,
                 what="the last start-up line")
        before = srv.stderr().count("\n")
        for i in range(20):
            pages = v_alloc(c, 0, ["k%d" % i])
            v_confirm(c, 0, [("k%d" % i, pages[0])])
            c.get("/health")
            c.get("/no/such/path")
        time.sleep(0.1)
        after = srv.stderr()
        expect_eq(after.count("\n"), before, "log lines added by 80 requests:\n" + after)
    expect_true("access:" not in srv.last_stderr, "access log is off by default")


def test_access_log_flag_logs_one_line_per_request():
    with LoggedServer("--access-log", "--max-body-bytes", "1024") as srv:
        c = srv.client()
        v_init(c, 0, 8)
        c.get("/no/such/path")
        c.post("/keys/batch_allocate", b"{bad")
        c.get("/weird%01path%0Anext")
        with srv.raw() as raw:  # refused on its Content-Length, before any body
            raw.send(harness.raw_request("POST", "/keys/batch_allocate",
                                         headers={"Content-Length": "100000"}))
            expect_eq(raw.read_response().status, 413, "declared body over the limit")
    lines = [l for l in srv.last_stderr.splitlines() if " access: " in l]
    # the harness's own /health polls at start-up come first
    ours = [l for l in lines if "/health" not in l]
    expect_eq(len(ours), 5, "access lines:\n" + "\n".join(lines))
    expect_true('"POST /keys/batch_allocate HTTP/1.1" 413 ' in ours[4], ours[4])
    expect_true(re.search(r' access: 127\.0\.0\.1:\d+ "POST /rank/0/initialize HTTP/1\.1" 200 \d+ '
                          r'\d+\.\d{6}$', ours[0]), "access line format: %r" % ours[0])
    expect_true('"GET /no/such/path HTTP/1.1" 404 ' in ours[1], ours[1])
    expect_true('"POST /keys/batch_allocate HTTP/1.1" 400 ' in ours[2], ours[2])
    expect_true("/weird\\x01path\\x0anext" in ours[3],
                "control bytes in the path are escaped: %r" % ours[3])


def test_log_level_error_keeps_only_errors():
    with LoggedServer("--log-level", "error") as srv:
        c = srv.client()
        v_init(c, 0, 8)
        c.post("/rank/0/initialize", {"role": "worker", "num_pages": 16})
    expect_true(" info: " not in srv.last_stderr and " warn: " not in srv.last_stderr,
                "--log-level error logged info or warn lines:\n" + srv.last_stderr)
    with LoggedServer("--log-level", "debug") as srv:
        pass
    expect_true(" info: " in srv.last_stderr, "--log-level debug keeps info lines")


def test_pool_creation_and_reinitialization_with_another_size_are_logged():
    with LoggedServer() as srv:
        c = srv.client()
        v_init(c, 0, 8)
        c.post("/rank/0/initialize", {"role": "worker", "num_pages": 16})
        s_init(c, 1, 4, ns="other")
        c.post("/1/initialize", {"num_pages": 5, "namespace": "other"})
    log = srv.last_stderr
    expect_true(re.search(r"info: rank 0 namespace 'kv' initialized with 8 pages", log), log)
    expect_true(re.search(r"warn: rank 0 namespace 'kv' already has 8 pages.*16", log), log)
    expect_true(re.search(r"warn: rank 1 namespace 'other' already has 4 pages.*5", log), log)


def test_summary_line_reports_evictions_and_refusals_in_aggregate():
    with LoggedServer("--log-summary-interval", "0.3", "--read-lease", "0") as srv:
        c = srv.client()
        s_init(c, 0, 2)
        for keys in (["a", "b"], ["c", "d"], ["e", "f"]):
            got = s_alloc(c, 0, keys)
            s_confirm(c, 0, [(k, p) for k, (_, p) in zip(keys, got)])
        s_confirm(c, 0, [("zz", 1)])     # refused: page 1 is owned by another key
        s_confirm(c, 0, [("zz", 7)])     # refused: out of range
        wait_for(lambda: "refused confirmations" in srv.stderr(), 5 * harness.SLOWDOWN,
                 what="a summary line")
        time.sleep(0.5)
        settled = srv.stderr().count("in the last")
        time.sleep(1.0)  # nothing moves any more: no further summary lines
        expect_eq(srv.stderr().count("in the last"), settled, "summary lines while idle")
    lines = [l for l in srv.last_stderr.splitlines() if "in the last" in l]
    expect_true(1 <= len(lines) <= 3, "summary lines:\n" + "\n".join(lines))

    def summed(pattern):
        return sum(int(m.group(1)) for l in lines for m in [re.search(pattern, l)] if m)
    expect_eq(summed(r"(\d+) evictions"), 4, "evictions in the summary lines")
    expect_eq(summed(r"(\d+) refused confirmations"), 2, "refused confirmations")
    expect_eq(summed(r"other_key (\d+)"), 1, "refused as other_key")
    expect_eq(summed(r"out_of_range (\d+)"), 1, "refused as out_of_range")
    refusing = [l for l in lines if "refused confirmations" in l]
    expect_true(all(" warn: " in l for l in refusing), "refused confirmations are a warning")
    expect_true(re.search(r" in the last \d+ s: ", lines[0]), "summary format: %r" % lines[0])


@harness.embedded_only  # the log is the embedded engine's (over Redis: test_redis.py)
def test_health_answers_200_reads_only_while_the_log_is_failing():
    with tempfile.TemporaryDirectory(prefix="hf3fs-metad-fault-") as d:
        disk_full = os.path.join(d, "disk-full")
        env = harness.disk_fault_env("write-fail-after=0,sync-fail-after=0,while-exists="
                                     + disk_full)
        with LoggedServer(env=env) as srv:
            c = srv.client()
            v_init(c, 0, 8)
            open(disk_full, "w").close()
            r = c.post("/keys/batch_allocate", {"rank": 0, "keys": ["a"]})
            expect_error(r, 507)  # the change that met the failure: not retried
            r = c.get("/health")
            body = expect_json(r, 200)  # reads are served: a load balancer keeps routing them
            expect_eq(body.get("status"), "reads_only", "/health status")
            expect_true("cannot accept changes" in body.get("detail", ""),
                        "/health detail: %r" % body)
            stats = expect_json(c.get("/v1/stats"), 200)
            expect_eq(stats["server"]["accepting_changes"], False, "stats while failing")
            expect_eq(stats["server"]["mode"], "reads_only", "stats while failing")
            os.unlink(disk_full)
            wait_for(lambda: c.get("/health").json().get("status") == "ok",
                     20 * harness.SLOWDOWN, what="/health back to ok once the disk has room")


def test_systemd_unit_runs_the_server_hardened():
    path = os.path.join(ROOT, "deploy", "hf3fs-metad.service")
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    with open(path) as f:
        unit.read_file(f)
    expect_true(unit.has_section("Unit") and unit.has_section("Service")
                and unit.has_section("Install"), "sections of %s" % path)
    svc = unit["Service"]
    expect_true(svc.get("ExecStart", "").startswith("/usr/local/bin/hf3fs-metad "),
                "ExecStart: %r" % svc.get("ExecStart"))
    for flag in ("--data-dir", "--auth-token-file"):
        expect_true(flag in svc["ExecStart"], "ExecStart should pass %s" % flag)
    for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("DynamicUser", "yes"),
                      ("StateDirectory", "hf3fs-metad"), ("Restart", "on-failure")):
        expect_eq(svc.get(key), want, "Service.%s" % key)
    # Every flag in ExecStart is one the server knows.
    known = set(help_flags())
    used = re.findall(r"--([a-z][a-z0-9-]*)", svc["ExecStart"])
    expect_eq([f for f in used if f not in known], [], "unknown flags in ExecStart")
    exe = shutil.which("systemd-analyze")
    if exe:
        p = subprocess.run([exe, "verify", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        text = p.stdout.decode("utf-8", "replace")
        # The binary is not installed here: only complaints about the unit count.
        bad = [l for l in text.splitlines() if l.strip() and "hf3fs-metad" in l
               and "is not executable" not in l and "No such file" not in l
               and "Command " not in l]
        expect_eq(bad, [], "systemd-analyze verify")


if __name__ == "__main__":
    harness.main(globals())

#!/usr/bin/python3
"""hf3fs-meta, the command-line tool: every command's output and exit codes
against a live hf3fs-metad (and against fake servers for the error codes).

Exit codes scripts rely on: 0 ok, 1 a negative answer, 2 usage, 3 connection
or timeout, 4 refused by the server (4xx), 5 server error (5xx) or a
malformed answer. The tool is <build dir>/hf3fs-meta, next to
$HF3FS_METAD_BIN.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import Server, Skip, TokenFile, expect_eq, expect_true  # noqa: E402

CLI = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "hf3fs-meta")
COMMANDS = ["init", "alloc", "confirm", "release", "exists", "locate", "delete", "clear",
            "stats", "watch", "load"]


class Result:
    def __init__(self, proc, took):
        self.code = proc.returncode
        self.out = proc.stdout.decode("utf-8", "replace")
        self.err = proc.stderr.decode("utf-8", "replace")
        self.took = took

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            raise AssertionError("stdout is not JSON: %r (stderr %r)" % (self.out, self.err))

    def lines(self):
        return self.out.splitlines()

    def __repr__(self):
        return "exit %s, stdout %r, stderr %r" % (self.code, self.out[:1500], self.err[:1500])


def run(*args, url=None, stdin=None, env=None, timeout=60):
    """hf3fs-meta ARGS (with --url URL first when given)."""
    if not os.path.exists(CLI):
        raise AssertionError("%s does not exist (make)" % CLI)
    argv = [CLI] + (["--url", url] if url else []) + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.pop("HF3FS_META_URL", None)
    full_env.pop("HF3FS_META_TOKEN", None)
    full_env.update(env or {})
    t0 = time.monotonic()
    proc = subprocess.run(argv, input=(stdin or "").encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=full_env, timeout=timeout)
    return Result(proc, time.monotonic() - t0)


def expect_exit(r, code, what=""):
    if r.code != code:
        raise AssertionError("%sexpected exit %d, got %r" % (what + ": " if what else "", code, r))


def url_of(srv):
    return "http://127.0.0.1:%d" % srv.port


def table_rows(text):
    """{(namespace, rank): [columns]} of a stats table."""
    rows = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) == 8 and cols[1].isdigit():
            rows[(cols[0], int(cols[1]))] = cols
    return rows


class FakeServer:
    """Accepts connections on a free 127.0.0.1 port; answers each request with
    `answer` (bytes), or never answers when answer is None."""

    def __init__(self, answer):
        self.answer = answer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.answer is None:
                continue  # hold it open, never answer
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                need = int(m.group(1)) if m else 0
                while len(body) < need:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                conn.sendall(self.answer)
            except OSError:
                pass
            conn.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()
        return False


# -- help and usage -----------------------------------------------------------

def test_help_lists_every_command_and_the_exit_codes():
    r = run("--help")
    expect_exit(r, 0)
    for cmd in COMMANDS:
        expect_true(re.search(r"^  %s\b" % cmd, r.out, re.M), "--help should list %s: %r" % (cmd, r))
    for text in ("Exit codes", "2 usage", "3 connection", "HF3FS_META_URL", "--json", "--dialect"):
        expect_true(text in r.out, "--help should mention %r" % text)


def test_every_command_has_its_own_help():
    for cmd in COMMANDS:
        r = run(cmd, "--help")
        expect_exit(r, 0, cmd + " --help")
        expect_true(r.out.startswith("usage: hf3fs-meta [OPTIONS] %s" % cmd), "%s --help: %r" % (cmd, r))


def test_usage_errors_exit_2_with_a_message():
    cases = [
        [],                                  # no command
        ["frobnicate"],                      # unknown command
        ["stats", "--no-such-option"],       # unknown option
        ["stats", "--pages", "3"],           # option of another command
        ["init"],                            # neither --pages nor --scheduler
        ["init", "--pages"],                 # option without its value
        ["init", "--pages", "x"],            # not a number
        ["--dialect", "tgi", "stats"],       # unknown dialect
        ["--rank", "-1", "exists", "k"],     # bad rank
        ["delete", "k"],                     # vLLM has no delete
        ["confirm", "no-page-here"],         # not KEY=PAGE
        ["release", "abc"],                  # not a page
        ["watch", "--interval", "0"],        # bad interval
        ["load", "--clients", "0"],          # bad client count
        ["--url", "https://x:1", "stats"],   # not an http URL
        ["--dialect", "sglang", "init", "--scheduler"],
    ]
    for args in cases:
        r = run(*args, url=None if "--url" in args else "http://127.0.0.1:9")
        expect_exit(r, 2, "hf3fs-meta %s" % " ".join(args))
        expect_true(r.err.startswith("hf3fs-meta:"), "usage message on stderr: %r" % r)


def test_version_prints_the_release_and_the_library_version():
    r = run("--version")
    expect_exit(r, 0)
    release = harness.release_versions()["version"]
    expect_eq(r.out.splitlines(), [
        "hf3fs-meta %s" % release,
        "libhf3fsmeta 0.1.0 (the C API of include/hf3fs_meta.h)",
        "speaks: the vLLM and SGLang HTTP dialects of hf3fs-metad (docs/protocol.md)",
    ], "--version")


# -- the vLLM dialect ---------------------------------------------------------

def test_init_worker_and_scheduler_succeed_in_text_and_json():
    with Server() as srv:
        u = url_of(srv)
        r = run("init", "--rank", 3, "--pages", 8, url=u)
        expect_exit(r, 0)
        expect_true("kv/3" in r.out, "init text: %r" % r)
        r = run("init", "--rank", 4, "--pages", 9, "--json", url=u)
        expect_exit(r, 0)
        expect_eq(r.json(), {"ok": True, "namespace": "kv", "rank": 4, "num_pages": 9}, "init --json")
        r = run("init", "--scheduler", url=u)
        expect_exit(r, 0)
        st = srv.stats()
        expect_eq(sorted(st), [("kv", 3), ("kv", 4)], "pools after init")
        expect_eq(st[("kv", 3)]["num_pages"], 8, "pages of kv/3")


def test_init_refused_by_the_server_exits_4_with_its_detail():
    with Server() as srv:
        r = run("init", "--pages", 0, url=url_of(srv))
        expect_exit(r, 4)
        expect_true("Invalid initialization parameters" in r.err, "detail on stderr: %r" % r)
        r = run("init", "--pages", 0, "--json", url=url_of(srv))
        expect_exit(r, 4)
        body = r.json()
        expect_eq(body.get("http_status"), 400, "--json error status")
        expect_true("Invalid initialization parameters" in body.get("error", ""), "json error: %r" % body)


def test_alloc_output_feeds_confirm_and_the_keys_then_exist():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 16, url=u), 0)
        r = run("alloc", "k1", "k2", "k3", url=u)
        expect_exit(r, 0)
        pairs = [ln.split("\t") for ln in r.lines()]
        expect_eq([p[0] for p in pairs], ["k1", "k2", "k3"], "alloc keys")
        pages = [int(p[1]) for p in pairs]
        expect_true(all(0 <= p < 16 for p in pages) and len(set(pages)) == 3, "pages %r" % pages)
        expect_eq(srv.stats()[("kv", 0)]["reserved"], 3, "reserved after alloc")
        r = run("confirm", url=u, stdin=r.out)  # alloc's output, as is
        expect_exit(r, 0)
        st = srv.stats()[("kv", 0)]
        expect_eq((st["owned"], st["reserved"], st["keys"]), (3, 0, 3), "after confirm")
        r = run("exists", "k1", "k2", "k3", url=u)
        expect_exit(r, 0)
        expect_eq(r.lines(), ["k1\tyes", "k2\tyes", "k3\tyes"], "exists output")
        r = run("locate", "k1", "k2", "k3", url=u)
        expect_exit(r, 0)
        expect_eq([int(ln.split("\t")[1]) for ln in r.lines()], pages, "locate pages")


def test_exists_and_locate_exit_1_when_a_key_is_missing():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 4, url=u), 0)
        r = run("alloc", "here", url=u)
        expect_exit(run("confirm", url=u, stdin=r.out), 0)
        r = run("exists", "here", "gone", url=u)
        expect_exit(r, 1)
        expect_eq(r.lines(), ["here\tyes", "gone\tno"], "exists output")
        r = run("exists", "here", "gone", "--json", url=u)
        expect_exit(r, 1)
        expect_eq(r.json(), {"exists": [{"key": "here", "exists": True},
                                        {"key": "gone", "exists": False}], "all": False}, "exists --json")
        r = run("locate", "gone", "here", url=u)
        expect_exit(r, 1)
        expect_eq(r.lines()[0], "gone\t-", "locate of a missing key")
        r = run("locate", "gone", "--json", url=u)
        expect_exit(r, 1)
        expect_eq(r.json(), {"rank": 0, "locations": [{"key": "gone", "page": None}], "all": False},
                  "locate --json")


def test_keys_come_from_stdin_one_per_line():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 8, url=u), 0)
        r = run("alloc", "--json", url=u, stdin="s1\ns2\r\n\ns3")
        expect_exit(r, 0)
        body = r.json()
        expect_eq([x["key"] for x in body["results"]], ["s1", "s2", "s3"], "keys read from stdin")
        expect_eq(body["all"], True, "all got pages")
        r = run("confirm", url=u, stdin="".join("%s=%d\n" % (x["key"], x["page"]) for x in body["results"]))
        expect_exit(r, 0)
        r = run("exists", url=u, stdin="s1\ns2\ns3\n")
        expect_exit(r, 0)
        expect_eq(len(r.lines()), 3, "exists of stdin keys")


def test_json_keys_with_special_characters_round_trip():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 8, url=u), 0)
        key = 'we"ird\\key caf\u00e9'
        r = run("alloc", "--json", "--", key, url=u)
        expect_exit(r, 0)
        page = r.json()["results"][0]["page"]
        expect_eq(r.json()["results"][0]["key"], key, "key echoed in --json")
        expect_exit(run("confirm", "%s=%d" % (key, page), url=u), 0)
        r = run("exists", "--", key, url=u)
        expect_exit(r, 0)


def test_alloc_exits_1_when_a_key_gets_no_page():
    with Server("--eviction", "none") as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 1, url=u), 0)
        r = run("alloc", "a", "b", url=u)  # vLLM: all or nothing
        expect_exit(r, 1)
        expect_eq(r.lines(), ["a\t-1", "b\t-1"], "alloc output with no page")
        expect_eq(srv.stats()[("kv", 0)]["reserved"], 0, "nothing reserved")


def test_release_and_confirm_release_give_back_reserved_pages():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 8, url=u), 0)
        pages = [int(ln.split("\t")[1]) for ln in run("alloc", "r1", "r2", "r3", url=u).lines()]
        r = run("release", pages[0], url=u)
        expect_exit(r, 0)
        expect_eq(srv.stats()[("kv", 0)]["reserved"], 2, "after release of one page")
        r = run("confirm", "r2=%d" % pages[1], "--release", str(pages[2]), "--json", url=u)
        expect_exit(r, 0)
        expect_eq(r.json(), {"ok": True, "confirmed": 1, "released": 1}, "confirm --json")
        st = srv.stats()[("kv", 0)]
        expect_eq((st["reserved"], st["owned"], st["free"], st["draining"]), (0, 1, 5, 2),
                  "after confirm --release (released pages drain for the release grace)")
        r = run("release", url=u, stdin="%d\n" % pages[1])  # owned: changes nothing
        expect_exit(r, 0)
        expect_eq(srv.stats()[("kv", 0)]["owned"], 1, "an owned page is not released")


def test_not_initialized_rank_exits_4():
    with Server() as srv:
        r = run("alloc", "--rank", 5, "k", url=url_of(srv))
        expect_exit(r, 4)
        expect_true("Rank 5 not initialized" in r.err, "detail: %r" % r)
        r = run("confirm", "--rank", 5, "k=1", "--json", url=url_of(srv))
        expect_exit(r, 4)
        expect_eq(r.json()["http_status"], 404, "json error status")


def test_clear_forgets_every_vllm_pool():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 4, url=u), 0)
        expect_exit(run("init", "--rank", 1, "--pages", 4, url=u), 0)
        r = run("clear", url=u)
        expect_exit(r, 0)
        expect_eq(srv.stats(), {}, "pools after clear")
        expect_exit(run("alloc", "k", url=u), 4, "alloc after clear")
        expect_eq(run("clear", "--json", url=u).json(), {"ok": True}, "clear --json")


# -- the SGLang dialect -------------------------------------------------------

def test_sglang_commands_work_in_a_namespace():
    with Server() as srv:
        u = url_of(srv)
        sg = ["--dialect", "sglang", "--namespace", "ns1", "--rank", "2"]
        expect_exit(run(*sg, "init", "--pages", 4, url=u), 0)
        r = run(*sg, "alloc", "a", "b", url=u)
        expect_exit(r, 0)
        rows = [ln.split("\t") for ln in r.lines()]
        expect_eq([(x[0], x[2]) for x in rows], [("a", "new"), ("b", "new")], "first alloc")
        expect_exit(run(*sg, "confirm", url=u, stdin=r.out), 0)
        r = run(*sg, "alloc", "a", "c", "--json", url=u)
        expect_exit(r, 0)
        res = r.json()["results"]
        expect_eq((res[0]["existed"], res[0]["page"]), (True, int(rows[0][1])), "a is a hit")
        expect_eq(res[1]["existed"], False, "c is new")
        expect_exit(run(*sg, "exists", "a", "b", url=u), 0)
        expect_exit(run(*sg, "locate", "a", "b", url=u), 0)
        expect_exit(run(*sg, "delete", "a", url=u), 0)
        expect_exit(run(*sg, "exists", "a", "b", url=u), 1, "exists after delete")
        expect_exit(run(*sg, "clear", url=u), 0)
        expect_exit(run(*sg, "exists", "b", url=u), 1, "exists after clear")
        st = srv.stats()
        expect_true(("ns1", 2) in st and ("kv", 2) not in st, "pools: %r" % sorted(st))
        r = run("--dialect", "sglang", "--namespace", "other", "exists", "a", url=u)
        expect_exit(r, 4, "uninitialized SGLang pool")
        expect_true("not initialized" in r.err, "detail: %r" % r)


# -- stats, watch, load -------------------------------------------------------

def test_stats_table_shows_each_pool_with_usage():
    with Server() as srv:
        u = url_of(srv)
        r = run("stats", url=u)
        expect_exit(r, 0)
        expect_true("no pools" in r.out, "empty stats: %r" % r)
        expect_exit(run("init", "--pages", 10, url=u), 0)
        expect_exit(run("--dialect", "sglang", "--namespace", "zz", "--rank", 1, "init", "--pages", 4,
                        url=u), 0)
        r = run("alloc", "a", "b", "c", url=u)
        expect_exit(run("confirm", url=u, stdin="\n".join(r.lines()[:2])), 0)
        run("exists", "a", "nope", url=u)
        r = run("stats", url=u)
        expect_exit(r, 0)
        header = r.lines()[0].split()
        expect_eq(header, ["NAMESPACE", "RANK", "PAGES", "USED%", "KEYS", "RESERVED", "HIT%",
                           "EVICTIONS"], "table header")
        rows = table_rows(r.out)
        expect_eq(sorted(rows), [("kv", 0), ("zz", 1)], "rows")
        kv = rows[("kv", 0)]
        expect_eq(kv[2], "10", "pages")
        expect_eq(kv[3], "30.0%", "used %")
        expect_eq(kv[4], "2", "keys")
        expect_eq(kv[5], "1", "reserved")
        expect_true(re.match(r"^\d+\.\d%$", kv[6]), "hit rate %r" % kv[6])
        expect_eq(kv[7], "0", "evictions")
        expect_eq(rows[("zz", 1)][3], "0.0%", "unused pool")


def test_stats_json_is_the_servers_document():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 5, url=u), 0)
        r = run("stats", "--json", url=u)
        expect_exit(r, 0)
        body = r.json()
        expect_eq([(p["namespace"], p["rank"], p["num_pages"]) for p in body["pools"]],
                  [("kv", 0, 5)], "stats --json pools")


def test_advise_table_shows_the_servers_advice_with_bytes_from_page_bytes():
    """A cyclic scan of 64 keys over a pool of 32 pages (the rate at most 1/4 samples
    about 16 of them): nothing hits now, everything after the first round would at
    twice the pages, so the advice is above 32 pages and doubling gains most of it."""
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 32, url=u), 0)
        r = run("advise", url=u)
        expect_exit(r, 0)
        expect_true("no sampled read yet" in r.out, "before any read: %r" % r.out)
        c = srv.client()
        keys = ["%032x" % (i * 7919 + 5) for i in range(64)]
        for _ in range(8):
            for i in range(0, 64, 4):
                chain = keys[i:i + 4]
                c.post("/keys/batch_exists", {"keys": chain})
                got = c.post("/keys/batch_allocate", {"rank": 0, "keys": chain}).json()
                c.post("/keys/confirm_write", {"rank": 0, "confirmations": [
                    [k, p] for k, p in got["results"] if p >= 0]})
        advice = c.get("/v1/stats").json()["namespaces"][0]["advice"]
        r = run("advise", "--page-bytes", 2 * 1024 * 1024, url=u)
        expect_exit(r, 0)
        expect_eq(r.lines()[0].split(), ["NAMESPACE", "PAGES", "HIT", "TARGET", "ADVISED",
                                         "BYTES", "DOUBLE", "HALF-FREES", "HALF"], "header")
        row = r.lines()[1].split()
        expect_eq(row[:2], ["kv", "32"], "namespace and pages now")
        expect_eq(row[4], str(advice["pages"]), "advised pages as the server says")
        expect_true(advice["pages"] > 32, "the scan needs more than 32 pages: %r" % advice)
        mib = advice["pages"] * 2.0
        expect_eq(" ".join(row[5:7]), "%.1f %s" % ((mib / 1024, "GiB") if mib >= 1024
                                                    else (mib, "MiB")), "advised bytes")
        expect_eq(row[7], "%+.1fpt" % (advice["doubling_gain"] * 100), "doubling's gain")
        expect_exit(run("advise", "--page-bytes", "0", url=u), 2)


def test_watch_refreshes_the_table_count_times():
    with Server() as srv:
        u = url_of(srv)
        expect_exit(run("init", "--pages", 5, url=u), 0)
        r = run("watch", "--interval", "0.2", "--count", 3, url=u)
        expect_exit(r, 0)
        expect_eq(r.out.count("NAMESPACE"), 3, "tables printed")
        expect_eq(len(re.findall(r"refresh \d/3", r.out)), 3, "refresh banners")
        expect_true(r.took >= 0.35, "3 refreshes 0.2 s apart took only %.2f s" % r.took)
        r = run("watch", "--interval", "0.1", "--count", 2, "--json", url=u)
        expect_exit(r, 0)
        docs = [json.loads(ln) for ln in r.lines()]
        expect_eq(len(docs), 2, "one JSON document per refresh")


def test_load_drives_scheduler_and_two_worker_ranks_and_reports_rates():
    with Server() as srv:
        u = url_of(srv)
        r = run("load", "--duration", 2, "--clients", 2, "--keys-per-request", 8, "--pages", 4096,
                "--json", url=u, timeout=60)
        expect_exit(r, 0)
        s = r.json()
        expect_eq((s["clients"], s["keys_per_request"], s["dialect"]), (2, 8, "vllm"), "echo")
        expect_true(1.9 <= s["duration_s"] <= 5, "duration %r" % s["duration_s"])
        expect_true(s["requests"] > 50 and s["requests_per_s"] > 0, "requests: %r" % s)
        expect_true(s["keys_allocated"] > 0 and s["keys_checked"] > 0, "keys: %r" % s)
        expect_true(s["keys_hit"] > 0, "shared prefixes should hit: %r" % s)
        expect_eq(s["errors"], 0, "errors")
        expect_true("requests" in r.err, "progress line on stderr: %r" % r.err)
        st = srv.stats()
        expect_true(st[("kv", 0)]["keys"] > 0 and st[("kv", 1)]["keys"] > 0,
                    "both worker ranks got keys: %r" % st)
        srv.check()


def test_load_text_summary_and_sglang_dialect():
    with Server() as srv:
        u = url_of(srv)
        r = run("--dialect", "sglang", "--namespace", "lg", "load", "--duration", 1, "--clients", 1,
                url=u, timeout=60)
        expect_exit(r, 0)
        for text in ("requests", "/s", "keys allocated", "keys hit", "errors"):
            expect_true(text in r.out, "summary should show %r: %r" % (text, r))
        st = srv.stats()
        expect_true(("lg", 0) in st and ("lg", 1) in st, "sglang pools: %r" % sorted(st))


def test_load_against_a_dead_server_exits_3():
    port = harness.free_port()
    r = run("load", "--duration", 1, url="http://127.0.0.1:%d" % port)
    expect_exit(r, 3)


# -- transport errors and the environment --------------------------------------

def test_connection_refused_exits_3():
    port = harness.free_port()
    r = run("exists", "k", url="http://127.0.0.1:%d" % port)
    expect_exit(r, 3)
    expect_true("Connection refused" in r.err, "message: %r" % r)


def test_timeout_against_a_server_that_never_answers_exits_3():
    with FakeServer(None) as fake:
        r = run("--timeout", 300, "stats", url="http://127.0.0.1:%d" % fake.port)
        expect_exit(r, 3)
        expect_true("300 ms" in r.err, "timeout message: %r" % r)
        expect_true(r.took < 5, "took %.2f s" % r.took)


def test_server_error_exits_5():
    answer = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              b"Content-Length: 25\r\nConnection: close\r\n\r\n{\"detail\":\"draining now\"}")
    with FakeServer(answer) as fake:
        r = run("exists", "k", url="http://127.0.0.1:%d" % fake.port)
        expect_exit(r, 5)
        expect_true("HTTP 503: draining now" in r.err, "message: %r" % r)


def test_malformed_answer_exits_5():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot json!"
    with FakeServer(answer) as fake:
        r = run("exists", "k", url="http://127.0.0.1:%d" % fake.port)
        expect_exit(r, 5)


def test_unauthorized_exits_4():
    answer = (b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 24\r\nConnection: close\r\n\r\n"
              b"{\"detail\":\"Unauthorized\"}")
    with FakeServer(answer) as fake:
        r = run("--token", "abc", "stats", url="http://127.0.0.1:%d" % fake.port)
        expect_exit(r, 4)


def test_url_comes_from_the_environment_and_the_option_wins():
    with Server() as srv:
        env = {"HF3FS_META_URL": url_of(srv)}
        r = run("stats", env=env)
        expect_exit(r, 0, "with HF3FS_META_URL")
        dead = "http://127.0.0.1:%d" % harness.free_port()
        r = run("--url", dead, "stats", env=env)
        expect_exit(r, 3, "--url wins over the environment")


def test_auth_token_against_a_server_with_auth():
    out = subprocess.run([os.path.abspath(harness.BIN), "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=10).stdout.decode()
    if "--auth-token-file" not in out:
        raise Skip("hf3fs-metad has no --auth-token-file yet (client side of Basic and Bearer"
                   " auth is tested against a fake server in test_client)")
    with TokenFile("tok-123\n") as path, Server("--auth-token-file", path) as srv:
        expect_exit(run("stats", url=url_of(srv)), 4, "no token")
        expect_exit(run("--token", "tok-123", "stats", url=url_of(srv)), 0, "bearer")
        expect_exit(run("stats", url="http://:tok-123@127.0.0.1:%d" % srv.port), 0, "basic")
        expect_exit(run("stats", env={"HF3FS_META_TOKEN": "tok-123"}, url=url_of(srv)), 0,
                    "HF3FS_META_TOKEN")
        expect_exit(run("--token", "wrong", "stats", url=url_of(srv)), 4, "wrong token")


if __name__ == "__main__":
    harness.main(globals())

"""test_docs.py: the shell sessions of the README, docs/many-nodes.md and
docs/operations.md run as written and print what they show.

The convention that marks which blocks run, how a session runs (one bash
per file in a network namespace of its own, so the docs' ports are used as
written) and how output is compared: docs/testing.md, "Docs that run".
About 18 s, mostly many-nodes.md's cluster waiting for its replicas.
"""

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import expect_true
import procs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCS = ["README.md", os.path.join("docs", "many-nodes.md"), os.path.join("docs", "operations.md")]
SHELL_LANGS = ("sh", "console")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colours (redis-cli --cluster prints them)
MARK = re.compile(r"^<!--\s*doctest:\s*(.*?)\s*-->\s*$")
COMMAND_TIMEOUT_S = 60.0 * harness.SLOWDOWN
SETTLE_TIMEOUT_S = 10.0 * harness.SLOWDOWN
# the server under test (relative paths from the repository's root, where
# the runner starts the suites)
BIN = harness.BIN if os.path.exists(harness.BIN) else os.path.join(ROOT, harness.BIN)


class DocError(AssertionError):
    pass


class Block:
    def __init__(self, path, line, lang, body, mark):
        self.path, self.line, self.lang, self.body, self.mark = path, line, lang, body, mark
        self.action, self.setup, self.reason = None, None, None

    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, ROOT), self.line)


def blocks_of(path):
    """The ```sh and ```console blocks of a Markdown file with their marks
    (None when the line before the fence, blank lines aside, is no mark),
    and the marks that precede no such block (as where strings)."""
    with open(path) as f:
        lines = f.read().split("\n")
    out, stray = [], []
    i = 0
    last_mark = None  # (line number, text) of a mark not yet used
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line.strip())
        if m:
            if last_mark:
                stray.append("%s:%d" % (os.path.relpath(path, ROOT), last_mark[0]))
            last_mark = (i + 1, m.group(1))
            i += 1
            continue
        if line.startswith("```"):
            lang = line[3:].strip()
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if lang in SHELL_LANGS:
                out.append(Block(path, i + 1, lang, lines[i + 1:j],
                                 last_mark[1] if last_mark else None))
            elif last_mark:
                stray.append("%s:%d" % (os.path.relpath(path, ROOT), last_mark[0]))
            last_mark = None
            i = j + 1
            continue
        if line.strip() and last_mark:
            stray.append("%s:%d" % (os.path.relpath(path, ROOT), last_mark[0]))
            last_mark = None
        i += 1
    if last_mark:
        stray.append("%s:%d" % (os.path.relpath(path, ROOT), last_mark[0]))
    return out, stray


def parse_mark(block):
    """Fills block.action ('run' or 'skip'), setup and reason; DocError when
    the mark is missing or malformed."""
    if block.mark is None:
        raise DocError("%s: a ```%s block without a <!-- doctest: run --> or <!-- doctest: "
                       "skip: REASON --> mark before it" % (block.where(), block.lang))
    text = block.mark
    if text == "run":
        block.action = "run"
    elif text.startswith("run;"):
        key, _, value = text[4:].strip().partition(":")
        if key.strip() != "setup" or not value.strip():
            raise DocError("%s: malformed mark %r (run; setup: COMMAND)" % (block.where(), text))
        block.action, block.setup = "run", value.strip()
    elif text.startswith("skip:") and text[5:].strip():
        block.action, block.reason = "skip", text[5:].strip()
    else:
        raise DocError("%s: malformed mark %r: 'run', 'run; setup: COMMAND' or "
                       "'skip: REASON' (a reason is required)" % (block.where(), text))
    return block


def commands_of(block):
    """[(command text, expected output lines or None, line number)]."""
    if block.lang == "sh":
        return [("\n".join(block.body), None, block.line + 1)]
    out = []
    i = 0
    body = block.body
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            raise DocError("%s:%d: output before any command: %r"
                           % (os.path.relpath(block.path, ROOT), block.line + 1 + i, line))
        start = block.line + 1 + i
        cmd = [line[2:]]
        i += 1
        while i < len(body) and (cmd[-1].endswith("\\") or body[i].startswith("> ")):
            cmd.append(body[i][2:] if body[i].startswith("> ") else body[i])
            i += 1
        expected = []
        while i < len(body) and not body[i].startswith("$ "):
            expected.append(body[i])
            i += 1
        out.append(("\n".join(cmd), expected, start))
    return out


def output_matches(expected, got):
    """Whether got (text) is what the expected lines show, "..." a
    placeholder (a line of its own: any lines; within a line: any text);
    terminal colour codes removed, trailing blank lines ignored."""
    while expected and not expected[-1].strip():
        expected = expected[:-1]
    pattern = ""
    for line in expected:
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*?".join(re.escape(p) for p in line.split("...")) + r"\n"
    text = ANSI.sub("", got).rstrip(" \n")
    text = text + "\n" if text else ""
    return re.fullmatch(pattern, text) is not None


# ---- the namespace's processes --------------------------------------------

def _netns(pid):
    try:
        return os.readlink("/proc/%d/ns/net" % pid)
    except OSError:
        return None


def members(ns, but=()):
    """The live processes (not zombies) of network namespace ns."""
    return {pid for pid, _, fields in procs.processes()
            if pid not in but and fields[0] != "Z" and _netns(pid) == ns}


def listening_inodes(any_pid):
    """The inodes of the TCP sockets listening in any_pid's namespace."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (any_pid, name)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        inodes.update(r.split()[9] for r in rows if r.split()[3] == "0A")
    return inodes


def listens(pid, inodes):
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


def describe(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


# ---- a shell per file -----------------------------------------------------

class Session:
    """One bash in a network namespace and a scratch folder of its own."""

    def __init__(self, name, settle_s=SETTLE_TIMEOUT_S):
        self.settle_s = settle_s
        self.scratch = tempfile.mkdtemp(prefix="hf3fs-doc-")
        self.bin = tempfile.mkdtemp(prefix="hf3fs-doc-bin-")
        build = os.path.dirname(os.path.abspath(BIN))
        os.symlink(build, os.path.join(self.scratch, "build"))
        for prog in ("hf3fs-metad", "hf3fs-meta"):
            os.symlink(os.path.join(build, prog), os.path.join(self.bin, prog))
        self.log_path = os.path.join(self.bin, "stderr.log")
        self.log = open(self.log_path, "ab", buffering=0)
        self.name = name
        env = {"PATH": self.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": self.scratch, "LC_ALL": "C.UTF-8", "TERM": "dumb"}
        unshare = ["unshare", "--net"] if os.geteuid() == 0 else \
            ["unshare", "--map-root-user", "--net"]
        r, self.w = os.pipe()
        # bash reads the commands from fd r; its stdin (what the commands
        # inherit) is /dev/null: a terminal where nobody types
        self.proc = subprocess.Popen(unshare + ["--", "bash", "--noprofile", "--norc",
                                                "/dev/fd/%d" % r],
                                     pass_fds=(r,), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.log,
                                     cwd=self.scratch, env=env, start_new_session=True)
        os.close(r)
        self.buf = b""
        self.ns = None
        deadline = time.monotonic() + 5
        while self.ns is None or self.ns == _netns(os.getpid()):
            if time.monotonic() > deadline:
                raise DocError("unshare --net did not give bash a namespace of its own")
            time.sleep(0.01)
            self.ns = _netns(self.proc.pid)
        status, out = self.send("ip link set lo up")
        if status != 0:
            raise DocError("ip link set lo up in the namespace failed: " + self.stderr_tail())

    def note(self, text):
        self.log.write(("\n#### %s\n" % text).encode())

    def send(self, command, timeout=COMMAND_TIMEOUT_S):
        """(exit status, stdout) of one command; then waits until what it
        left running listens (settle)."""
        before = members(self.ns)
        self.note("$ " + command)
        os.write(self.w, (command + "\nprintf '\\036%d\\n' \"$?\"\n").encode())
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(rb"\x1e(\d+)\n", self.buf)
            if m:
                out, self.buf = self.buf[:m.start()], self.buf[m.end():]
                status = int(m.group(1))
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise DocError("%s: no end within %.0f s of: %s\n%s"
                               % (self.name, timeout, command, self.stderr_tail()))
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 1.0))
            if ready:
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    raise DocError("%s: bash ended during: %s\n%s"
                                   % (self.name, command, self.stderr_tail()))
                self.buf += data
        self.settle(before, command)
        return status, out.decode(errors="replace")

    def settle(self, before, command):
        """Wait until every process that command left running in the
        namespace listens on a TCP port or has exited."""
        deadline = time.monotonic() + self.settle_s
        while True:
            new = members(self.ns, but=before | {self.proc.pid})
            inodes = listening_inodes(self.proc.pid)
            waiting = [p for p in new if not listens(p, inodes)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise DocError("%s: %s left running what did not listen within %.0f s: %s\n%s"
                               % (self.name, command, SETTLE_TIMEOUT_S,
                                  "; ".join(describe(p) for p in waiting), self.stderr_tail()))
            time.sleep(0.05)

    def stderr_tail(self, limit=4000):
        with open(self.log_path, "rb") as f:
            text = f.read().decode(errors="replace")
        return "stderr of the session (last %d bytes):\n%s" % (limit, text[-limit:])

    def close(self):
        """Every process of the namespace stopped (SIGTERM, then SIGKILL
        after 5 s), the folders removed."""
        try:
            os.close(self.w)
        except OSError:
            pass
        procs = members(self.ns) if self.ns else set()
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            for pid in procs:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + wait_s
            while procs and time.monotonic() < deadline:
                self.proc.poll()
                time.sleep(0.05)
                procs = members(self.ns)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.bin, ignore_errors=True)


def run_blocks(path, blocks, name=None, settle_s=SETTLE_TIMEOUT_S):
    """Runs the blocks marked run of one file in one session; returns the
    number of commands run. DocError names the first that failed."""
    session = Session(name or os.path.relpath(path, ROOT), settle_s)
    ran = 0
    try:
        for block in blocks:
            if block.action != "run":
                continue
            if block.setup:
                status, _ = session.send(block.setup)
                if status != 0:
                    raise DocError("%s: its setup %r exited %d\n%s"
                                   % (block.where(), block.setup, status, session.stderr_tail()))
            if block.lang == "sh":
                session.send("trap '__doctest_failed=\"$BASH_COMMAND (exit $?)\"' ERR; "
                             "__doctest_failed=")
            for command, expected, line in commands_of(block):
                where = "%s:%d" % (os.path.relpath(path, ROOT), line)
                status, out = session.send(command)
                ran += 1
                if status != 0:
                    raise DocError("%s: exited %d: %s\nits stdout:\n%s%s"
                                   % (where, status, command, out, session.stderr_tail()))
                if expected is not None and not output_matches(expected, out):
                    raise DocError("%s: %s\nthe doc shows:\n%s\nit printed:\n%s\n%s"
                                   % (where, command, "\n".join(expected), out,
                                      session.stderr_tail()))
            if block.lang == "sh":
                status, out = session.send("printf '%s' \"$__doctest_failed\"; trap - ERR")
                if out:
                    raise DocError("%s: a command failed: %s\n%s"
                                   % (block.where(), out, session.stderr_tail()))
        return ran
    finally:
        session.close()


def marked(path):
    blocks, stray = blocks_of(os.path.join(ROOT, path))
    if stray:
        raise DocError("doctest marks before no ```sh or ```console block: " + ", ".join(stray))
    return [parse_mark(b) for b in blocks]


def run_doc(path):
    blocks = marked(path)
    t0 = time.monotonic()
    ran = run_blocks(os.path.join(ROOT, path), blocks)
    expect_true(ran > 0, "%s: no command ran (no block marked run?)" % path)
    print("  %s: %d commands in %d blocks, %.1f s"
          % (path, ran, sum(b.action == "run" for b in blocks), time.monotonic() - t0))


# ---- the tests ------------------------------------------------------------

def test_every_shell_block_of_the_docs_says_whether_it_runs_and_why_not():
    problems = []
    for path in DOCS:
        try:
            marked(path)
        except DocError as e:
            problems.append(str(e))
    if problems:
        raise DocError("\n".join(problems))


def test_a_session_fails_on_other_output_a_failing_command_or_an_unmarked_block():
    """The runner itself: what it must refuse (a comparison that always
    passed would make every other test here pass too)."""
    scratch = tempfile.mkdtemp(prefix="hf3fs-doc-self-")
    try:
        def doc(text):
            path = os.path.join(scratch, "doc.md")
            with open(path, "w") as f:
                f.write(text)
            return (path,) + blocks_of(path)

        def fails(text, words):
            path, blocks, _ = doc(text)
            try:
                run_blocks(path, [parse_mark(b) for b in blocks], "self-test", settle_s=1.0)
            except DocError as e:
                expect_true(words in str(e), "the runner failed, but not for %r: %s" % (words, e))
                return
            raise AssertionError("the runner passed a doc it must refuse:\n" + text)

        ok_path, ok_blocks, _ = doc(
            "<!-- doctest: run; setup: X=set-up -->\n```console\n$ echo $X; printf 'a\\nb\\nc\\n'\n"
            "set-up\n...\nc\n$ for i in 1 2; do\n>   echo \"line $i of 2\"\n> done\nline 1 ... 2\n"
            "line ... of 2\n$ echo one \\\n    two\none two\n```\n\n"
            "<!-- doctest: skip: shows nothing that runs -->\n```sh\nexit 3\n```\n"
            "<!-- doctest: run -->\n```sh\nY=1\ntrue\n```\n")
        expect_true(run_blocks(ok_path, [parse_mark(b) for b in ok_blocks], "self-test") == 4,
                    "the runner did not run the 3 commands and the sh block")
        fails("<!-- doctest: run -->\n```console\n$ echo hello\ngoodbye\n```\n", "the doc shows")
        fails("<!-- doctest: run -->\n```console\n$ echo hello\n```\n", "it printed")
        fails("<!-- doctest: run -->\n```console\n$ echo a; false\na\n```\n", "exited 1")
        fails("<!-- doctest: run -->\n```sh\nfalse\ntrue\n```\n", "a command failed: false")
        # a process left running that never listens is a doc that runs
        # only by luck of timing
        fails("<!-- doctest: run -->\n```console\n$ sleep 600 &\n```\n", "did not listen")
        # marks refused before anything runs: none, a skip without its reason
        fails("text\n```console\n$ true\n```\n", "without a <!-- doctest")
        fails("<!-- doctest: skip: -->\n```sh\ntrue\n```\n", "a reason is required")
        _, _, stray = doc("<!-- doctest: run -->\nprose\n```console\n$ true\n```\n")
        expect_true(stray == ["%s:1" % os.path.relpath(os.path.join(scratch, "doc.md"), ROOT)],
                    "a mark away from its block was not reported: %r" % stray)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_readme_sessions_run_as_written():
    run_doc("README.md")


def test_many_nodes_sessions_run_as_written_one_redis_and_a_cluster():
    run_doc(os.path.join("docs", "many-nodes.md"))


def test_operations_sessions_run_as_written():
    blocks = marked(os.path.join("docs", "operations.md"))
    if not any(b.action == "run" for b in blocks):
        raise harness.Skip("every shell block of operations.md needs root, systemd or real "
                           "hosts (each mark says which)")
    run_doc(os.path.join("docs", "operations.md"))


if __name__ == "__main__":
    harness.main(globals())

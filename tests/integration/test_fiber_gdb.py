"""test_fiber_gdb.py: gdb unwinds through the fibers' switch (util/fiber_switch.c).

The unit test binary BUILD/tests/test_fiber (BUILD: the directory of
$HF3FS_METAD_BIN) runs one of its tests under `gdb -batch`, stopped in
hf__fiber_switch after it has saved the registers and before it loads the
other stack, and again one instruction later:

- when the loop switches to a fiber, the backtrace reaches the loop's
  caller (hf_sched_spawn, then main);
- when a fiber parks, the backtrace runs through the park to the fiber's
  entry function (wait_for_flag) and the fiber's first frame (fiber_main);
- one instruction later, the stack pointer is the loop's again, and the
  same frame description unwinds the loop's stack.

Each needs the switch's CFI directives: without them gdb reads the return
address from the wrong slot and the backtrace stops in garbage. About 1 s.
"""

import os
import re
import shutil
import subprocess

import harness
from harness import expect_true

UNIT = os.path.join(os.path.dirname(os.path.abspath(harness.BIN)), "tests", "test_fiber")
TEST = "parked_fiber_goes_on_when_another_fiber_of_its_loop_wakes_it"
MARK = "==== backtrace"


def stack_load_offset():
    """The offset in hf__fiber_switch of `mov %rsi,%rsp` (the load of the
    other stack), from gdb's disassembly of the binary."""
    p = subprocess.run(["gdb", "-nx", "-batch", "-ex", "disassemble hf__fiber_switch", UNIT],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"<\+(\d+)>:\s+mov\s+%rsi,%rsp", p.stdout)
    if not m:
        raise AssertionError("no `mov %%rsi,%%rsp` in gdb's disassembly of hf__fiber_switch:\n%s"
                             % (p.stdout + p.stderr)[-1500:])
    return int(m.group(1))


def backtraces():
    """The three backtraces (loop to fiber, fiber parking, one instruction
    into the loop's stack), as gdb prints them."""
    off = stack_load_offset()
    cmds = ["set pagination off", "set confirm off",
            "break *(hf__fiber_switch+%d)" % off,
            "run " + TEST,
            "echo %s 1\\n" % MARK, "bt",
            "continue",
            "echo %s 2\\n" % MARK, "bt",
            "stepi",
            "echo %s 3\\n" % MARK, "bt",
            "echo %s end\\n" % MARK,
            # ended here: a sanitized build's leak check refuses to run under ptrace
            "kill"]
    argv = ["gdb", "-nx", "-batch"]
    for c in cmds:
        argv += ["-ex", c]
    p = subprocess.run(argv + [UNIT], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    parts = p.stdout.split(MARK)
    if len(parts) != 5:
        raise AssertionError("gdb did not print the three backtraces:\n%s"
                             % (p.stdout + p.stderr)[-3000:])
    return parts[1:4]


def frames(bt):
    """The function names of a backtrace, innermost first (gdb prints the
    "__" of hf__fiber_switch as "." in a frame without debug information)."""
    names = []
    for line in bt.splitlines():
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?([A-Za-z_][A-Za-z0-9_.]*)", line.strip())
        if m:
            names.append(m.group(1).replace(".", "__"))
    return names


def ordered(names, want):
    """Whether want appear in names in that order (others between)."""
    it = iter(names)
    return all(w in it for w in want)


def test_backtrace_from_inside_the_switch_reaches_both_sides_entry_functions():
    if not shutil.which("gdb"):
        raise AssertionError("gdb is not installed (Debian package gdb: make deps)")
    if not os.access(UNIT, os.X_OK):
        raise AssertionError("%s is not built (make units)" % UNIT)
    to_fiber, parking, back_on_loop = (frames(b) for b in backtraces())
    expect_true(to_fiber[:1] == ["hf__fiber_switch"]
                and ordered(to_fiber, ["hf__fiber_switch", "hf_sched_spawn", TEST, "main"]),
                "the loop switching to a fiber: %s" % to_fiber)
    expect_true(ordered(parking, ["hf__fiber_switch", "hf_park_wait", "wait_for_flag",
                                  "fiber_main"]) and "main" not in parking,
                "a fiber parking: %s" % parking)
    expect_true(ordered(back_on_loop, ["hf__fiber_switch", "hf_sched_spawn", TEST, "main"])
                and "wait_for_flag" not in back_on_loop,
                "one instruction later, on the loop's stack: %s" % back_on_loop)


if __name__ == "__main__":
    harness.main(globals())

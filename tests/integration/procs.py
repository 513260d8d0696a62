"""procs.py: the processes of this machine as /proc shows them, for the
test runner (run_all.py: a hung job's process group) and test_docs.py (a
network namespace's processes)."""

import os


def processes():
    """(pid, command name, the fields after the name: state, ppid, pgrp,
    ...) of each process now; one that ends while it is read is left out."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        close = stat.rindex(")")
        yield int(d), stat[stat.index("(") + 1:close], stat[close + 2:].split()

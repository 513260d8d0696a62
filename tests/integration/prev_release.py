"""prev_release.py: the previous release, built from this repository's own
history for the upgrade tests (test_upgrade.py).

    import prev_release
    prev_release.module()   # its hf3fs_metad_redis.so (builds only the module)
    prev_release.server()   # its hf3fs-metad (builds everything)

PREVIOUS is the one place that names it. The first call checks it out with
`git worktree add --detach build/prev/<commit> <commit>` and runs its own
`make` there; what it built stays cached under build/prev/<commit>/build/
(`make clean` removes it; `git worktree prune` then forgets the checkout).
Builds of two test processes at once take turns (a lock file).
"""

import fcntl
import os
import subprocess

PREVIOUS = "5752aa3"  # the release before VERSION 1.0.0 (module version 5)

_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TREE = os.path.join(_ROOT, "build", "prev", PREVIOUS)


class BuildError(AssertionError):
    """The previous release could not be checked out or built."""


def _run(argv, cwd):
    r = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise BuildError("%s failed in %s:\n%s" % (" ".join(argv), cwd,
                                                   r.stdout.decode(errors="replace")[-3000:]))


def _built(target):
    """TREE/build/<target>, made by the previous release's own Makefile."""
    path = os.path.join(TREE, "build", target)
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(TREE), exist_ok=True)
    with open(os.path.join(os.path.dirname(TREE), ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(TREE, "Makefile")):
            _run(["git", "worktree", "prune"], _ROOT)
            _run(["git", "worktree", "add", "--force", "--detach", TREE, PREVIOUS], _ROOT)
        if not os.path.exists(path):
            jobs = str(os.cpu_count() or 2)
            _run(["make", "-j" + jobs, "build/" + target], TREE)
    return path


def module():
    """The previous release's Redis module (about 4 s of CPU the first time)."""
    return _built("hf3fs_metad_redis.so")


def server():
    """The previous release's hf3fs-metad (about 20 s of CPU the first time)."""
    return _built("hf3fs-metad")

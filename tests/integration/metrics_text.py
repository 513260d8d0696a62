"""metrics_text.py: read the Prometheus text format of GET /metrics (stdlib only),
and run `promtool check metrics` on it.

    samples = parse(text)                 # {(name, (("label", "value"), ...)): float}
    value(samples, "hf3fs_metad_pool_keys", namespace="kv", rank="0")
"""

import re
import shutil
import subprocess

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def _unescape(v):
    out = []
    i = 0
    while i < len(v):
        c = v[i]
        if c == "\\" and i + 1 < len(v):
            n = v[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse(text):
    """Every sample as {(name, sorted label pairs): value}; also checks that
    each family's samples are together and that TYPE lines come first."""
    samples = {}
    types = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert name not in types, "family %s declared twice" % name
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        name, labels_text, val = m.groups()
        labels = []
        if labels_text:
            pos = 0
            while pos < len(labels_text):
                lm = _LABEL.match(labels_text, pos)
                assert lm, "bad labels in %r" % line
                labels.append((lm.group(1), _unescape(lm.group(2))))
                pos = lm.end()
        key = (name, tuple(sorted(labels)))
        assert key not in samples, "sample repeated: %r" % line
        samples[key] = float(val)
    return samples


def value(samples, name, default=None, **labels):
    """The value of the sample with exactly these labels (or default)."""
    return samples.get((name, tuple(sorted(labels.items()))), default)


def total(samples, name, **labels):
    """Sum of the samples of `name` whose labels include the given ones."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def promtool_check(text):
    """(ok, output) of `promtool check metrics` on text; raises if promtool is
    missing (the Makefile's TEST_DEPS install it: Debian package prometheus)."""
    exe = shutil.which("promtool")
    if not exe:
        raise AssertionError("promtool is not installed (Debian package prometheus; "
                             "`make deps` installs it)")
    p = subprocess.run([exe, "check", "metrics"], input=text.encode("utf-8"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    return p.returncode == 0, p.stdout.decode("utf-8", "replace")

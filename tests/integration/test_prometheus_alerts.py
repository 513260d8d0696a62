"""test_prometheus_alerts.py: the shipped alerts fire in a real Prometheus.

Debian's `prometheus` (TEST_DEPS in the Makefile) scrapes a front end over a
real redis-server every second, with the shipped rules
(deploy/prometheus/hf3fs-metad.rules.yml) evaluated every second. While
Redis serves, Prometheus' HTTP API (/api/v1/alerts) shows one alert alone,
Hf3fsMetadStoreUnreplicated (that Redis has no replica); Redis is stopped,
and it must show Hf3fsMetadStoreDown and Hf3fsMetadNotServing, while
Hf3fsMetadDown (the scrape failing) stays quiet: /metrics keeps answering
through the outage.

The shipped rules wait `for: 1m` before an alert fires; the test does not
wait that minute (nor renders a copy of the rules with a shorter `for`): an
alert in the pending state is one whose expression holds, which is what
the test checks; how `for` turns pending into firing is Prometheus' part,
and the rules' own `for` is checked by promtool's rule tests
(tests/prometheus/hf3fs-metad.rules.test.yml). About 7 s here.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import harness
from harness import Server, expect_true, v_init, wait_for
from redis_server import RedisServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "deploy", "prometheus", "hf3fs-metad.rules.yml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """prometheus scraping target every second, rules every second, its
    storage in a temporary directory; killed when the block ends."""

    def __init__(self, target):
        self.target = target
        self.dir = tempfile.mkdtemp(prefix="hf3fs-prometheus.")
        self.port = free_port()
        self.proc = None

    def __enter__(self):
        exe = shutil.which("prometheus")
        expect_true(exe, "prometheus is not installed (Debian package prometheus; `make deps`)")
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: hf3fs-metad\n"
                    "    static_configs:\n      - targets: ['%s']\n" % (RULES, self.target))
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        wait_for(lambda: self.ready(), 20 * harness.SLOWDOWN, 0.1, "prometheus to be ready")
        return self

    def ready(self):
        expect_true(self.proc.poll() is None, "prometheus exited: %s" % self.log_text())
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=5) as r:
            return json.loads(r.read())["data"]

    def alerts(self):
        """{alertname: state} of the alerts pending or firing now."""
        return {a["labels"]["alertname"]: a["state"] for a in self.api("/api/v1/alerts")["alerts"]}

    def query(self, expr):
        return self.api("/api/v1/query?query=" + urllib.parse.quote(expr))["result"]

    def log_text(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()[-3000:]

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_prometheus_sees_store_down_fire_while_the_front_ends_redis_is_stopped():
    with RedisServer() as r, Server(store=r.url) as srv, \
            Prometheus("127.0.0.1:%d" % srv.port) as prom:
        v_init(srv.client(), 0, 8)
        wait_for(lambda: [s["value"][1] for s in prom.query('hf3fs_metad_store_up')] == ["1"],
                 20 * harness.SLOWDOWN, 0.2, "Prometheus to scrape store_up 1")
        # all is well but for the one Redis's want of a replica
        only = {"Hf3fsMetadStoreUnreplicated": "pending"}
        wait_for(lambda: prom.alerts() == only, 10 * harness.SLOWDOWN, 0.2,
                 "no alert but %r (now %r)" % (only, prom.alerts()))
        t0 = time.monotonic()
        r.stop()
        wanted = {"Hf3fsMetadStoreDown", "Hf3fsMetadNotServing"}
        seen = wait_for(lambda: prom.alerts() if wanted <= set(prom.alerts()) else None,
                        20 * harness.SLOWDOWN, 0.2, "%s pending or firing" % sorted(wanted))
        print("# alerts %.1f s after Redis stopped: %r" % (time.monotonic() - t0, seen),
              flush=True)
        expect_true(all(seen[a] in ("pending", "firing") for a in wanted), repr(seen))
        expect_true("Hf3fsMetadDown" not in seen, "the scrape kept working: %r" % seen)
        up = [s["value"][1] for s in prom.query('up{job="hf3fs-metad"}')]
        expect_true(up == ["1"], "up while Redis is stopped: %r" % up)


if __name__ == "__main__":
    harness.main(globals())

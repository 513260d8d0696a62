"""test_monitoring.py: the operators' kit stays true to the server.

- deploy/prometheus/hf3fs-metad.rules.yml passes `promtool check rules`, every
  alert says what to do, and tests/prometheus/hf3fs-metad.rules.test.yml
  (`promtool test rules`) passes and makes each alert fire and not fire;
- deploy/grafana/hf3fs-metad.json has its data-source input and template
  variables, and every query in it is a valid PromQL expression (promtool
  checks them as recording rules of a generated file);
- every metric name that the rules and the dashboard use is one that a
  server exports after a short load in both dialects (a renamed metric fails
  here), and every metric family it exports is on the dashboard.

promtool is Debian's prometheus package (TEST_DEPS in the Makefile)."""

import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml  # Debian python3-yaml (TEST_DEPS)

import harness
from harness import (Server, expect_status, expect_true, s_alloc, s_confirm, s_delete, s_exists,
                     s_init, s_pages, v_alloc, v_confirm, v_exists, v_init, v_locations,
                     wait_for)
import metrics_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "deploy", "prometheus", "hf3fs-metad.rules.yml")
RULE_TESTS = os.path.join(ROOT, "tests", "prometheus", "hf3fs-metad.rules.test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "hf3fs-metad.json")

# Names the rules and the dashboard may use although no engine exports them
# (the scrape covers both: the embedded engine's and the Redis engine's
# figures). Keep this list minimal: each entry must be used somewhere and
# must be absent from the scrape (the test fails otherwise, so that an entry
# goes as soon as the metric exists).
NOT_YET_EXPORTED = {}
# Series that Prometheus makes itself for every target.
PROMETHEUS_OWN = {"up"}

TEMPLATE_VARIABLES = ("instance", "namespace", "rank")


def promtool(*args):
    """(exit status, output) of promtool."""
    exe = shutil.which("promtool")
    expect_true(exe, "promtool is not installed (Debian package prometheus; `make deps`)")
    p = subprocess.run([exe] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def load_rules():
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [r for g in doc["groups"] for r in g["rules"]]


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_panels(dash):
    """Every panel, the rows' nested panels included."""
    out = []
    for p in dash.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_queries(dash):
    """[(where, PromQL)]: every panel target, and the series selector of every
    label_values() template query."""
    out = []
    for p in dashboard_panels(dash):
        for t in p.get("targets", []):
            out.append(("panel %r target %s" % (p.get("title"), t.get("refId")), t["expr"]))
    for v in dash["templating"]["list"]:
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*", q or "")
        expect_true(m, "template variable %r: expected label_values(selector, label), got %r"
                    % (v.get("name"), q))
        out.append(("template variable %r" % v["name"], m.group(1)))
    return out


def as_promql(expr):
    """A dashboard query with Grafana's variables replaced by what they stand
    for, so that promtool can parse it."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}",
                  "5m", expr)
    for name in TEMPLATE_VARIABLES:
        expr = re.sub(r"\$%s\b|\$\{%s(:[a-z]+)?\}" % (name, name), ".*", expr)
    expect_true("$" not in expr, "an unknown Grafana variable is left in %r" % expr)
    return expr


_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "offset", "bool", "inf", "nan", "atan2"}


def metric_names(expr):
    """The metric (and recorded rule) names a PromQL expression reads: every
    identifier that is not a function or aggregation, a keyword, a label (in
    braces or a grouping list) or part of a duration or number."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in _KEYWORDS:
            continue
        names.add(m.group(0))
    return names


_scraped = []


def scrape_after_load():
    """The sample names of /metrics after a short load in both dialects on a
    server with a data directory, once a snapshot was taken, and on a server
    over Redis (each engine exports figures of its own; scraped once, shared
    by the tests)."""
    if _scraped:
        return _scraped[0]
    names = _scrape_one(Server("--save-interval", "0.2", store=""),
                        "hf3fs_metad_snapshot_age_seconds")
    names |= _scrape_one(Server(store=harness.new_redis_db()), "hf3fs_metad_store_up")
    _scraped.append(names)
    return names


def _scrape_one(server, wanted):
    with server as srv:
        c = srv.client()
        # vLLM: two worker ranks, a pool small enough to evict.
        v_init(c, 0, 4)
        v_init(c, 1, 4)
        for rank in (0, 1):
            pages = v_alloc(c, rank, ["a", ["b", "a"], ["c", "b"]])
            v_confirm(c, rank, [("a", pages[0]), ("b", pages[1])], release=[pages[2]])
        v_alloc(c, 0, ["d", "e", "f"])  # evicts
        v_confirm(c, 0, [("zz", 3)])    # refused
        v_exists(c, ["a", "b", "nope"])
        # hf3fs_metad_hit_ratio_estimate shows once a completeness read asked
        # for a key the estimator samples: one in four, by the key's hash
        # under a seed drawn at each start (src/core/reuse.h). The five keys
        # read here leave about one start in four without it; 64 more, 0.75^64.
        v_exists(c, ["sampled-%d" % i for i in range(64)])
        v_locations(c, 1, ["a", "nope"])
        # SGLang: its own namespace.
        s_init(c, 2, 8, ns="sg")
        got = s_alloc(c, 2, ["k1", ["k2", "k1"]], ns="sg")
        s_confirm(c, 2, [("k1", got[0][1])], release=[got[1][1]], ns="sg")
        s_exists(c, 2, ["k1", "k2"], ns="sg")
        s_pages(c, 2, ["k1", "k2"], ns="sg")
        s_delete(c, 2, ["k1"], ns="sg")
        c.get("/no/such/route")

        def scraped():
            r = c.get("/metrics")
            expect_status(r, 200)
            names = {name for name, _ in metrics_text.parse(r.body.decode("utf-8"))}
            return names if wanted in names else None

        return wait_for(scraped, 10 * harness.SLOWDOWN, 0.1, "%s to show in /metrics" % wanted)


# -- the rules ----------------------------------------------------------------

def test_rules_pass_promtool_check_rules():
    rc, out = promtool("check", "rules", RULES)
    expect_true(rc == 0, "promtool check rules %s failed:\n%s" % (RULES, out))


def test_every_alert_has_a_severity_a_summary_and_a_description_of_what_to_do():
    alerts = [r for r in load_rules() if "alert" in r]
    expect_true(len(alerts) >= 10, "only %d alerts in %s" % (len(alerts), RULES))
    for r in alerts:
        sev = r.get("labels", {}).get("severity")
        expect_true(sev in ("critical", "warning"),
                    "alert %s: severity should be critical or warning, got %r" % (r["alert"], sev))
        ann = r.get("annotations", {})
        for key in ("summary", "description"):
            expect_true(len(ann.get(key, "").strip()) >= 20,
                        "alert %s: no real %s annotation" % (r["alert"], key))


def test_rule_unit_tests_pass_and_make_every_alert_fire_and_stay_quiet():
    rc, out = promtool("test", "rules", RULE_TESTS)
    expect_true(rc == 0, "promtool test rules %s failed:\n%s" % (RULE_TESTS, out))
    with open(RULE_TESTS) as f:
        doc = yaml.safe_load(f)
    fires, quiet = set(), set()
    for group in doc["tests"]:
        for t in group.get("alert_rule_test", []):
            (fires if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = {r["alert"] for r in load_rules() if "alert" in r}
    expect_true(alerts <= fires, "alerts never made to fire by %s: %s"
                % (RULE_TESTS, sorted(alerts - fires)))
    expect_true(alerts <= quiet, "alerts never checked to stay quiet by %s: %s"
                % (RULE_TESTS, sorted(alerts - quiet)))


# -- the dashboard --------------------------------------------------------------

def test_dashboard_has_a_prometheus_input_and_instance_namespace_rank_variables():
    dash = load_dashboard()
    inputs = {i.get("name"): i for i in dash.get("__inputs", [])}
    expect_true(inputs.get("DS_PROMETHEUS", {}).get("pluginId") == "prometheus",
                "__inputs should declare DS_PROMETHEUS, a prometheus data source: %r"
                % dash.get("__inputs"))
    names = [v.get("name") for v in dash["templating"]["list"]]
    expect_true(names == list(TEMPLATE_VARIABLES),
                "template variables should be %r, got %r" % (TEMPLATE_VARIABLES, names))
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    ids = set()
    for p in dashboard_panels(dash):
        expect_true(p.get("id") not in ids, "panel id %r used twice" % p.get("id"))
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        expect_true(p.get("targets"), "panel %r has no query" % p.get("title"))
        for t in [p] + p["targets"]:
            expect_true(t.get("datasource") == ds, "panel %r: data source should be %r, got %r"
                        % (p.get("title"), ds, t.get("datasource")))
    for v in dash["templating"]["list"]:
        expect_true(v.get("datasource") == ds, "variable %r: data source should be %r"
                    % (v.get("name"), ds))


def test_every_dashboard_query_is_valid_promql():
    queries = dashboard_queries(load_dashboard())
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard_query_%d" % i, "expr": as_promql(expr)}
        for i, (_, expr) in enumerate(queries)]}]}
    tmp = tempfile.mkdtemp(prefix="hf3fs-metad-dashboard-")
    try:
        path = os.path.join(tmp, "dashboard-queries.rules.yml")
        with open(path, "w") as f:
            yaml.safe_dump(rules, f, width=1000)
        rc, out = promtool("check", "rules", path)
        where = "\n".join("dashboard_query_%d: %s: %s" % (i, w, e)
                          for i, (w, e) in enumerate(queries))
        expect_true(rc == 0, "promtool check rules on the dashboard's queries failed:\n%s\n%s"
                    % (out, where))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- both against a real server --------------------------------------------------

def test_every_metric_the_rules_and_the_dashboard_use_is_exported_by_the_server():
    rules = load_rules()
    recorded = {r["record"] for r in rules if "record" in r}
    used = {}  # name -> where
    for r in rules:
        for n in metric_names(r["expr"]):
            used.setdefault(n, "rule %s" % (r.get("alert") or r.get("record")))
    for where, expr in dashboard_queries(load_dashboard()):
        for n in metric_names(as_promql(expr)):
            used.setdefault(n, "dashboard %s" % where)
    expect_true(len(used) >= 20, "suspiciously few metric names found: %r" % sorted(used))
    exported = scrape_after_load()
    missing = sorted("%s (%s)" % (n, w) for n, w in used.items()
                     if n not in exported and n not in recorded and n not in PROMETHEUS_OWN
                     and n not in NOT_YET_EXPORTED)
    expect_true(not missing, "used but not exported by the server:\n  " + "\n  ".join(missing))
    stale = sorted(n for n in NOT_YET_EXPORTED if n in exported)
    expect_true(not stale, "now exported, drop from NOT_YET_EXPORTED: %s" % stale)
    unused = sorted(n for n in NOT_YET_EXPORTED if n not in used)
    expect_true(not unused, "in NOT_YET_EXPORTED but used nowhere: %s" % unused)


def test_every_metric_family_the_server_exports_is_on_the_dashboard():
    used = set()
    for _, expr in dashboard_queries(load_dashboard()):
        used |= metric_names(as_promql(expr))
    families = set()
    for n in scrape_after_load():
        families.add(re.sub(r"_(bucket|sum|count)$", "", n)
                     if n.endswith(("_bucket", "_sum", "_count")) else n)
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used} | used
    missing = sorted(families - shown)
    expect_true(not missing, "exported but on no dashboard panel: %s" % missing)


if __name__ == "__main__":
    harness.main(globals())

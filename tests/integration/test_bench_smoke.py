"""test_bench_smoke.py: the benchmark suite (bench/run, bench/read_cost.py,
bench/fleet_bench.py) still works.

Runs `bench/run --smoke` once (seconds: one run per scenario, tiny loads) and
checks the shape of what it prints: a row with figures for every scenario, the
nginx floor and its ratio where there is one, the memory figures, and that no
server it started is left running. It asserts no figure: a slow or noisy
machine must not fail it.

The suite always uses the normal build (build/): its load generator and memory
probe are not built for the sanitized one. When wrk or nginx cannot be
installed, bench/run says SKIP and these tests pass with a message.

    /usr/bin/python3 tests/integration/test_bench_smoke.py
"""

import os
import re
import subprocess
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCENARIOS = ["1", "2", "3", "4", "5a", "5b", "5c", "6"]
# --smoke runs the nginx floor for scenario 1 only (bench/run), and the
# cluster rows of 2 primaries only (bench/cluster_bench.py)
WITH_NGINX = ["1"]
CLUSTER_PRIMARIES = [2]
NUMBER = re.compile(r"^\d+(\.\d+)?$")

_result = None


def smoke():
    """Run bench/run --smoke once; (exit code, output)."""
    global _result
    if _result is None:
        env = dict(os.environ, BUILD="build")
        env.pop("HF3FS_VLLM_SERVER_PY", None)
        env.pop("HF3FS_SGLANG_SERVER_PY", None)
        proc = subprocess.run([os.path.join(ROOT, "bench", "run"), "--smoke"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=600)
        _result = (proc.returncode, proc.stdout)
    return _result


def skipped():
    return "SKIP bench:" in smoke()[1]


def rows():
    """Table rows by scenario id: the list of cells."""
    table = {}
    for line in smoke()[1].splitlines():
        if not line.startswith("| ") or line.startswith("| #"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        table[cells[0]] = cells
    return table


def test_smoke_run_exits_zero_and_prints_a_table():
    code, out = smoke()
    assert code == 0, "bench/run --smoke exited %d:\n%s" % (code, out[-3000:])
    if skipped():
        print("  (skipped: %s)" % out.strip().splitlines()[-1])
        return
    assert "| # | scenario | requests/s |" in out, out[-3000:]


def test_every_scenario_has_a_row_with_requests_keys_and_latency_figures():
    if skipped():
        return
    table = rows()
    for sid in SCENARIOS:
        assert sid in table, "no row for scenario %s in:\n%s" % (sid, smoke()[1][-3000:])
        cells = table[sid]
        rate = cells[2].split(" ")[0]
        assert NUMBER.match(rate), "scenario %s requests/s is %r" % (sid, cells[2])
        for name, cell in (("keys/s", cells[3]), ("p50", cells[4]), ("p99", cells[5])):
            assert NUMBER.match(cell), "scenario %s %s is %r" % (sid, name, cell)


def test_save_scenario_counts_pairs_and_names_its_python_reference():
    if skipped():
        return
    cells = rows()["4"]
    assert re.search(r"\(\d+ pairs/s\)", cells[2]), cells
    assert "quoted" in cells[9] or re.match(r"^\d+ [\d.]+x$", cells[9]), cells


def test_http_scenarios_have_an_nginx_floor_a_ratio_to_it_and_its_p99():
    if skipped():
        return
    table = rows()
    for sid in WITH_NGINX:
        cells = table[sid]
        assert NUMBER.match(cells[6]), "scenario %s nginx req/s is %r" % (sid, cells[6])
        # A ratio whenever our rate is a figure and nginx's is above 0 (a 1 s
        # smoke run on a loaded machine may complete no request: nginx's 0
        # gives "-", ours gives "0%", as bench/run's ratio() writes them).
        both = NUMBER.match(cells[2]) and float(cells[6]) > 0
        want = r"^\d+%$" if both else r"^-$"
        assert re.match(want, cells[7]), "scenario %s ratio is %r (%s and %s requests/s)" % (
            sid, cells[7], cells[2], cells[6])
        assert NUMBER.match(cells[8]), "scenario %s nginx p99 is %r" % (sid, cells[8])


def test_memory_figures_per_entry_per_free_page_and_fresh_pool_are_printed():
    if skipped():
        return
    out = smoke()[1]
    # every engine's key shape (bench/keys.h): 32 vLLM, 64 and 66 SGLang
    for pattern in (r"32-char keys, TP \d+: [\d.]+ bytes per \(key, rank\)",
                    r"64-char keys, TP \d+: [\d.]+ bytes per \(key, rank\)",
                    r"66-char keys, TP \d+: [\d.]+ bytes per \(key, rank\)",
                    r"free pages once used: [\d.]+ bytes per page",
                    r"pool of 10\^9 pages just created: \d+ KiB",
                    r"server: \d+ owned entries, 32-byte keys, one rank: [\d.]+ bytes per entry",
                    r"server: \d+ owned entries, 66-byte keys, one rank: [\d.]+ bytes per entry",
                    r"redis: \d+ owned entries, 32-byte keys, one rank: [\d.]+ bytes per"):
        assert re.search(pattern, out), "missing %r in:\n%s" % (pattern, out[-2000:])


def test_cluster_rows_show_every_shard_of_their_primaries_with_its_cpu_per_request():
    if skipped() or "SKIP cluster rows" in smoke()[1]:
        return
    table = rows()
    for n in CLUSTER_PRIMARIES:
        for kind in "se":
            rid = "c%d%s" % (n, kind)
            assert rid in table, "no cluster row %s in:\n%s" % (rid, smoke()[1][-3000:])
            cells = table[rid]
            assert cells[1] == str(n), cells
            assert NUMBER.match(cells[3]), "row %s requests/s is %r" % (rid, cells[3])
            assert NUMBER.match(cells[6]), "row %s CPU per request is %r" % (rid, cells[6])
            shards = cells[7].split("; ")
            assert len(shards) == n, "row %s names %d shards, not %d: %r" % (rid, len(shards), n, cells[7])
            for shard in shards:
                assert re.match(r"^\d+%, \d+$", shard), "row %s shard cell %r" % (rid, shard)


def test_no_server_started_by_the_suite_is_left_running():
    if skipped():
        return
    out = smoke()[1]
    m = re.search(r"processes started and stopped: ([\d ]+)", out)
    assert m, "bench/run did not list the processes it started:\n" + out[-2000:]
    pids = [int(p) for p in m.group(1).split()]
    assert pids, out[-2000:]
    alive = []
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    continue  # a zombie is dead already
            alive.append(pid)
        except OSError:
            pass
    assert not alive, "still running after bench/run exited: %s" % alive


def test_ab_script_runs_both_sides_alternately_and_prints_a_median_for_each():
    """bench/ab: one 1-second run per side, B with another flag; shape only."""
    if skipped():
        return
    binary = os.path.join(ROOT, "build", "hf3fs-metad")
    proc = subprocess.run([os.path.join(ROOT, "bench", "ab"), "--runs", "2", "--seconds", "1",
                           "exists", "1", binary, binary, "--", "--", "--max-header-bytes",
                           "16384"], cwd=ROOT, env=dict(os.environ, BUILD="build"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, "bench/ab exited %d:\n%s" % (proc.returncode, out[-2000:])
    sides = [line.split(" ")[0] for line in out.splitlines() if " requests=" in line]
    assert sides == ["A", "B", "A", "B"], "runs did not alternate A, B:\n" + out[-2000:]
    bad = [line for line in out.splitlines() if " requests=" in line and " errors=0" not in line]
    assert not bad, "runs with errors: %s" % bad
    for side in "AB":
        assert re.search(r"^%s median requests/s: \d+(\.\d+)?$" % side, out, re.M), out[-2000:]

def test_instructions_script_counts_instructions_per_request_of_each_binary():
    """bench/instructions: a 1-second count under callgrind prints, for the
    binary, the requests wrk saw and a per-request count that a 128-key read
    cannot go under (each key is parsed, hashed and looked up: thousands of
    instructions at least) nor a working server go far over."""
    if skipped():
        return
    binary = os.path.join(ROOT, "build", "hf3fs-metad")
    proc = subprocess.run([os.path.join(ROOT, "bench", "instructions"), "--seconds", "1",
                           "exists", "128", binary], cwd=ROOT, env=dict(os.environ, BUILD="build"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, "bench/instructions exited %d:\n%s" % (proc.returncode, out[-2000:])
    m = re.search(r"exists 128: requests=(\d+) instructions=(\d+) per_request=(\d+)$", out, re.M)
    assert m, "no count line:\n" + out[-2000:]
    requests, total, per = (int(g) for g in m.groups())
    assert requests > 0 and per == total // requests, out[-2000:]
    assert 10_000 < per < 10_000_000, "implausible instructions per 128-key read: %d" % per


def test_fleet_smoke_run_prints_every_row_and_the_capacity_total_and_ratios():
    """bench/fleet_bench.py --smoke: one Redis against a cluster of 3
    primaries, 1 and 2 front ends: every row with a rate and each node's CPU
    per request, then capacity and total, the front end against the embedded
    engine, --redis-wait 1 against 0 and the p50s (shape only)."""
    if skipped():
        return
    proc = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "fleet_bench.py"),
                           "--smoke"], cwd=ROOT, env=dict(os.environ, BUILD="build"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, "fleet_bench.py exited %d:\n%s" % (proc.returncode, out[-3000:])
    table = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| #"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            table[cells[0]] = cells
    for setup, nodes in (("one", 1), ("cluster", 3)):
        for fronts in (1, 2):
            for kind, unit in (("r", "requests/s"), ("w", "pairs/s")):
                rid = "%s/%dfe/16c/%s" % (setup, fronts, kind)
                assert rid in table, "no row %s in:\n%s" % (rid, out[-3000:])
                rate, cpu = table[rid][1], table[rid][3]
                assert re.match(r"^\d+ %s$" % unit, rate), (rid, rate)
                assert len(cpu.split(" / ")) == nodes, (rid, cpu)
    for rid in ("embedded/1fe/16c/r", "embedded/1fe/1c/r", "one/1fe/1c/r", "cluster/1fe/1c/r",
                "wait0/1fe/16c/w", "wait1/1fe/16c/w"):
        assert rid in table, "no row %s in:\n%s" % (rid, out[-3000:])
    for pattern in (r"1 front end\(s\), 16 connections: capacity \d+\.\d+x, total \d+\.\d+x",
                    r"2 front end\(s\), 16 connections: capacity \d+\.\d+x, total \d+\.\d+x",
                    r"16 connections: \d+ / \d+ requests/s = \d+\.\d+x",
                    r"--redis-wait 1 against 0 .*= \d+\.\d+x",
                    r"p50 of a 128-key read at 1 connection: embedded \d+\.\d+ ms"):
        assert re.search(pattern, out), "missing %r in:\n%s" % (pattern, out[-3000:])


def test_read_cost_smoke_run_prints_both_comparisons_and_their_targets():
    """bench/read_cost.py --smoke: the embedded, Redis and auth rows and the
    five target lines have figures (none is judged here)."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "read_cost.py"), "--smoke"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    out = proc.stdout
    if "is not installed" in out:
        print("  (skipped: %s)" % out.strip().splitlines()[-1])
        return
    assert proc.returncode == 0, "bench/read_cost.py exited %d:\n%s" % (proc.returncode,
                                                                        out[-2000:])
    assert re.search(r"^\| embedded .* \| \d+ \| \d+ \| [\d.]+x \| log: \d+ bytes", out, re.M), \
        out[-2000:]
    assert re.search(r"^\| Redis .* \| \d+ \| \d+ \| [\d.]+x \| replication [\d.]+ B, AOF", out,
                     re.M), out[-2000:]
    assert re.search(r"^\| --auth-token-file, 2 tenants, .* \| \d+ \| \d+ \| [\d.]+x \| "
                     r"server CPU", out, re.M), out[-2000:]
    targets = [line for line in out.splitlines() if re.match(r"^  .*: \S+( bytes)? (met|MISSED)$",
                                                             line)]
    assert len(targets) == 5, "five target lines expected:\n" + out[-2000:]


def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:  # a test must never stop the run
            failed += 1
            first = " | ".join(str(e).strip().splitlines()[:2]) or type(e).__name__
            print("FAIL %s (%.2fs): %s" % (name, time.monotonic() - t0, first[:400]), flush=True)
            traceback.print_exc(file=sys.stderr)
        else:
            passed += 1
            print("PASS %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(0 if failed == 0 and passed > 0 else 1)


if __name__ == "__main__":
    main()

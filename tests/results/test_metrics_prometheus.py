"""A real sweep's metrics, pushed to a real Pushgateway and written for a real node_exporter, come
back from a real Prometheus' HTTP API (/api/v1/query) with the CSV's values, series by series; a
gateway that is down costs the push, never the results; the alert rule docs/metrics.md shows fires
under `promtool test rules`. Skipped where Debian's prometheus packages are not installed."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from commbench.errors import ExitCode
from commbench.results.metrics import COLLECTIVES, message_size
from tests.support.prometheus_stack import Stack, StackUnavailable, missing

pytestmark = pytest.mark.slow  # servers and ranks
DOCS = Path(__file__).parents[2] / "docs" / "metrics.md"


@pytest.fixture(scope="module")
def stack():
    if absent := missing():
        pytest.skip(f"not installed: {', '.join(absent)} (.ci/install-cluster-tools.sh)")
    root = Path(tempfile.mkdtemp(prefix="commbench-prom-"))
    servers = Stack(root)
    try:
        servers.start()
    except StackUnavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(str(exc))
    yield servers
    servers.stop()
    shutil.rmtree(root, ignore_errors=True)


def _sweep(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "commbench", "sweep", "--op", "all_reduce,all_gather", "-b", "8", "-e", "4K"]
    argv += ["-n", "2", "--iters", "3", "--rounds", "1", "--no-plot", "--no-history", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def _by_series(answer: list[tuple[dict[str, str], float]]) -> dict[tuple[str, str, str], float]:
    return {(m["collective"], m["variant"], m["size_bytes"]): v for m, v in answer}


def _expected(csv: Path, column: str) -> dict[tuple[str, str, str], float]:
    rows = pd.read_csv(csv)
    rows = rows[rows["status"] != "unavailable"]
    return {
        (COLLECTIVES.get(r.op, r.op), r.variant, str(int(r.size_bytes))): float(getattr(r, column))
        for r in rows.itertuples()
    }


# A file as NCCL Inspector writes one (ext-profiler/inspector/inspector_prom.cc: no HELP, no TYPE).
INSPECTOR_LABELS = (
    'comm_id="0x7f3a",hostname="gpu01",rank="3",slurm_job="train",slurm_job_id="4242",nranks="8",n_nodes="1",'
    'gpu_device_id="GPU3",collective="AllReduce",coll_sn="917",timestamp="2026-12-03 17:00:00",message_size="64.00MB"'
)
INSPECTOR_FILE = "".join(
    f"{name}{{{INSPECTOR_LABELS}}} {value}\n"
    for name, value in (
        ("nccl_algorithm_bandwidth_gbs", 180.5),
        ("nccl_bus_bandwidth_gbs", 315.875),
        ("nccl_collective_exec_time_microseconds", 371.8),
    )
)


def test_a_pushed_and_a_scraped_sweep_come_back_from_prometheus_with_the_csvs_values(stack, tmp_path) -> None:
    csv = tmp_path / "run.csv"
    (stack.textfile_dir / "nccl_inspector_metrics_GPU-3.prom").write_text(INSPECTOR_FILE)  # production's, beside ours
    done = _sweep(
        "-o", str(csv), "--metrics-push", stack.pushgateway_url, "--metrics-textfile", str(stack.textfile_dir)
    )
    assert done.returncode == 0, done.stderr + done.stdout
    busbw, exec_time = _expected(csv, "busbw_gbps"), _expected(csv, "time_us_mean")
    assert len(busbw) >= 20 and all(math.isfinite(v) for v in busbw.values())
    for job in ("commbench", "node"):  # pushed: the gateway's group keeps job=commbench; scraped: the node job
        answer = stack.wait_for(f'nccl_bus_bandwidth_gbs{{job="{job}",comm_id=""}}', lambda a: len(a) >= len(busbw))
        assert _by_series(answer) == busbw
        labels = answer[0][0]
        assert labels["message_size"] == message_size(int(labels["size_bytes"])) and labels["rank"] == "0"
        assert {"nranks": "2", "n_nodes": "1", "backend": "gloo", "dtype": "float32"}.items() <= labels.items()
        assert "run_id" not in labels and "timestamp" not in labels
        times = stack.query(f'nccl_collective_exec_time_microseconds{{job="{job}",comm_id=""}}')
        assert _by_series(times) == exec_time
    # Inspector's samples in the same folder are scraped too: the two files agree on every metric's family.
    assert [v for _, v in stack.query('nccl_bus_bandwidth_gbs{job="node",comm_id="0x7f3a"}')] == [315.875]
    assert stack.query('node_textfile_scrape_error{job="node"}')[0][1] == 0
    run_id = str(pd.read_csv(csv)["run_id"].iloc[0])
    assert [m["run_id"] for m, _ in stack.query('commbench_run_info{job="commbench"}')] == [run_id]


def test_a_gateway_that_is_down_costs_the_push_never_the_results(stack, tmp_path) -> None:
    csv, port = tmp_path / "run.csv", stack.ports["pushgateway"] + 0
    stack.procs["pushgateway"].terminate()
    stack.procs["pushgateway"].wait(timeout=20)
    done = _sweep("-o", str(csv), "--metrics-push", f"http://ci:hunter2@127.0.0.1:{port}")
    assert done.returncode == ExitCode.UNDELIVERED, done.stderr + done.stdout
    warnings = [line for line in done.stderr.splitlines() if "push" in line]
    assert len(warnings) == 1 and "ci:***@127.0.0.1" in warnings[0] and "export prometheus" in warnings[0]
    recorded = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())  # the CSV and its .env.json
    assert "hunter2" not in done.stdout + done.stderr + recorded
    rows = pd.read_csv(csv)
    assert len(rows) >= 20 and set(rows["status"]) == {"ok"}  # every row measured is kept
    assert done.stdout.splitlines()[-2].startswith("# done: results in")


def _alert_rules() -> tuple[str, str]:
    """The rule file and its unit test, as docs/metrics.md shows them."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    rules = next(b for b in blocks if b.startswith("groups:"))
    test = next(b for b in blocks if b.startswith("rule_files:"))
    return rules, test


@pytest.mark.skipif(shutil.which("promtool") is None, reason="no promtool (Debian's prometheus package)")
def test_the_documented_alert_fires_on_a_planted_slowdown_and_only_then(tmp_path) -> None:
    rules, test = _alert_rules()
    (tmp_path / "commbench-alerts.yml").write_text(rules)
    (tmp_path / "commbench-alerts.test.yml").write_text(test)
    checked = subprocess.run(
        ["promtool", "check", "rules", "commbench-alerts.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "commbench-alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout

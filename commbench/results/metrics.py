"""Results as Prometheus metrics (the text exposition format, version 0.0.4), under the names NCCL
Inspector (NVIDIA/nccl ext-profiler/inspector) gives the same figures, so that a benchmark's series
sit beside production's on one dashboard: nccl_bus_bandwidth_gbs, nccl_algorithm_bandwidth_gbs and
nccl_collective_exec_time_microseconds, with Inspector's labels (collective as NCCL names it,
message_size as Inspector prints it, nranks, n_nodes, hostname, rank, slurm_job_id) and commbench's
own (variant, phase, dtype, mode, group, backend). docs/metrics.md lists them and their cardinality.

A series is one case of one configuration, the same from one run to the next, so that tonight's
busbw meets last week's in one series (PromQL's offset, *_over_time). Nothing that changes on
every run is a label of a figure: no timestamp (Inspector's per-sample `timestamp` label makes each
sample a series of its own), no run id. The run's identity (run id, fingerprint, versions) is one
commbench_run_info series, and its end time commbench_run_timestamp_seconds."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import commbench
from commbench.results.ownership import PROM_MARK
from commbench.results.schema import rank_hosts
from commbench.results.stats import HEADLINE


@dataclass(frozen=True)
class Metric:
    """One metric: its name, the CSV column it exports, its help text."""

    name: str
    column: str
    help: str


METRICS = (
    Metric(
        "nccl_bus_bandwidth_gbs",
        "busbw_gbps",
        "Bus bandwidth (GB/s, nccl-tests' definition) of the case's headline time.",
    ),
    Metric(
        "nccl_algorithm_bandwidth_gbs", "algbw_gbps", "Algorithm bandwidth (GB/s): bytes over the case's headline time."
    ),
    Metric(
        "nccl_collective_exec_time_microseconds",
        HEADLINE,
        "The case's headline time (microseconds): the mean over iterations of the slowest rank's time.",
    ),
    Metric("commbench_wrong_elements", "wrong", "Wrong elements the case's check found (0: every result correct)."),
)
INSPECTOR_PREFIX = "nccl_"  # the names NCCL Inspector writes too
INFO = "commbench_run_info"
RUN_TIME = "commbench_run_timestamp_seconds"

# Inspector's `collective` values (NCCL's ncclFuncToString); an op NCCL has no name for keeps commbench's.
COLLECTIVES = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
}
CASE_LABELS = ("variant", "phase", "dtype", "mode", "group", "backend")  # commbench's own, each a few values
RUN_LABELS = ("run_id", "fingerprint", "commbench_version", "torch_version", "backend_version")
UNKNOWN = "unknown"  # what Inspector writes for a label it cannot know (slurm_job_id outside SLURM)


def message_size(size_bytes: int) -> str:
    """A size as Inspector's message_size label prints it: 8B, 1.00KB, 4.00MB (powers of 1024)."""
    units, size, unit = ("B", "KB", "MB", "GB", "TB"), float(size_bytes), 0
    while size >= 1024.0 and unit < len(units) - 1:
        size /= 1024.0
        unit += 1
    return f"{int(size_bytes)}B" if unit == 0 else f"{size:.2f}{units[unit]}"


def _cell(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def host_labels(row: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Inspector's labels of where the run ran: rank 0's host (the rank that measured the row and
    writes it), the number of hosts, and $SLURM_JOB_ID where the metrics are written."""
    environ = os.environ if environ is None else environ
    hosts = rank_hosts(_cell(row, "node_ranks"))
    return {
        "hostname": hosts[0] if hosts else socket.gethostname(),
        "rank": "0",
        "n_nodes": str(len(set(hosts)) or 1),
        "slurm_job_id": environ.get("SLURM_JOB_ID") or UNKNOWN,
    }


def case_labels(row: Mapping[str, Any], where: Mapping[str, str]) -> dict[str, str]:
    """A row's series: Inspector's labels, then commbench's (CASE_LABELS)."""
    op = _cell(row, "op")
    return {
        "collective": COLLECTIVES.get(op, op),
        "message_size": message_size(int(float(_cell(row, "size_bytes")))),
        "size_bytes": _cell(row, "size_bytes"),  # exact: two sizes Inspector prints alike stay two series
        "nranks": _cell(row, "group_size") or _cell(row, "world_size"),
        **where,
        **{k: _cell(row, k) for k in CASE_LABELS},
    }


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    shown = repr(value) if math.isfinite(value) else "+Inf" if value > 0 else "-Inf"  # the format's spelling
    return f"{name}{{{text}}} {shown}"


def exposition(rows: Iterable[Mapping[str, Any]], environ: Mapping[str, str] | None = None) -> str:
    """The text a textfile collector reads and a Pushgateway takes: every metric of every measured
    row (an `unavailable` row has no figure; a figure the row lacks is left out). Where rows share a
    series (the launches of `sweep --repeat`, several runs in one export) the last one's value stands."""
    rows = [r for r in rows if _cell(r, "op") and _is_size(_number(r.get("size_bytes")))]
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {m.name: {} for m in METRICS}
    runs: dict[tuple[tuple[str, str], ...], None] = {}
    ended: dict[tuple[tuple[str, str], ...], float] = {}
    for row in rows:
        where = host_labels(row, environ)
        labels = tuple(case_labels(row, where).items())
        for metric in METRICS:
            if (value := _number(row.get(metric.column))) is not None:
                series[metric.name][labels] = value
        runs[tuple({"hostname": where["hostname"], **{k: _cell(row, k) for k in RUN_LABELS}}.items())] = None
        config = (("hostname", where["hostname"]), ("fingerprint", _cell(row, "fingerprint")))
        ended[config] = max(ended.get(config, 0.0), _epoch(_cell(row, "timestamp")))
    lines: list[str] = [f"{PROM_MARK} {commbench.__version__}"]
    for metric in METRICS:
        lines += _header(metric)
        lines += [_sample(metric.name, dict(k), v) for k, v in series[metric.name].items()]
    lines += [f"# HELP {INFO} The run the figures come from: its id, fingerprint and versions.", f"# TYPE {INFO} gauge"]
    lines += [_sample(INFO, dict(k), 1.0) for k in runs]
    lines += [
        f"# HELP {RUN_TIME} When the configuration's last row was measured (Unix time).",
        f"# TYPE {RUN_TIME} gauge",
    ]
    lines += [_sample(RUN_TIME, dict(k), t) for k, t in ended.items()]
    return "\n".join(lines) + "\n"


def _is_size(value: float | None) -> bool:
    return value is not None and 0 <= value < math.inf


def _header(metric: Metric) -> list[str]:
    """HELP and TYPE lines; for Inspector's names a plain comment instead. Inspector writes neither,
    and node_exporter's textfile collector drops a metric whose files disagree on them: with a HELP
    here, Inspector's own samples in the same folder would vanish from the scrape."""
    if metric.name.startswith(INSPECTOR_PREFIX):
        return [f"# {metric.name}: {metric.help}"]
    return [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} gauge"]


def _epoch(timestamp: str) -> float:
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return 0.0

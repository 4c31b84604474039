"""What the scripts in bench/ may use of commbench: this module's names, and no others.

bench/ measures commbench from outside (memory, overhead, timers, scale, isolate on a cluster);
naming here what it reaches into keeps those scripts off the internals, and lint-imports holds
them to it (the bench contract in pyproject.toml). Each name is imported on first use, from the
module that owns it, so a script loads no more than it did when it imported that module itself:
the ranks bench/ starts import torch only where they did, and the memory a rank is measured with
holds nothing this facade added.
"""

from __future__ import annotations

import importlib
from typing import Any

# module -> the names bench/ takes from it
_OWNERS: dict[str, tuple[str, ...]] = {
    "commbench.analysis.compare": ("Comparison", "compare_runs"),
    "commbench.analysis.history_gate": ("compare_history", "plan_launches"),
    "commbench.analysis.resolution": ("detection_probability", "launches_for", "planning_noise"),
    "commbench.analysis.verdict": ("Criteria", "Threshold"),
    "commbench.history.importer": ("import_csvs",),
    "commbench.backends": ("copies_of", "load_backend"),
    "commbench.backends.gloo": ("GlooBackend",),
    "commbench.backends.horovod": ("HorovodBackend",),
    "commbench.history.store": ("open_history",),
    "commbench.isolate.exchanges": ("Rounds",),
    "commbench.isolate.findings": ("Verdict",),
    "commbench.isolate.judge": ("Level", "judge_compute", "screen_level"),
    "commbench.isolate.report": ("draw",),
    "commbench.isolate.schedule": ("circle_count", "circle_rounds"),
    "commbench.isolate.screens": ("Adaptive", "AllPairs"),
    "commbench.isolate.verdict": ("DEFAULT_THRESHOLD", "NOISE_K"),
    "commbench.launch.env": ("detect",),
    "commbench.ops": ("load_op", "registry"),
    "commbench.ops.all_gather": ("AllGather",),
    "commbench.ops.all_reduce": ("AllReduce",),
    "commbench.ops.all_to_all": ("AllToAll", "receive_imbalance"),
    "commbench.ops.args": ("CollArgs", "complete", "wait_all"),
    "commbench.ops.gradients": ("transformer_gradients",),
    "commbench.ops.memory": ("MemoryCase",),
    "commbench.ops.spec": ("Point",),
    "commbench.replay.load": ("load",),
    "commbench.results.budget": ("Budget",),
    "commbench.results.paths": ("raw_path",),
    "commbench.results.schema": ("COLUMNS",),
    "commbench.results.stats": ("Stats", "bandwidth_gbps", "lower_mode", "percentile", "robust_sd", "split_modes"),
    "commbench.results.writer": ("CsvAppender",),
    "commbench.run.config": ("SweepConfig",),
    "commbench.run.harness": ("TimedCase", "blocks", "extend_round", "measure"),
    "commbench.run.heartbeat": (
        "DIAGNOSING_KEY",
        "DIAGNOSIS_KEY",
        "DIAGNOSIS_POLL_S",
        "READ_S_PER_RANK",
        "RankRecord",
        "heartbeat_gap_s",
        "store_prefix",
    ),
    "commbench.launch.start": ("host_store",),
    "commbench.run.phases": ("OTHER", "PHASES", "parse_time_line"),
    "commbench.run.resources": ("RANK_RUNTIME_BYTES", "peak_bytes", "reset_peak"),
    "commbench.run.timers": ("CudaEventTimer", "PerfCounterTimer", "cuda_lead", "timer_for"),
    "commbench.run.watchdog": ("Watchdog",),
    "commbench.syncbn": ("STRATEGY_NAMES", "SyncBatchNorm"),
    "commbench.units": ("format_size", "parse_size"),
}
_OWNER = {name: module for module, names in _OWNERS.items() for name in names}
__all__ = sorted(_OWNER)


def __getattr__(name: str) -> Any:
    if name not in _OWNER:
        raise AttributeError(f"commbench.benchkit has no {name!r}: add it to _OWNERS from the module that owns it")
    return getattr(importlib.import_module(_OWNER[name]), name)

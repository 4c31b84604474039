"""nccl-tests' JSON results (`all_reduce_perf ... -J results.json`) read as a commbench run.

nccl-tests writes one JSON document per program run (JSON_FILE_VERSION 2 and 3 of its
src/util.cu): `args` (the command line, the program first), `env` (every `NAME=value` of its
environment), `nccl_version`, `start_time`, `config` (iterations, warm-up, `devices[]` with each
rank's `hostname`), and `results[]`, one per size: `size`, `count`, `type`, `redop`, and an
`out_of_place` and an `in_place` block `{time, alg_bw, bus_bw, nwrong}`, each optionally followed
by its per-iteration block (`*_per_iter`, `times_us`). This module turns such a file into the
text cells a results CSV holds (the reader types them as it types a CSV's), so compare, report,
plot and the history take it as a run. docs/history.md says which fields are used and how.

The program names the op; out_of_place is commbench's default variant of it, in_place its
`inplace` variant (nccl-tests' in-place column is what commbench's `inplace` variants measure).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.errors import UserError
from commbench.results.schema import COLUMNS, SCHEMA_VERSION, rank_hosts
from commbench.results.stats import Stats
from commbench.results.timing import CUDA_EVENT

READABLE_VERSIONS = (2, 3)  # nccl-tests' JSON_FILE_VERSION
# nccl-tests program -> (commbench op, the variant of its out_of_place block). nccl-tests defines S
# (`size`) and the bus factors as commbench does, so sizes and busbw carry over unchanged.
PROGRAMS = {
    "all_gather_perf": ("all_gather", "flat"),
    "all_reduce_perf": ("all_reduce", "flat"),
    "alltoall_perf": ("all_to_all", "single"),
    "broadcast_perf": ("broadcast", "flat"),
    "gather_perf": ("gather", "flat"),
    "reduce_perf": ("reduce", "flat"),
    "reduce_scatter_perf": ("reduce_scatter_base", "flat"),
    "scatter_perf": ("scatter", "flat"),
    "sendrecv_perf": ("sendrecv", "ring"),  # rank r sends to r+1 and receives from r-1
}
IN_PLACE_VARIANT = "inplace"
DTYPES = {
    "float": "float32",
    "half": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
# Of its `env`, what a comparison of two runs needs; the rest (paths, user names, tokens) is left out.
KEPT_VARIABLES = re.compile(r"^(NCCL_|CUDA_VISIBLE_DEVICES$|UCX_|FI_|OMP_NUM_THREADS$)")
_SECRET = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|KEY")


def is_nccl_tests(path: Path) -> bool:
    """A .json file given where a results file is expected is read as nccl-tests' output."""
    return Path(path).suffix.lower() == ".json"


def load(path: Path) -> dict[str, Any]:
    """The document, checked to be nccl-tests' -J output of a version read here; one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"results file {path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}): give nccl-tests' complete -J file") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise UserError(f"{path} is JSON but not nccl-tests' -J output (no `results` list)")
    if document.get("version") not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise UserError(
            f"{path} is nccl-tests JSON version {document.get('version')!r}; this commbench reads {readable}"
        )
    if program(document) not in PROGRAMS:
        known = ", ".join(PROGRAMS)
        raise UserError(f"{path}: nccl-tests program {program(document)!r} has no commbench op; one of {known}")
    if not document["results"]:
        raise UserError(f"{path} holds no results: the nccl-tests run measured nothing")
    return document


def program(document: dict[str, Any]) -> str:
    """The program's name (`all_reduce_perf`) from the command line it records."""
    args = document.get("args") or [""]
    return Path(str(args[0])).name


def run_id(path: Path) -> str:
    """A run id from the file's bytes: importing the same file twice finds the same run."""
    return "nccl" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:8]  # 12 characters, as commbench's own


def devices(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = (document.get("config") or {}).get("devices") or document.get("devices") or []
    return [d for d in found if isinstance(d, dict)]


def variables(document: dict[str, Any]) -> dict[str, str]:
    """The transport variables of its `env` (KEPT_VARIABLES), a secret-looking name's value hidden."""
    kept = {}
    for entry in document.get("env") or []:
        name, _, value = str(entry).partition("=")
        if KEPT_VARIABLES.match(name):
            kept[name] = "<hidden>" if _SECRET.search(name) else value
    return dict(sorted(kept.items()))


def nccl_version(document: dict[str, Any]) -> str:
    """NCCL_VERSION_CODE as a version: 22703 -> 2.27.3 (codes from 2.9 on: major*10000 + minor*100 + patch)."""
    code = document.get("nccl_version")
    if not isinstance(code, int) or code <= 0:
        return ""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def read_cells(path: Path) -> pd.DataFrame:
    """The file as a results CSV's text cells (every column of COLUMNS, empty where nccl-tests has no
    such fact): one row per size and placement (out_of_place, in_place)."""
    document = load(path)
    op, variant = PROGRAMS[program(document)]
    config = document.get("config") or {}
    ranks = devices(document)
    hosts = [str(d.get("hostname", "")) for d in sorted(ranks, key=lambda d: d.get("rank", 0))]
    numbered = {h: i for i, h in enumerate(dict.fromkeys(hosts))}
    places = ";".join(f"{i}@{h}/{numbered[h]}" for i, h in enumerate(hosts))
    world = len(ranks) or int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
    version = nccl_version(document)
    common = {
        "schema_version": str(SCHEMA_VERSION),
        "run_id": run_id(path),
        "timestamp": str(document.get("start_time", "")).replace(" ", "T"),
        "op": op,
        "phase": "comm",
        "mode": "blocking",
        "world_size": str(world),
        "group": "world",
        "group_size": str(world),
        "backend": "nccl",
        "api": f"nccl-tests {program(document)}",
        "calls": str(config.get("aggregated_iterations", 1)),
        "warmup": _text(config.get("warmup_iters")),
        "window": "1",
        "rounds": "1",
        "timer": CUDA_EVENT,
        "hosts": ";".join(sorted(numbered)),
        "node_ranks": places if rank_hosts(places) == hosts else "",
        "backend_version": f"nccl {version}" if version else "nccl",
        "commbench_version": "",
        "command": " ".join(map(str, document.get("args") or [])),
        "fingerprint": "",
        "env_file": "",
    }
    rows = []
    results = [r for r in document["results"] if isinstance(r, dict)]
    roots = {str(r.get("root", "")).strip() for r in results}
    for result in results:
        for placement, name in (("out_of_place", variant), ("in_place", IN_PLACE_VARIANT)):
            block = result.get(placement)
            if isinstance(block, dict):
                name += _qualifier(result, several_roots=len(roots) > 1)
                rows.append({**common, **_row(result, block, result.get(f"{placement}_per_iter"), config, name)})
    if not rows:
        raise UserError(f"{path} holds no out_of_place or in_place measurement")
    # Text cells, "" where empty: what a CSV read as text holds, for the reader and the importer alike.
    return pd.DataFrame(rows).reindex(columns=list(COLUMNS)).astype(object).fillna("")


def _qualifier(result: dict[str, Any], several_roots: bool) -> str:
    """What tells apart rows of one size that nccl-tests ran more than once: a reduction other than
    sum (`-o all`: commbench's reducing ops sum, so `max` is a variant of its own, `flat_max`), and
    the root when the file holds several (`-r -1`: `flat_root3`)."""
    redop = str(result.get("redop", "")).strip()
    suffix = f"_{redop}" if redop not in ("", "sum", "none") else ""
    root = str(result.get("root", "")).strip()
    return suffix + (f"_root{root}" if several_roots and root not in ("", "-1") else "")


def _row(
    result: dict[str, Any], block: dict[str, Any], per_iter: Any, config: dict[str, Any], variant: str
) -> dict[str, str]:
    """One placement's cells. With a per-iteration block the statistics are commbench's over its
    samples (p50 and its interval); without one nccl-tests gives only the mean, kept as the p50."""
    mean = _number(block.get("time", block.get("cpu_time")))
    samples = [t for t in (per_iter or {}).get("times_us") or [] if _number(t) is not None] if per_iter else []
    if samples:
        stats = {k: _text(v) for k, v in Stats.from_samples([float(t) for t in samples]).as_dict().items()}
        iters, note = len(samples), "nccl-tests: p50 over its per-iteration times"
    else:
        stats = {"time_us_p50": _text(mean), "time_us_mean": _text(mean)}
        iters = result.get("actual_iterations", config.get("iterations"))
        note = "nccl-tests: the mean time of its iterations, as p50 (run with per-iteration timing for the spread)"
    wrong = _number(block.get("nwrong"))
    return {
        "variant": variant,
        "dtype": DTYPES.get(str(result.get("type", "")), str(result.get("type", ""))),
        "size_bytes": _text(result.get("size")),
        "count": _text(result.get("count")),
        "iters": _text(iters),
        **stats,
        "algbw_gbps": _text(_number(block.get("alg_bw"))),
        "busbw_gbps": _text(_number(block.get("bus_bw"))),
        "wrong": _text(wrong),
        "status": "wrong" if wrong else "ok",
        "note": note if wrong is not None else f"{note}; not checked (nccl-tests -c 0)",
    }


def _number(value: Any) -> float | None:
    """A JSON number (nccl-tests writes NaN as the string "nan"), None when absent or not finite."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def environment(path: Path) -> dict[str, Any]:
    """What the file says of the run's hosts, for its provenance: one record per host (its devices,
    NCCL's version, the transport variables), as commbench's host records name them."""
    document = load(path)
    version = nccl_version(document)
    shared = variables(document)
    by_host: dict[str, list[dict[str, Any]]] = {}
    for device in devices(document):
        by_host.setdefault(str(device.get("hostname", "")), []).append(device)
    return {
        "program": program(document),
        "nccl": version,
        "start_time": document.get("start_time"),
        "end_time": document.get("end_time"),
        "config": {k: v for k, v in (document.get("config") or {}).items() if k != "devices"},
        "hosts": [
            {
                "host": host,
                "ranks": len(found),
                "nccl": version or None,
                "gpu_model": ", ".join(sorted({str(d.get("device_info", "")) for d in found})) or None,
                "gpu_count": len(found),
                "variables": shared,
            }
            for host, found in by_host.items()
        ],
    }

"""nccl-tests' JSON results (`all_reduce_perf ... -J results.json`) read as a commbench run.

nccl-tests writes one JSON document per program run (JSON_FILE_VERSION 1 to 3 of its
src/util.cu; version 1, of every release from v2.17.3 to v2.19.1, names its footer
`average_bus_bandwidith` / `bandwidith`, which this reader does not use): `args` (the command line, the program first), `env` (every `NAME=value` of its
environment), `nccl_version`, `start_time`, `config` (iterations, warm-up, `devices[]` with each
rank's `hostname`), and `results[]`, one per size: `size`, `count`, `type`, `redop`, and an
`out_of_place` and an `in_place` block `{time, alg_bw, bus_bw, nwrong}`, each optionally followed
by its per-iteration block (`*_per_iter`, `times_us`). This module turns such a file into the
text cells a results CSV holds (the reader types them as it types a CSV's), so compare, report,
plot and the history take it as a run. docs/history.md says which fields are used and how.
commbench/results/nccl_tests_log.py reads nccl-tests' text output into the same document, so
that a log and the -J file of one run give the same rows (document_cells).

The program names the op; out_of_place is commbench's default variant of it, in_place its
`inplace` variant (nccl-tests' in-place column is what commbench's `inplace` variants measure).

A file is read within budgets (MAX_FILE_BYTES, MAX_TIMES_PER_ROW, MAX_TIMES), and every field used
is checked: one that makes the whole file unreadable (the command line, the config, the devices,
the clock) refuses the file in one line; an impossible value of one result (a negative size, a
time that is no time, commbench/results/schema.py's CellRule) costs that result's rows alone, each
named (docs/failure-modes.md).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.errors import UserError
from commbench.redact import redact, redact_variable
from commbench.results.schema import COLUMNS, COUNT, RANKS, SCHEMA_VERSION, SIZE, SPREAD, TIME, CellRule, rank_hosts
from commbench.results.stats import Stats
from commbench.results.timing import CUDA_EVENT

READABLE_VERSIONS = (1, 2, 3)  # nccl-tests' JSON_FILE_VERSION
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
API_PREFIX = "nccl-tests "  # the api cell of every row read from nccl-tests: `nccl-tests all_gather_perf`
PLACEMENTS = ("out_of_place", "in_place")
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
# Budgets: nccl-tests writes a few KiB per size, and 20 times per size and placement by default;
# -n 10000 with per-iteration timing over 25 sizes is 500,000 times in some 8 MiB. A file beyond
# them is refused in one line before it costs more (the p50's exact interval takes about 2 s of
# CPU at 100,000 times).
MAX_FILE_BYTES = 32 << 20
MAX_TIMES_PER_ROW = 100_000
MAX_TIMES = 1_000_000
# What a type, a reduction and a host name may be: the history's columns and the node_ranks
# value (`0@host/0;1@...`) hold them, so no separator, space or control character.
_WORD = re.compile(r"[A-Za-z0-9_]{1,16}")
HOST = re.compile(r"[\w.:-]{1,255}")
_GZIP = b"\x1f\x8b"


def _read(path: Path) -> bytes:
    """The file's bytes, at most MAX_FILE_BYTES of them: a huge file, a device or a gzip bomb is one line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"results file {path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise UserError(
            f"{path} is larger than {MAX_FILE_BYTES:,} bytes, more than an nccl-tests -J file holds: "
            "give one program run's file (fewer iterations with per-iteration timing)"
        )
    if data.startswith(_GZIP):
        raise UserError(f"{path} is gzip-compressed: nccl-tests writes plain JSON; give the file gunzipped")
    return data


def load(path: Path) -> dict[str, Any]:
    """The document, checked to be nccl-tests' -J output of a version read here; one-line errors."""
    return _parse(Path(path), _read(path))


def _parse(path: Path, data: bytes) -> dict[str, Any]:
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    except RecursionError:
        raise UserError(f"{path} nests deeper than any nccl-tests -J file: it is not one") from None
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}): give nccl-tests' complete -J file") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise UserError(f"{path} is JSON but not nccl-tests' -J output (no `results` list)")
    if document.get("version") not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise UserError(
            f"{path} is nccl-tests JSON version {_shown(document.get('version'))}; this commbench reads {readable}"
        )
    for field, kind in (("args", list), ("config", dict), ("env", list)):
        _check_type(path, field, document.get(field), kind)
    for field in ("args", "env"):
        for i, word in enumerate(document.get(field) or []):
            _check_type(path, f"{field}[{i}]", word, str)
    if program(document) not in PROGRAMS:
        known = ", ".join(PROGRAMS)
        raise UserError(f"{path}: nccl-tests program {program(document)!r} has no commbench op; one of {known}")
    if not document["results"]:
        raise UserError(f"{path} holds no results: the nccl-tests run measured nothing")
    _check_times_budget(path, document["results"])
    return document


def _check_type(path: Path, field: str, value: Any, kind: type) -> None:
    """A field nccl-tests always writes as `kind` (absent is fine): anything else refuses the file."""
    if value is not None and not isinstance(value, kind):
        names = {list: "a list", dict: "an object", str: "a string"}
        raise UserError(f"{path}: `{field}` is {_shown(value)}, not {names[kind]} as nccl-tests writes it")


def _check_times_budget(path: Path, results: list[Any]) -> None:
    """The per-iteration times, counted before any is read (MAX_TIMES_PER_ROW, MAX_TIMES)."""
    total = 0
    for i, result in enumerate(results):
        for placement in PLACEMENTS:
            block = result.get(f"{placement}_per_iter") if isinstance(result, dict) else None
            times = block.get("times_us") if isinstance(block, dict) else None
            count = len(times) if isinstance(times, list) else 0
            total += count
            if count > MAX_TIMES_PER_ROW or total > MAX_TIMES:
                raise UserError(
                    f"{path}: results[{i}] {placement}_per_iter brings the per-iteration times to {count:,} in "
                    f"one row, {total:,} in the file; commbench reads at most "
                    f"{MAX_TIMES_PER_ROW:,} per size and placement and {MAX_TIMES:,} per file: run nccl-tests with "
                    "fewer iterations (-n) for per-iteration timing"
                )


def _shown(value: Any) -> str:
    """A JSON value as a one-line message quotes it: short, its control characters escaped."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def program(document: dict[str, Any]) -> str:
    """The program's name (`all_reduce_perf`) from the command line it records; the `_mpi` builds
    that containers install (`all_reduce_perf_mpi`) are the same program."""
    args = document.get("args") or [""]
    return Path(str(args[0])).name.removesuffix("_mpi")


def run_id(data: bytes) -> str:
    """A run id from the file's bytes: importing the same file twice finds the same run."""
    return "nccl" + hashlib.sha256(data).hexdigest()[:8]  # 12 characters, as commbench's own


def hosts_by_rank(document: dict[str, Any], path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(host name, device record) of every rank, in rank order. The ranks must be distinct whole
    numbers and the names host names (they become the hosts and node_ranks cells), else the file
    is refused in one line."""
    config = document.get("config") or {}
    found = config.get("devices") or document.get("devices") or []
    _check_type(path, "config.devices", found, list)
    ranks: dict[int, tuple[str, dict[str, Any]]] = {}
    for i, device in enumerate(found):
        where = f"config.devices[{i}]"
        _check_type(path, where, device, dict)
        rank = device.get("rank", i)
        if not COUNT.holds(rank) or isinstance(rank, str) or int(rank) in ranks:
            why = "a rank another device has" if COUNT.holds(rank) and int(rank) in ranks else "a rank number"
            raise UserError(f"{path}: {where}.rank is {_shown(rank)}, not {why}")
        host = device.get("hostname", "")
        if not isinstance(host, str) or (host and not HOST.fullmatch(host)):
            raise UserError(f"{path}: {where}.hostname is {_shown(host)}, not a host name")
        ranks[int(rank)] = (host, device)
    if not RANKS.holds(len(ranks) or 1):
        raise UserError(f"{path} lists {len(ranks):,} devices; a run has at most {RANKS.largest:,} ranks")
    return [ranks[r] for r in sorted(ranks)]


def _world(document: dict[str, Any], path: Path, ranks: int) -> int:
    """The run's rank count: its devices, else nthreads x ngpus of its config."""
    if ranks:
        return ranks
    config = document.get("config") or {}
    nthreads, ngpus = (_config_count(config, path, name, RANKS) or 1 for name in ("nthreads", "ngpus"))
    world = nthreads * ngpus
    if not RANKS.holds(world):
        raise UserError(f"{path}: config.nthreads x config.ngpus is {world:,}, not {RANKS.meaning}")
    return world


def _config_count(config: dict[str, Any], path: Path, name: str, rule: CellRule) -> int | None:
    """A whole-number field of the config (None when absent); anything else refuses the file."""
    value = config.get(name)
    if value is None:
        return None
    if not rule.holds(value):
        raise UserError(f"{path}: config.{name} is {_shown(value)}, not {rule.meaning}")
    return int(float(value))


def _when(document: dict[str, Any], field: str, path: Path) -> str:
    """start_time / end_time as ISO text ("" when absent); anything but a date and time refuses the file."""
    value = document.get(field)
    if value in (None, ""):
        return ""
    try:
        return datetime.datetime.fromisoformat(str(value) if isinstance(value, str) else "?").isoformat()
    except ValueError:
        raise UserError(
            f"{path}: {field} is {_shown(value)}, not a date and time (nccl-tests writes 2026-12-01 21:00:00)"
        ) from None


def variables(document: dict[str, Any]) -> dict[str, str]:
    """The transport variables of its `env` (KEPT_VARIABLES), each as commbench/redact.py records it."""
    kept = {}
    for entry in document.get("env") or []:
        name, _, value = entry.partition("=")
        if KEPT_VARIABLES.match(name):
            kept[name] = redact_variable(name, value)
    return dict(sorted(kept.items()))


def nccl_version(document: dict[str, Any]) -> str:
    """NCCL_VERSION_CODE as a version: 22703 -> 2.27.3 (codes from 2.9 on: major*10000 + minor*100 + patch)."""
    code = document.get("nccl_version")
    if not isinstance(code, int) or isinstance(code, bool) or not 0 < code < 10**8:
        return ""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def read_cells(path: Path) -> pd.DataFrame:
    """The file as a results CSV's text cells (every column of COLUMNS, empty where nccl-tests has no
    such fact): one row per size and placement (out_of_place, in_place). attrs["left_out"]: one
    note per result or placement left out for an impossible value (the reader says them)."""
    path = Path(path)
    data = _read(path)
    document = _parse(path, data)
    labels = [f"results[{i}]" for i in range(len(document["results"]))]
    return document_cells(path, document, run_id(data), labels)


def document_cells(path: Path, document: dict[str, Any], run: str, labels: list[str]) -> pd.DataFrame:
    """read_cells' frame of one run's document, as nccl-tests' -J file lays it out (a log's is
    built alike by commbench/results/nccl_tests_log.py); labels name each result in the notes of
    the ones left out (`results[3]`, `line 42`)."""
    op, variant = PROGRAMS[program(document)]
    config = document.get("config") or {}
    hosts = [host for host, _ in hosts_by_rank(document, path)]
    numbered = {h: i for i, h in enumerate(dict.fromkeys(hosts))}
    places = ";".join(f"{i}@{h}/{numbered[h]}" for i, h in enumerate(hosts))
    world = _world(document, path, len(hosts))
    version = nccl_version(document)
    counts = {name: _config_count(config, path, name, COUNT) for name in _CONFIG_COUNTS}
    _when(document, "end_time", path)  # the history's run ends then: refused here for every reader alike
    common = {
        "schema_version": str(SCHEMA_VERSION),
        "run_id": run,
        "timestamp": _when(document, "start_time", path),
        "op": op,
        "phase": "comm",
        "mode": "blocking",
        "world_size": str(world),
        "group": "world",
        "group_size": str(world),
        "backend": "nccl",
        "api": f"{API_PREFIX}{program(document)}",
        "calls": _text(counts["aggregated_iterations"] or 1),
        "warmup": _text(counts["warmup_iters"]),
        "window": "1",
        "rounds": "1",
        "timer": CUDA_EVENT,
        "hosts": ";".join(sorted(numbered)),
        "node_ranks": places if rank_hosts(places) == hosts else "",
        "backend_version": f"nccl {version}" if version else "nccl",
        "commbench_version": "",
        "command": " ".join(document.get("args") or []),
        "fingerprint": "",
        "env_file": "",
    }
    rows, left_out = [], []
    results = document["results"]
    roots = {str(r.get("root", "")).strip() for r in results if isinstance(r, dict)}
    for label, result in zip(labels, results):
        if (fault := _result_fault(result)) is not None:
            left_out.append(f"{label}: {fault}: its rows left out")
            continue
        for placement, name in zip(PLACEMENTS, (variant, IN_PLACE_VARIANT)):
            if result.get(placement) is None:
                continue
            row = _row(result, placement, counts["iterations"], name + _qualifier(result, len(roots) > 1))
            if isinstance(row, str):
                left_out.append(f"{label} {placement}: {row}: row left out")
            else:
                rows.append({**common, **row})
    if not rows and not left_out:
        raise UserError(f"{path} holds no out_of_place or in_place measurement")
    # Text cells, "" where empty: what a CSV read as text holds, for the reader and the importer alike.
    frame = pd.DataFrame(rows, columns=list(COLUMNS)).astype(object).fillna("")
    frame.attrs["left_out"] = left_out
    return frame


# The config's counts a row records.
_CONFIG_COUNTS = ("aggregated_iterations", "warmup_iters", "iterations")


def _result_fault(result: Any) -> str | None:
    """Why one result of the file is no measurement (its size, count, type, reduction, root or
    iteration count impossible); None when it is one."""
    if not isinstance(result, dict):
        return f"it is {_shown(result)}, not a result object"
    for field, rule in (("size", SIZE), ("count", COUNT), ("actual_iterations", COUNT)):
        if (field in result or field == "size") and not rule.holds(result.get(field)):
            return f"{field} {_shown(result.get(field))} is not {rule.meaning}"
    for field in ("type", "redop"):
        value = result.get(field, "")
        if not isinstance(value, str) or (value and not _WORD.fullmatch(value)):
            return f"{field} {_shown(value)} is not a name of nccl-tests' (letters, digits, _)"
    root = str(result.get("root", "")).strip() if isinstance(result.get("root", ""), (str, int)) else "?"
    if root and not re.fullmatch(r"-1|\d{1,10}", root):
        return f"root {_shown(result.get('root'))} is not a rank (or -1)"
    return None


def _qualifier(result: dict[str, Any], several_roots: bool) -> str:
    """What tells apart rows of one size that nccl-tests ran more than once: a reduction other than
    sum (`-o all`: commbench's reducing ops sum, so `max` is a variant of its own, `flat_max`), and
    the root when the file holds several (`-r -1`: `flat_root3`)."""
    redop = str(result.get("redop", "")).strip()
    suffix = f"_{redop}" if redop not in ("", "sum", "none") else ""
    root = str(result.get("root", "")).strip()
    return suffix + (f"_root{root}" if several_roots and root not in ("", "-1") else "")


def _row(result: dict[str, Any], placement: str, iterations: int | None, variant: str) -> dict[str, str] | str:
    """One placement's cells, or why it is no measurement. With a per-iteration block the
    statistics are commbench's over its times (p50 and its interval); without one nccl-tests gives
    only the mean, kept as the p50. Every time must keep schema.TIME, a bandwidth SPREAD."""
    block = result[placement]
    if not isinstance(block, dict):
        return f"it is {_shown(block)}, not an object"
    samples = _samples(result.get(f"{placement}_per_iter"), f"{placement}_per_iter")
    if isinstance(samples, str):
        return samples
    if samples:
        stats = {k: _text(v) for k, v in Stats.from_samples(samples).as_dict().items()}
        iters, note = len(samples), "nccl-tests: p50 over its per-iteration times"
    else:
        field = "time" if "time" in block or "cpu_time" not in block else "cpu_time"
        mean = block.get(field)
        if mean is not None and not TIME.holds(mean):
            return f"{field} {_shown(mean)} is not {TIME.meaning}"
        stats = {"time_us_p50": _text(mean), "time_us_mean": _text(mean)}
        iters = result.get("actual_iterations", iterations)
        note = "nccl-tests: the mean time of its iterations, as p50 (run with per-iteration timing for the spread)"
    for field in ("alg_bw", "bus_bw"):
        if block.get(field) is not None and not SPREAD.holds(block[field]):
            return f"{field} {_shown(block[field])} is not {SPREAD.meaning}"
    wrong = block.get("nwrong")
    if isinstance(wrong, str) and wrong.strip() == "N/A":
        wrong = None  # the run did not check (-c 0): null in -J files, N/A in the text table
    elif wrong is not None and not COUNT.holds(wrong):
        return f"nwrong {_shown(wrong)} is not {COUNT.meaning}"
    if block.get("max_error") is not None:  # older nccl-tests print each row's largest error, no count
        note += f"; nccl-tests' largest error {block['max_error']} (this version counts no wrong elements)"
    kind = str(result.get("type", ""))
    return {
        "variant": variant,
        "dtype": DTYPES.get(kind, kind),
        "size_bytes": _whole(result["size"]),
        "count": _whole(result.get("count")),
        "iters": _whole(iters),
        **stats,
        "algbw_gbps": _text(block.get("alg_bw")),
        "busbw_gbps": _text(block.get("bus_bw")),
        "wrong": _whole(wrong),
        "status": "wrong" if wrong is not None and float(wrong) else "ok",
        "note": note if wrong is not None or "max_error" in block else f"{note}; not checked (nccl-tests -c 0)",
    }


def _samples(block: Any, where: str) -> list[float] | str:
    """A per-iteration block's times ([] when there is none), or why they are no times."""
    if block is None:
        return []
    if not isinstance(block, dict):
        return f"{where} is {_shown(block)}, not an object"
    times = block.get("times_us")
    if times is None:
        return []
    if not isinstance(times, list):
        return f"{where}.times_us is {_shown(times)}, not a list of times"
    for k, t in enumerate(times):
        if not TIME.holds(t):
            return f"{where}.times_us[{k}] {_shown(t)} is not {TIME.meaning}"
    return [float(t) for t in times]


def _whole(value: Any) -> str:
    """A whole number checked by its rule, as a cell: 8.0 -> "8"; "" when absent."""
    return "" if value is None else str(int(float(value)))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def environment(path: Path) -> dict[str, Any]:
    """What the file says of the run's hosts, for its provenance (document_environment)."""
    return document_environment(Path(path), load(path))


def document_environment(path: Path, document: dict[str, Any]) -> dict[str, Any]:
    """One record per host (its devices, NCCL's version, the transport variables), as commbench's
    host records name them, and the run's program, times and config."""
    version = nccl_version(document)
    shared = variables(document)
    by_host: dict[str, list[dict[str, Any]]] = {}
    for host, device in hosts_by_rank(document, path):
        by_host.setdefault(host, []).append(device)
    return {
        "program": program(document),
        "nccl": version,
        "start_time": _when(document, "start_time", path) or None,
        "end_time": _when(document, "end_time", path) or None,
        "config": {
            k: redact(v) if isinstance(v, str) else v
            for k, v in (document.get("config") or {}).items()
            if k != "devices" and isinstance(v, (str, int, float, bool, type(None)))
        },
        "hosts": [
            {
                "host": host,
                "ranks": len(found),
                "nccl": version or None,
                "gpu_model": ", ".join(sorted({_device_info(d) for d in found} - {""})) or None,
                "gpu_count": len(found),
                "variables": shared,
            }
            for host, found in by_host.items()
        ],
    }


def _device_info(device: dict[str, Any]) -> str:
    """A device's model as nccl-tests names it; "" when it names none (or names it as no text)."""
    info = device.get("device_info", "")
    return info if isinstance(info, str) and info.isprintable() else ""

"""nccl-tests' text output (the table every version since 2.0 prints on stdout) read as commbench runs.

Most nccl-tests results people hold are that table, saved as it came: behind `mpirun --tag-output`
prefixes (`[1,0]<stdout>:`), srun `--label` ones (` 0: `), `kubectl logs --timestamps/--prefix`
ones, after a launcher's preamble, with NCCL INFO lines between the rows, several tests one after
the other in one file. A log is recognised by what it holds, whatever its name (looks_like_log).

Each test of the file (from its `# nccl-tests version` / `# Collective test starting` /
`# nThread ...` header to the next test's) becomes one run: its header lines give the config and
the `Using devices` list the ranks and hosts, and its table, read by the column names of its own
header line (size, count, type, redop, root, then time, algbw, busbw and #wrong or error for the
out-of-place and the in-place set), the results. Those are laid out as nccl-tests' -J document lays
them out and made into cells by commbench/results/nccl_tests.py (document_cells), so a log and the
-J file of one run give the same rows and every rule of that reader holds for both. A row that is
cut or malformed, or a device line that is, is named by its line number and skipped, as a
commbench CSV's; a file that holds no table is refused in one line. Budgets as the -J reader's:
MAX_LOG_BYTES read at most, a gzip-compressed file refused before any is read.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from commbench.errors import UserError
from commbench.results import nccl_tests
from commbench.results.schema import COLUMNS

# Logs with NCCL_DEBUG=INFO from hundreds of ranks run to tens of MB; nothing larger is one test's.
MAX_LOG_BYTES = 64 << 20
SNIFF_BYTES = 4 << 20  # how far looks_like_log reads for nccl-tests' header lines
MAX_LINE_CHARS = 16_384  # a longer line is no line of nccl-tests' table (it is cut to this, then judged)
MAX_NAMED_LINES = 5  # malformed lines named one by one per test; the rest are counted
GZIP = b"\x1f\x8b"

# What people's tools put before nccl-tests' lines: kubectl logs --timestamps and --prefix, then
# mpirun --tag-output (OpenMPI: `[jobid,rank]<stdout>:`) or srun --label (`  0: `).
_PREFIX = re.compile(
    r"^(?P<stamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s)?"
    r"(?:\[pod/[^\]\s]+\]\s)?"
    r"(?:\[\d+,\d+\]<(?P<stream>stdout|stderr|stddiag)>:|\s{0,6}\d{1,6}: )?"
)
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+).*?nccl-headers=(\d+) nccl-library=(\d+)")
_STARTING = re.compile(r"^#\s*Collective test starting: (\S+)")
_CONFIG = re.compile(
    r"^#\s*nThread (?P<nthreads>\S+) nGpus (?P<ngpus>\S+) minBytes (?P<minimum_bytes>\S+) "
    r"maxBytes (?P<maximum_bytes>\S+) step: (?P<step>\S+)\((?P<unit>factor|bytes)\) "
    r"warmup iters: (?P<warmup_iters>\S+) iters: (?P<iterations>\S+)"
    r"(?: agg iters: (?P<aggregated_iterations>\S+))?(?: validation: (?P<validation>\S+))?"
    r"(?: graph: (?P<graph>\S+))?"
)
# `#  Rank  0 Group  0 Pid 123 on host device  0 [0000:04:00] NVIDIA H100`; before `Group`: no group.
_DEVICE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\S+)\s+(?:Group\s+\S+\s+)?Pid\s+\S+\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>\S+)"
    r"\s+\[(?P<busid>[^\]]*)\]\s*(?P<info>.*)$"
)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)")
_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded")
_NCCL_LINE = re.compile(r"\bNCCL version (\d+)\.(\d+)\.(\d+)")  # rank 0's `NCCL version 2.8.3+cuda11.2`
_VARIABLE = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set (?:by environment )?to (\S+)")
# A program named on a command line (`./build/all_gather_perf -b 8 ...`), and what follows it.
_COMMAND = re.compile(r"(?:^|[\s=])(?P<program>[\w./-]*?[a-z_]+_perf(?:_mpi)?)(?P<rest>(?:\s.*)?)$")
_FILE_NAME = re.compile(
    r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send_?recv|reduce|gather|scatter)"
)
_KEY_COLUMNS = ("size", "count", "type", "redop", "root")
_TIME_COLUMNS = ("time", "cputime")
# Stages of a test's header: a line of a stage a test has reached starts the next test.
_STAGE_VERSION, _STAGE_STARTING, _STAGE_CONFIG, _STAGE_TABLE = 1, 2, 3, 4


@dataclass(frozen=True)
class Layout:
    """A table's columns, from its header line: the key columns, then one block of measured
    columns per placement (out-of-place first), and whether each row ends in a timestamp."""

    key: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    timestamp: bool

    @property
    def width(self) -> int:
        return len(self.key) + sum(map(len, self.blocks)) + (2 if self.timestamp else 0)


@dataclass
class Test:
    """One program run of the log, as its lines are read."""

    line: int  # where it starts
    stage: int = 0
    program: str = ""
    hint: str = ""  # a program named on a command line before the table
    command: str = ""
    nccl_code: int | None = None
    stamp: str = ""
    config: dict[str, str] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    layout: Layout | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # malformed lines, named
    variables: dict[str, str] = field(default_factory=dict)
    footer: dict[str, Any] = field(default_factory=dict)
    digest: Any = field(default_factory=hashlib.sha256)  # of nccl-tests' own lines: the run id
    fault: str = ""  # why the whole test cannot be read (a malformed device line, no program)


def looks_like_log(path: Path) -> bool:
    """Whether a file given where a results file is expected holds nccl-tests' text output: one of
    its header lines (`# nThread ...`, `# nccl-tests version`, the table's `#  size  count ...`)
    within its first SNIFF_BYTES, behind any prefix. A gzip-compressed file is refused here."""
    try:
        with Path(path).open("rb") as file:
            head = file.read(SNIFF_BYTES)
    except OSError:
        return False  # the CSV reader says why it cannot be read
    if head.startswith(GZIP):
        raise UserError(
            f"{path} is gzip-compressed: give it gunzipped (results CSVs and nccl-tests' output are read as text)"
        )
    for raw in head.decode("utf-8", "replace").splitlines():
        body = _PREFIX.sub("", raw[:MAX_LINE_CHARS], count=1).strip()
        if body.startswith("#") and (_CONFIG.match(body) or _VERSION.match(body) or _header(body)):
            return True
    return False


def read_cells(path: Path) -> pd.DataFrame:
    """Every readable test of the log as a results CSV's text cells, one run each (nccl_tests'
    document_cells). attrs["left_out"]: each line skipped and each result left out, named."""
    path = Path(path)
    tests = _tests(path)
    frames, notes = [], []
    for test in tests:
        notes += test.skipped
        if test.fault:
            notes.append(test.fault)
            continue
        if not test.results:
            continue
        cells = nccl_tests.document_cells(path, _document(test, path), _run_id(test, tests), test.labels)
        if test.footer.get("out_of_bounds", ("0", "OK"))[1] == "FAILED":
            # Older versions count no wrong elements per row: the run's own check speaks for its rows.
            failed = cells["wrong"] == ""
            cells.loc[failed, "status"] = "wrong"
            cells.loc[failed, "note"] += "; the run's out-of-bounds check FAILED"
        notes += cells.attrs["left_out"]
        frames.append(cells)
    if not frames and not notes:
        raise UserError(
            f"{path} is nccl-tests output but holds no result table (the run stopped before its first size?): "
            "give the log of a run that measured"
        )
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    frame.attrs["left_out"] = notes
    return frame


def environment(path: Path, run_id: str) -> dict[str, Any]:
    """What the log says of one of its runs' hosts, for its provenance (nccl_tests'
    document_environment), with nccl-tests' own summary of the run (version, average bus
    bandwidth, out-of-bounds check) and where its start time came from."""
    path = Path(path)
    tests = _tests(path)
    for test in tests:
        if not test.fault and test.results and _run_id(test, tests) == run_id:
            found = nccl_tests.document_environment(path, _document(test, path))
            found["log"] = {**test.footer, "first_line": test.line, "time_from": _time_source(test)}
            return found
    raise UserError(f"{path} holds no run {run_id}: it changed since it was read; read it again")


def _tests(path: Path) -> list[Test]:
    """The file's tests, in the order they ran."""
    tests: list[Test] = []
    pending = ""  # a command line read after a test's table: it names the next test's program
    for number, body, stamp in _lines(path):
        test = tests[-1] if tests else None
        stage = _stage(body)
        if stage and (test is None or test.stage >= stage):
            test = Test(number, hint=pending.split()[0] if pending else "", command=pending)
            tests.append(test)
            pending = ""
        if test is None:
            pending = _command(body) or pending
            continue
        test.stage = max(test.stage, stage)
        test.stamp = test.stamp or stamp[:19]  # kubectl's RFC 3339 time (UTC) to the second
        if _header_line(test, body, number) or _table_line(test, body, number):
            test.digest.update(body.encode() + b"\n")  # nccl-tests' own lines name the run, whatever surrounds them
        else:
            if (command := _command(body)) and test.layout is None:
                test.hint, test.command = test.hint or command.split()[0], test.command or command
            elif command:
                pending = command
            _information(test, body)
    for test in tests:
        test.fault = test.fault or _program_fault(test, path)
        if len(test.skipped) > MAX_NAMED_LINES:
            more = len(test.skipped) - MAX_NAMED_LINES
            test.skipped = [*test.skipped[:MAX_NAMED_LINES], f"{more} more cut or malformed lines skipped"]
    return tests


def _lines(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, its text without prefix, a kubectl timestamp or "") of every stdout line,
    within the budget; lines a launcher tagged as stderr are skipped."""
    try:
        if path.stat().st_size > MAX_LOG_BYTES:
            raise UserError(
                f"{path} is larger than {MAX_LOG_BYTES:,} bytes, more than one nccl-tests log holds: "
                "give one job's output (without NCCL_DEBUG=INFO it is a few KB)"
            )
        read = 0
        with path.open("rb") as file:
            for number, raw in enumerate(file, start=1):
                read += len(raw)
                if read > MAX_LOG_BYTES:  # it grew while it was read
                    raise UserError(f"{path} grew past {MAX_LOG_BYTES:,} bytes while it was read: give a finished log")
                text = raw[:MAX_LINE_CHARS].decode("utf-8", "replace")
                match = _PREFIX.match(text)  # every part optional: it always matches
                if match.group("stream") in ("stderr", "stddiag"):
                    continue
                yield number, text[match.end() :].strip(), match.group("stamp") or ""
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None


def _stage(body: str) -> int:
    """The header stage a line is (0: none): a test starts where a line of a stage it has passed comes."""
    if not body.startswith("#"):
        return 0
    if _VERSION.match(body):
        return _STAGE_VERSION
    if _STARTING.match(body):
        return _STAGE_STARTING
    if _CONFIG.match(body):
        return _STAGE_CONFIG
    return _STAGE_TABLE if _header(body) else 0


def _header_line(test: Test, body: str, number: int) -> bool:
    """Take one of nccl-tests' `#` lines into the test; False for any other line."""
    if not body.startswith("#"):
        return False
    if match := _VERSION.match(body):
        test.nccl_code = int(match.group(3))
        test.footer["nccl_tests_version"] = match.group(1)
    elif match := _STARTING.match(body):
        test.program = match.group(1)
    elif match := _CONFIG.match(body):
        test.config = {k: v for k, v in match.groupdict().items() if v is not None and k not in ("step", "unit")}
        bad = [f"{k} {v!r}" for k, v in test.config.items() if not v.isdigit()]
        if bad:
            test.fault = test.fault or (
                f"line {number}: a malformed header line ({bad[0]} is not a count): the test of line {test.line} left out"
            )
    elif match := _DEVICE.match(body):
        _device(test, match, number)
    elif layout := _header(body):
        test.layout = layout
    elif match := _OUT_OF_BOUNDS.match(body):
        test.footer["out_of_bounds"] = (match.group(1), match.group(2))
    elif match := _AVERAGE.match(body):
        test.footer["avg_bus_bandwidth"] = match.group(1)
    elif not _CONCLUDED.match(body):
        return False
    if test.layout is not None and (_OUT_OF_BOUNDS.match(body) or _AVERAGE.match(body)):
        test.stage = _STAGE_TABLE + 1  # the table has ended: numbers after it are no rows
    return True


def _header(body: str) -> Layout | None:
    """The table's layout from its column-name line (`#  size  count  type  redop  root  time ...`)."""
    names = body.lstrip("#").split()
    if len(names) < 4 or names[0] != "size" or "busbw" not in names:
        return None
    starts = [i for i, name in enumerate(names) if name in _TIME_COLUMNS]
    timestamp = names[-1] == "timestamp"
    cells = names[:-1] if timestamp else names
    if not starts or not set(cells[: starts[0]]) <= set(_KEY_COLUMNS) or len(starts) > 2:
        return None
    bounds = [*starts, len(cells)]
    blocks = tuple(tuple(cells[a:b]) for a, b in itertools.pairwise(bounds))
    if any(block[1:3] != ("algbw", "busbw") for block in blocks):
        return None
    return Layout(tuple(cells[: starts[0]]), blocks, timestamp)


def _table_line(test: Test, body: str, number: int) -> bool:
    """A row of the test's table: taken as a result, or named and skipped when it is cut or
    malformed. False for a line that is no row (NCCL INFO, prose, a row after the table ended)."""
    words = body.split()
    if test.layout is None or test.stage > _STAGE_TABLE or not words or not words[0].lstrip("-").isdigit():
        return False
    layout = test.layout
    if len(words) != layout.width:
        test.skipped.append(
            f"line {number}: a cut or malformed row ({len(words)} fields; the table has {layout.width}): skipped"
        )
        return True
    cells = dict(zip(layout.key, words))
    result: dict[str, Any] = {
        "size": _number(cells["size"]),
        "count": _number(cells.get("count")),
        "type": cells.get("type", ""),
        "redop": cells.get("redop", ""),
        "root": cells.get("root", ""),
    }
    at = len(layout.key)
    for placement, block in zip(nccl_tests.PLACEMENTS, layout.blocks):
        result[placement] = _block(dict(zip(block, words[at : at + len(block)])))
        at += len(block)
    test.results.append({k: v for k, v in result.items() if v is not None})
    test.labels.append(f"line {number}")
    return True


def _block(cells: dict[str, str]) -> dict[str, Any]:
    """One placement's cells as the -J file's block: time (or cpu_time), alg_bw, bus_bw, nwrong; an
    old table's `error` (the largest error) as max_error. Numbers as numbers, anything else as the
    text it is, which nccl_tests' rules then refuse by name."""
    time = "cputime" if "cputime" in cells else "time"
    block: dict[str, Any] = {
        "cpu_time" if time == "cputime" else "time": _number(cells[time]),
        "alg_bw": _number(cells["algbw"]),
        "bus_bw": _number(cells["busbw"]),
    }
    if "#wrong" in cells:
        block["nwrong"] = cells["#wrong"] if cells["#wrong"] == "N/A" else _number(cells["#wrong"])
    elif "error" in cells:
        error = _number(cells["error"])
        block["nwrong"] = error if isinstance(error, str) else None  # a cell that is no number: refused as one
        block["max_error"] = cells["error"]
    return block


def _number(text: str | None) -> Any:
    """A table cell as the number it is (int where whole), else its text; None when absent."""
    if text is None:
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _device(test: Test, match: re.Match[str], number: int) -> None:
    """One `Using devices` line: its rank must be a whole number no other line has, its host a host
    name (they become the hosts and node_ranks cells); else the whole test is left out, named."""
    rank, host = match.group("rank"), match.group("host")
    taken = {d["rank"] for d in test.devices}
    if not rank.isdigit() or int(rank) in taken or not nccl_tests.HOST.fullmatch(host):
        why = f"rank {rank!r} is on two lines" if rank.isdigit() and int(rank) in taken else ""
        why = why or (f"{rank!r} is not a rank number" if not rank.isdigit() else f"{host!r} is not a host name")
        test.fault = (
            test.fault or f"line {number}: a malformed device line ({why}): the test of line {test.line} left out"
        )
        return
    test.devices.append(
        {"rank": int(rank), "hostname": host, "device_hex": match.group("busid"), "device_info": match.group("info")}
    )


def _command(body: str) -> str:
    """The command a line runs, from the program on (`./build/all_gather_perf -b 8 -e 1G`); "" for
    a line that runs none (an NCCL INFO line names no program: they are skipped here)."""
    if "NCCL INFO" in body or body.startswith("#"):
        return ""
    match = _COMMAND.search(body)
    if not match or _name(match.group("program")) not in nccl_tests.PROGRAMS:
        return ""
    return (match.group("program") + match.group("rest").rstrip(" \\")).strip()


def _information(test: Test, body: str) -> None:
    """What NCCL's own lines say of the run: its version (`NCCL version 2.8.3+cuda11.2`, where the
    header gives none) and the variables NCCL_DEBUG=INFO reports as set."""
    if test.nccl_code is None and (match := _NCCL_LINE.search(body)):
        major, minor, patch = map(int, match.groups())
        test.nccl_code = (
            major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch
        )
    if match := _VARIABLE.search(body):
        test.variables.setdefault(match.group(1), match.group(2))


def _program_fault(test: Test, path: Path) -> str:
    """Why a test that measured cannot be a run of a commbench op ("" when it can): nccl-tests
    before 2.17 print no program name, so a command line in the log or the file's name must give it."""
    if not test.results or test.fault:
        return ""
    if not test.devices:
        return (
            f"line {test.line}: the test lists no devices (its `# Using devices` lines), so its ranks and hosts "
            "are unknown: its rows left out"
        )
    name = _program(test, path)
    if not name:
        return (
            f"line {test.line}: the test names no nccl-tests program (versions before 2.17 print none): "
            "keep the command line in the log or name the file after it (all_reduce_perf.log): its rows left out"
        )
    if name not in nccl_tests.PROGRAMS:
        known = ", ".join(nccl_tests.PROGRAMS)
        return f"line {test.line}: nccl-tests program {name!r} has no commbench op (one of {known}): its rows left out"
    return ""


def _program(test: Test, path: Path) -> str:
    """The test's program: its `# Collective test starting` line, else a command line before its
    table, else the op the file's name holds (`nccl-allgather-16.log`: all_gather_perf)."""
    if test.program or test.hint:
        return _name(test.program or test.hint)
    match = _FILE_NAME.search(path.name.lower().replace("-", "_"))
    if not match:
        return ""
    word = match.group(1).replace("_", "")
    by_word = {p.removesuffix("_perf").replace("_", ""): p for p in nccl_tests.PROGRAMS}
    return by_word.get(word, "")


def _name(program: str) -> str:
    """A program as nccl_tests names it: `./build/all_reduce_perf_mpi` is all_reduce_perf."""
    return nccl_tests.program({"args": [program]})


def _document(test: Test, path: Path) -> dict[str, Any]:
    """The test laid out as nccl-tests' -J document (the fields nccl_tests reads)."""
    program = _program(test, path)
    words = test.command.split()
    return {
        "version": 0,  # a log, not a -J file: no JSON_FILE_VERSION
        "args": words if words and _name(words[0]) == program else [test.program or program],
        "env": [f"{name}={value}" for name, value in test.variables.items()],
        "nccl_version": test.nccl_code,
        "start_time": _start(test, path),
        "config": {**{k: int(v) for k, v in test.config.items()}, "devices": test.devices},
        "results": test.results,
    }


def _start(test: Test, path: Path) -> str:
    """When the test ran: its first kubectl timestamp, else (a log records no time) the file's
    modification time, local time as nccl-tests writes its own."""
    if test.stamp:
        return test.stamp
    return datetime.datetime.fromtimestamp(path.stat().st_mtime).replace(microsecond=0).isoformat()


def _time_source(test: Test) -> str:
    return "the log's timestamps" if test.stamp else "the file's modification time (the log records none)"


def _run_id(test: Test, tests: list[Test]) -> str:
    """A run id from the test's own lines (nccl-tests', without prefixes): importing the same log
    twice, the test copied into another file or saved with other prefixes or NCCL INFO lines finds
    the same run; a test repeated in one file gets its occurrence counted in."""
    digest = test.digest.hexdigest()
    earlier = [t for t in tests[: tests.index(test)] if t.digest.hexdigest() == digest]
    if earlier:
        digest = hashlib.sha256(f"{digest}/{len(earlier)}".encode()).hexdigest()
    return "nccl" + digest[:8]

"""Every case of issue 44, run against a checkout as a user would meet it: before and after the fix.

Each case (tests/support/hostile_inputs: the catalogue, its fixtures and checks) runs in a fresh
temporary folder as `python -m commbench ...` with PYTHONPATH=--tree, at the issue's sizes (the
gzip bombs' 2 and 8 MB; the damaged trace at 200 MB instead of 1 GiB, see its size note), under
limits that protect the shared machine: RLIMIT_AS 4 GiB per process (a MemoryError under it is what
the issue's unbounded growth looks like here), a wall timeout (60 s) after which the process group
is killed, and every process of the run killed at its end. Recorded per case: the exit (or "killed
at timeout"), whether the output is one line and holds no traceback, the wall time, the peak RSS of
the largest process of the command's tree (os.wait4's ru_maxrss), the fixture's size on disk and the
case's checks (files unchanged, no secret, the history opens, ...), with the load average.

    python bench/hostile_inputs.py [--tree DIR] [--only ID,...] [--group NAME] [--ci] [--timeout 60]
                                   [--json OUT] [--before BEFORE.json] [--keep DIR]

--before prints the two runs side by side (before -> after) in one table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.hostile_inputs import CASES  # noqa: E402
from tests.support.hostile_inputs.case import Case  # noqa: E402
from tests.support.hostile_inputs.run import MEMORY_LIMIT, TIMEOUT_S, Runner  # noqa: E402

COLUMNS = ("case", "group", "exit", "one line?", "time s", "peak MB", "checks", "right?")


def chosen(only: str | None, group: str | None) -> list[Case]:
    ids = set(only.split(",")) if only else None
    unknown = (ids or set()) - {c.id for c in CASES}
    if unknown:
        sys.exit(f"no case {', '.join(sorted(unknown))}; the cases: {', '.join(c.id for c in CASES)}")
    return [c for c in CASES if (ids is None or c.id in ids) and (group is None or group.lower() in c.group.lower())]


def commit(tree: Path) -> str:
    found = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain"], capture_output=True, text=True).stdout
    return (found.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty.strip() else "")


def cells(result: dict[str, Any]) -> dict[str, str]:
    """One run of a case as the table's cells."""
    exits = "+".join(
        str(e) + (f" {result['error']}" if e == 4 and result.get("error") else "") for e in result["exits"]
    )
    one = "+".join("yes" if o else "no" for o in result["one_line"]) + (", traceback" if result["traceback"] else "")
    time_s = f"{result['wall_s']:.1f}"
    if result.get("signal_to_exit_s") is not None:
        time_s += f" ({result['signal_to_exit_s']:.1f} after the signal)"
    failed = [_short(why) for why in result["checks"].values() if why is not None]
    checks = "; ".join(failed) if failed else ("pass" if result["checks"] else "-")
    return {
        "exit": exits,
        "one line?": one,
        "time s": time_s,
        "peak MB": f"{result['peak_mb']:.0f}",
        "checks": checks,
        "right?": "yes" if result["right"] else "no",
    }


def _short(text: str, most: int = 90) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def table(results: list[dict[str, Any]], before: dict[str, dict[str, Any]] | None = None) -> str:
    """The Markdown table; with before (results by id), each cell is `before → after`."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for result in results:
        now = cells(result)
        if before is not None and result["id"] in before:
            old = cells(before[result["id"]])
            now = {k: v if old[k] == v else f"{old[k]} → {v}" for k, v in now.items()}
        row = [f"`{result['id']}`", result["group"], *(now[c].replace("|", "\\|") for c in COLUMNS[2:])]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def sizes(results: list[dict[str, Any]]) -> str:
    """What the sized cases were made of: the size note and the files' size on disk."""
    made = [(r["id"], r["size_note"] or f"{r['size']:,} bytes", r["fixture_bytes"] / 1e6) for r in results if r["size"]]
    lines = [f"- `{id}`: {note}; {mb:.1f} MB on disk" for id, note, mb in made]
    return "\nSizes:\n" + "\n".join(lines) if lines else ""


def header(document: dict[str, Any], before: dict[str, Any] | None) -> str:
    def where(d: dict[str, Any]) -> str:
        load = (
            ", ".join(f"{x:.2f}" for x in d["loadavg_start"]) + " → " + ", ".join(f"{x:.2f}" for x in d["loadavg_end"])
        )
        return f"{d['tree']} at {d['commit']}, {d['sizes']} sizes, load average {load}"

    text = (
        f"Runs: {where(before) + ' (before) and ' if before else ''}{where(document)}{' (after)' if before else ''}.\n"
    )
    text += (
        f"Each process under RLIMIT_AS {document['memory_limit_gib']:g} GiB (a MemoryError under it is the issue's "
        f"unbounded growth) and a {document['timeout_s']:g} s wall timeout; peak MB is the largest process of the "
        "command's tree (ru_maxrss); exit 4 is commbench's internal error (a traceback), named by its exception.\n"
    )
    return text


def run(args: argparse.Namespace) -> dict[str, Any]:
    runner = Runner(tree=args.tree.resolve(), timeout_s=args.timeout)
    document: dict[str, Any] = {
        "tree": str(args.tree.resolve()),
        "commit": commit(args.tree),
        "sizes": "ci" if args.ci else "bench",
        "memory_limit_gib": MEMORY_LIMIT / (1 << 30),
        "timeout_s": args.timeout,
        "loadavg_start": list(os.getloadavg()),
        "cases": [],
    }
    began = time.monotonic()
    for case in chosen(args.only, args.group):
        result = runner.run(case, bench=not args.ci, keep=args.keep).as_dict()
        document["cases"].append(result)
        print(f"# {case.id}: {cells(result)}", file=sys.stderr, flush=True)
    document["loadavg_end"] = list(os.getloadavg())
    document["wall_s"] = round(time.monotonic() - began, 1)
    return document


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose commbench runs (default: this one)")
    parser.add_argument("--only", default=None, help="comma-separated case ids")
    parser.add_argument("--group", default=None, help="only the cases of this group of the issue (a part of its name)")
    parser.add_argument("--ci", action="store_true", help="the tests' small sizes instead of the issue's")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds before a case is killed")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--before", type=Path, default=None, help="a --json of an earlier run: both side by side")
    parser.add_argument("--keep", type=Path, default=None, help="make the case folders here and keep them")
    args = parser.parse_args()
    document = run(args)
    if args.json:
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    before = json.loads(args.before.read_text()) if args.before else None
    by_id = {r["id"]: r for r in before["cases"]} if before else None
    print(header(document, before))
    print(table(document["cases"], by_id))
    print(sizes(document["cases"]))


if __name__ == "__main__":
    main()

"""SLURM's compressed lists: host names (`gpu[01-04,07]`, `r1n[1-2],r2n3`) and tasks per node
(`2(x3),1`), as srun sets them in SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

SLURM_CONF_FILES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
_ITEM = re.compile(r"([^\[\],]*)(?:\[([^\]]*)\])?")


def expand_nodelist(nodelist: str, scontrol: bool = True, environ: Mapping[str, str] | None = None) -> list[str]:
    """Host names from SLURM's compressed form (`gpu[01-04,07]`, `r1n[1-2],r2n3`), in order.

    `scontrol show hostnames` is the reference and is used when it is installed, a SLURM
    configuration is at hand (SLURM_CONF, which slurmd sets for every task, or the default file)
    and it answers. Without a configuration scontrol would look for one in DNS and then fail, so
    then (or with scontrol=False) parse_nodelist, which follows the same grammar, expands it.
    """
    env = os.environ if environ is None else environ
    has_config = bool(env.get("SLURM_CONF")) or any(os.path.exists(p) for p in SLURM_CONF_FILES)
    if scontrol and has_config and shutil.which("scontrol"):
        try:
            conf = {"SLURM_CONF": env["SLURM_CONF"]} if env.get("SLURM_CONF") else {}
            proc = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist],
                capture_output=True,
                text=True,
                timeout=10,
                env={**os.environ, **conf},
            )
            hosts = proc.stdout.split()
            if proc.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.TimeoutExpired):
            pass
    return parse_nodelist(nodelist)


def parse_nodelist(nodelist: str) -> list[str]:
    """Expand SLURM's host list syntax without scontrol.

    Items are separated by commas outside brackets; an item is text and bracket groups, each
    group a comma-separated list of numbers and lo-hi ranges (`n[01-03,7]`), zero padding kept
    from lo's width; several groups in one name multiply (`r[1-2]n[1-2]` is r1n1 r1n2 r2n1 r2n2).
    """
    hosts: list[str] = []
    for item in _split_top(nodelist.strip()):
        names = [""]
        pos = 0
        while pos < len(item):
            match = _ITEM.match(item, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"cannot parse SLURM node list {nodelist!r} near {item[pos:]!r}")
            text, group = match.group(1), match.group(2)
            names = [n + text for n in names]
            if group is not None:
                names = [n + number for n in names for number in _expand_group(group, nodelist)]
            pos = match.end()
        hosts.extend(names)
    return hosts


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in SLURM node list {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in SLURM node list {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_group(group: str, nodelist: str) -> list[str]:
    out: list[str] = []
    for part in group.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"cannot parse range {part!r} in SLURM node list {nodelist!r}")
        if not sep:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"range {part!r} runs backwards in SLURM node list {nodelist!r}")
        out.extend(f"{n:0{len(lo)}d}" for n in range(int(lo), int(hi) + 1))
    return out


def tasks_on_node(tasks_per_node: str, node: int) -> int:
    """Tasks on the node-th node from SLURM_TASKS_PER_NODE's form, e.g. `2(x3),1` is 2, 2, 2, 1."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ValueError(f"cannot parse SLURM tasks per node {tasks_per_node!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    if not 0 <= node < len(counts):
        raise ValueError(f"node {node} is not in SLURM tasks per node {tasks_per_node!r}")
    return counts[node]

"""Put on PYTHONPATH (with CAPTURE_REPLAY_DIR set) for a `commbench replay` run: every rank the
command spawns records each step sequence it issues, the first time it issues it (one where every
step issues the same calls, each recorded step's own where they differ), as commbench set each call
up (its op, variant, dtype, counts, group ranks, splits, a transfer's ends, and the name of the torch
process group it ran on) and as torch received it (the c10d:: events torch.profiler sees), into
CAPTURE_REPLAY_DIR/rank{r}.json: {"steps": [{"calls": [...], "comms": [...]}, ...]}, and the first
step's "calls" and "comms" at the top level. Python imports sitecustomize at start-up in every process."""

from __future__ import annotations

import os


def _group_name(backend) -> str:  # type: ignore[no-untyped-def]
    """The torch process group a call ran on: "world" for the default group, else torch's own name."""
    group = getattr(backend, "group", None)
    if group is None:
        return "world"
    import torch.distributed as dist

    return str(dist.distributed_c10d._get_process_group_name(group))


def _install(folder: str) -> None:
    import json
    import tempfile
    from pathlib import Path

    from commbench.ops.args import wait_all
    from commbench.replay import adapter
    from tests.replay.ranks import issued_call

    issue = adapter.Step.issue
    captured_steps: dict[int, dict] = {}

    def captured(self: adapter.Step, args, phase: str) -> None:  # type: ignore[no-untyped-def]
        turn = self.turn
        if turn in captured_steps:  # each step sequence once: the later samples issue the same
            return issue(self, args, phase)
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            issue(self, args, phase)
            wait_all(args)  # the profiler stopped under calls in flight can crash the rank (SIGSEGV seen)
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(trace))
            events = json.loads(trace.read_text())["traceEvents"]
        c10d = sorted((e for e in events if e.get("name", "").startswith("c10d::")), key=lambda e: e["ts"])
        calls = [
            [
                i.call.op, i.call.variant, i.call.dtype, i.call.in_elems, i.call.out_elems, list(i.call.group_ranks),
                [list(row) for row in i.call.splits], i.call.src, i.call.dst, _group_name(i.args.backend),
            ]
            for i in self.issued
        ]  # fmt: skip
        captured_steps[turn] = {"calls": calls, "comms": [issued_call(e) for e in c10d]}
        steps = [captured_steps[t] for t in sorted(captured_steps)]
        out = Path(folder) / f"rank{os.environ.get('RANK', '0')}.json"
        out.write_text(json.dumps({**steps[0], "steps": steps}))

    adapter.Step.issue = captured  # type: ignore[method-assign]


if folder := os.environ.get("CAPTURE_REPLAY_DIR"):
    _install(folder)

"""Put on PYTHONPATH (with CAPTURE_REPLAY_DIR set) for a `commbench replay` run: every rank the
command spawns records the first step it issues, as commbench set it up (each call's op, variant,
dtype, counts, group) and as torch received it (the c10d:: events torch.profiler sees), into
CAPTURE_REPLAY_DIR/rank{r}.json. Python imports sitecustomize at start-up in every process."""

from __future__ import annotations

import os


def _install(folder: str) -> None:
    import json
    import tempfile
    from pathlib import Path

    from commbench.ops.args import wait_all
    from commbench.replay import adapter
    from tests.replay.ranks import issued_call

    issue = adapter.Step.issue

    def captured(self: adapter.Step, args, phase: str) -> None:  # type: ignore[no-untyped-def]
        out = Path(folder) / f"rank{os.environ.get('RANK', '0')}.json"
        if out.exists():  # the first sample (a warm-up) only: the others issue the same
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
            [i.call.op, i.call.variant, i.call.dtype, i.call.in_elems, i.call.out_elems, list(i.call.group_ranks)]
            for i in self.issued
        ]
        out.write_text(json.dumps({"calls": calls, "comms": [issued_call(e) for e in c10d]}))

    adapter.Step.issue = captured  # type: ignore[method-assign]


if folder := os.environ.get("CAPTURE_REPLAY_DIR"):
    _install(folder)

"""What the ranks of the replay tests run (module-level: run_ranks pickles it into the ranks)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from commbench.ops.args import wait_all
from commbench.replay.adapter import Step, set_up
from commbench.replay.codec import plan_from_dict
from commbench.replay.rank import make_groups


def issued_under_profiler(backend: Any, plan_data: dict[str, Any]) -> dict[str, Any]:
    """Issue the plan's step once under torch.profiler; what its record_param_comms events say
    (op, elements, dtype, group ranks, in order), and the step's wrong elements."""
    import torch

    plan = plan_from_dict(plan_data)
    views = make_groups(backend, plan.calls())
    shared: list = []
    issued = [set_up(c, views[c.communicator], backend, len(c.group_ranks), shared) for c in plan.sequence]
    step = Step([issued])
    args = issued[0].args
    step.fill(args)
    step.before(args, "comm")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        step.issue(args, "comm")
        wait_all(args)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    # The c10d:: events are the calls as issued, in issue order (gloo:'s run on the transport's threads).
    issued_events = sorted((e for e in events if e.get("name", "").startswith("c10d::")), key=lambda e: e["ts"])
    return {"comms": [issued_call(e) for e in issued_events], "wrong": step.wrong(args, "comm")}


def issued_call(event: dict[str, Any]) -> tuple:
    """(c10d op, the shapes of its tensor arguments, their dtype where the event names it, its splits)."""
    args = event["args"]
    dims = [d for d in args["Input Dims"] if d]
    shapes = [tuple(map(tuple, d)) if d and isinstance(d[0], list) else tuple(d) for d in dims]
    kinds = [k for k in args["Input type"] if k not in ("", "Scalar", "ScalarList", "TensorList")]
    splits = [c for c, k in zip(args["Concrete Inputs"], args["Input type"]) if k == "ScalarList"]
    return (event["name"], tuple(shapes), kinds[0] if kinds else None, tuple(splits))

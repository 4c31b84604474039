"""The calls a row reports, counted two ways on real ranks: by the harness (bound calls, counted once
per block) and by the harness's previous accounting (every call recorded as it is made, per sample).

For every registered op, variant and phase a backend can run, and for blocking (window 1) and
non-blocking (window 3) samples: the `calls` and `api` a row gets from measure(), and how far the
issued-call counter (the heartbeat's, which names a rank that fell behind) moved over the case,
against the same case run by reference(): warm-up, timed samples and the check (of the first warm-up
sample in blocking mode, of a fresh iteration of its own otherwise) through op.issue(),
with Backend.record counting each call, the counters cleared before each sample's issue as the
harness did before it bound its calls. Run on 2 Gloo ranks by tests/run/test_timed_calls.py and under
horovodrun by tests/backends/test_horovod.py (`python -m tests.support.call_counts` prints the differences).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch

from commbench.ops import registry
from commbench.ops.args import CollArgs, complete, wait_all
from commbench.ops.base import Op
from commbench.run.harness import measure
from commbench.run.watchdog import Watchdog

# Small workloads that still make the bucketed ops split and flush into several buckets.
OPTIONS = {
    "tensors": "1000,3x4K,7",
    "bucket_cap_mb": "0,0.05",
    "message_size": "2K",
    "channels": "6",
    "batch": "2",
    "spatial": "2",
}
WINDOWS = (1, 3)
WARMUP, ITERS = 2, 3


def reference(op: Op, args: CollArgs, phase: str, window: int) -> tuple[float, str, int]:
    """calls, api and issued-counter movement as the harness counted them before bound calls."""
    backend = args.backend
    issued = backend.issued
    op.fill(args)
    timed: Counter[str] = Counter()
    for i in range(WARMUP + ITERS):
        op.before(args, phase)
        backend.barrier()
        backend.calls.clear()
        for _ in range(window):
            op.issue(args, phase)
        wait_all(args)
        if i == 0 and window == 1:
            op.wrong(args, phase)  # the check, of the first warm-up sample (the barrier op's issues one more barrier)
        if i >= WARMUP:
            timed.update(backend.calls)
    if window > 1:  # several applications per sample: the check runs a fresh iteration of its own
        op.fill(args)
        op.before(args, phase)
        op.issue(args, phase)
        complete(args)
        op.wrong(args, phase)
    return sum(timed.values()) / (ITERS * window), "+".join(sorted(timed)), backend.issued - issued


def harness(op: Op, args: CollArgs, phase: str, window: int) -> tuple[float, str, int]:
    """calls, api and issued-counter movement of the same case measured by the harness."""
    issued = args.backend.issued
    m = measure(
        op,
        args,
        phase,
        iters=ITERS,
        warmup=WARMUP,
        window=window,
        check=True,
        watchdog=Watchdog(120, args.backend.rank),
        label=f"{op.name}/{args.variant}/{phase}",
    )
    return m.calls, m.apis, args.backend.issued - issued


def cases(backend: Any) -> list[tuple[type[Op], str, str, int]]:
    """Every (op, variant, phase, window) this backend can run, with the sizes the op measures."""
    found = []
    for cls in registry().values():
        op = cls(OPTIONS)
        if op.world_error(backend.world_size) is not None:
            continue
        for variant in op.variants:
            if op.unavailable(variant, backend) is not None:
                continue
            for phase in op.phases:
                windows = sorted({op.spec.window_for(variant, w) for w in WINDOWS})
                if backend.name == "horovod" and cls.spec.name == "barrier":
                    windows = [1]  # Horovod refuses a second barrier while one is in flight (any harness)
                found += [(cls, variant, phase, w) for w in windows]
    return found


def differences(backend: Any) -> dict[str, Any]:
    """Every case's counts both ways, and the cases where they differ."""
    compared, differ = {}, {}
    for cls, variant, phase, window in cases(backend):
        found = []
        for count in (reference, harness):
            op = cls(OPTIONS)
            args = CollArgs(backend=backend, dtype=torch.float32, variant=variant)
            op.setup(args, op.points([64])[0])
            found.append(count(op, args, phase, window))
        key = f"{cls.spec.name}/{variant}/{phase}/window={window}"
        compared[key] = found[1]
        if found[0] != found[1]:
            differ[key] = {"reference": found[0], "harness": found[1]}
    return {"compared": compared, "differ": differ}


def main() -> None:
    """Under horovodrun: rank 0 prints the cases compared and the ones that differ, as JSON."""
    from commbench.backends.horovod import HorovodBackend
    from commbench.launch.env import detect

    backend = HorovodBackend()
    backend.init(120, detect())
    try:
        found = differences(backend)
        if backend.rank == 0:
            print(RESULT_TAG, json.dumps(found), flush=True)
    finally:
        backend.close()
    sys.exit(0)


RESULT_TAG = "CALL-COUNTS"

if __name__ == "__main__":
    main()

"""Every HorovodBackend method checked on real Horovod ranks: `horovodrun -np N --gloo python -m tests.support.horovod_cases`.

The ops test the backend through the CLI; this checks the contract directly, including what no op
exercises yet: several handles of one API in flight at once (their names must not collide),
uneven grouped shapes, and in-place all_reduce. Rank 0 prints one line starting with RESULT_TAG.
"""

from __future__ import annotations

import json
import sys

import torch

from commbench.backends.horovod import HorovodBackend
from commbench.launch.env import detect

RESULT_TAG = "HOROVOD_CASES"


def rows(rank: int, numel: int, salt: int = 0) -> torch.Tensor:
    """Rank r's small-integer tensor: exact in float32, distinct per rank and salt."""
    return (torch.arange(numel) + 7 * rank + 3 * salt) % 17 + 1.0


def check(b: HorovodBackend) -> dict[str, int]:
    """Wrong elements per case on this rank."""
    n, r = b.world_size, b.rank
    wrong: dict[str, int] = {}

    def score(case: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        wrong[case] = wrong.get(case, 0) + int((actual != expected).sum().item())

    # Flat all_gather, several in flight (one name slot each), completed in reverse order.
    outs = [torch.zeros(n * 5) for _ in range(4)]
    works = [b.all_gather_flat(out, rows(r, 5, k)) for k, out in enumerate(outs)]
    for w in reversed(works):
        w.wait()
    for k, out in enumerate(outs):
        score("all_gather_flat", out, torch.cat([rows(q, 5, k) for q in range(n)]))

    parts = [torch.zeros(3) for _ in range(n)]
    b.all_gather_list(parts, rows(r, 3)).wait()
    for q, part in enumerate(parts):
        score("all_gather_list", part, rows(q, 3))

    # reduce_scatter: every rank's input is n shards; rank r receives the sum of shard r.
    shard = 4
    out = torch.zeros(shard)
    b.reduce_scatter_flat(out, rows(r, n * shard)).wait()
    score("reduce_scatter_flat", out, sum(rows(q, n * shard) for q in range(n))[r * shard : (r + 1) * shard])

    out = torch.zeros(shard)
    b.reduce_scatter_list(out, list(rows(r, n * shard, 1).chunk(n))).wait()
    score("reduce_scatter_list", out, sum(rows(q, n * shard, 1) for q in range(n))[r * shard : (r + 1) * shard])

    t = rows(r, 6)
    b.all_reduce(t).wait()
    score("all_reduce", t, sum(rows(q, 6) for q in range(n)))

    # Grouped forms with uneven shapes (SyncBN's count, mean, invstd).
    numels = [1, 3, 3]
    outs = [torch.zeros(n * k) for k in numels]
    b.all_gather_group(outs, [rows(r, k, i) for i, k in enumerate(numels)]).wait()
    for i, (out, k) in enumerate(zip(outs, numels)):
        score("all_gather_group", out, torch.cat([rows(q, k, i) for q in range(n)]))

    ts = [rows(r, k, i) for i, k in enumerate(numels)]
    b.all_reduce_group(ts).wait()
    for i, (t, k) in enumerate(zip(ts, numels)):
        score("all_reduce_group", t, sum(rows(q, k, i) for q in range(n)))

    outs = [torch.zeros(k) for k in numels]
    b.reduce_scatter_group(outs, [rows(r, n * k, i) for i, k in enumerate(numels)]).wait()
    for i, (out, k) in enumerate(zip(outs, numels)):
        score("reduce_scatter_group", out, sum(rows(q, n * k, i) for q in range(n))[r * k : (r + 1) * k])

    # all_to_all: even, uneven (rank q sends q + p + 1 elements to rank p, so the sizes differ), list.
    out = torch.zeros(n * 2)
    b.all_to_all_single(out, rows(r, n * 2)).wait()
    score("all_to_all_single", out, torch.cat([rows(q, n * 2)[2 * r : 2 * r + 2] for q in range(n)]))
    send = [r + p + 1 for p in range(n)]
    receive = [q + r + 1 for q in range(n)]
    out = torch.zeros(sum(receive))
    b.all_to_all_single(out, rows(r, sum(send), 2), receive, send).wait()
    expected = [
        rows(q, sum(q + p + 1 for p in range(n)), 2)[sum(q + p + 1 for p in range(r)) :][: q + r + 1] for q in range(n)
    ]
    score("all_to_all_uneven", out, torch.cat(expected))
    outs = [torch.zeros(3) for _ in range(n)]
    b.all_to_all_list(outs, [rows(r, 3, p) for p in range(n)]).wait()
    for q, o in enumerate(outs):
        score("all_to_all_list", o, rows(q, 3, r))

    for root in range(n):
        t = rows(r, 5, 3) if r == root else torch.zeros(5)
        b.broadcast(t, root).wait()
        score("broadcast", t, rows(root, 5, 3))
    b.barrier_async().wait()
    wrong["lacking"] = sum(b.missing(c) is None for c in ("reduce", "gather", "scatter", "send_recv"))
    wrong["has"] = sum(b.missing(c) is not None for c in ("all_to_all_single", "broadcast", "barrier_async"))

    # A wait object may be waited twice (the harness and an op both completing it).
    out = torch.zeros(n)
    w = b.all_gather_flat(out, torch.full((1,), float(r)))
    w.wait()
    w.wait()
    score("wait_twice", out, torch.arange(n, dtype=torch.float32))

    b.barrier()
    gathered = b.all_gather_object({"rank": r})
    wrong["all_gather_object"] = int(gathered != [{"rank": q} for q in range(n)])

    # The control plane between timed blocks: maxima and sums over ranks (exact float64), and
    # every rank's samples on rank 0 only.
    mine = [float(r) * 0.1 + 1e-9 * k for k in range(5)]
    everyone = [[float(q) * 0.1 + 1e-9 * k for k in range(5)] for q in range(n)]
    wrong["reduce_floats_max"] = int(b.reduce_floats(mine, "max") != [max(c) for c in zip(*everyone)])
    wrong["reduce_floats_sum"] = int(b.reduce_floats([float(r + 1)], "sum") != [float(n * (n + 1) // 2)])
    wrong["reduce_floats_empty"] = int(b.reduce_floats([], "max") != [])
    rows_on_0 = b.gather_floats(mine)
    wrong["gather_floats"] = int(rows_on_0 != (everyone if r == 0 else None))
    wrong["gather_object"] = int(b.gather_object(r) != (list(range(n)) if r == 0 else None))
    return wrong


def main() -> None:
    b = HorovodBackend()
    b.init(60, detect())
    try:
        mine = check(b)
        everyone = b.all_gather_object(mine)
        if b.rank == 0:
            total = {case: sum(w[case] for w in everyone) for case in mine}
            print(
                RESULT_TAG, json.dumps({"world_size": b.world_size, "wrong": total, "calls": dict(b.calls)}), flush=True
            )
    finally:
        b.close()
    sys.exit(0)


if __name__ == "__main__":
    main()

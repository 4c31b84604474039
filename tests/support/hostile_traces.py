"""Traces a careless or hostile colleague could hand `commbench replay`, written small enough for
CI in the shapes that broke the readers (issue 44): gzip bombs, a long string, whitespace, a damaged
event, deep nesting, a pickle of shared lists, numbers that build the world, fields of the wrong
type. Each REFUSED case writes its files into a folder and returns the `commbench replay`
arguments, with a fragment the one-line refusal holds; bench/trace_adversarial.py and the
before/after check of the issue use the same builders at larger sizes."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import trace_files as tf

PLACEHOLDER = 987654321  # a count written then replaced in the JSON text by what json.dumps cannot write


def gz(path: Path, parts: Iterable[bytes]) -> Path:
    """A gzip file of the parts, written as they come (a bomb is never held whole)."""
    with gzip.open(path, "wb", compresslevel=6) as f:
        for part in parts:
            f.write(part)
    return path


def kineto_events(path: Path, events: list[dict], **kw: Any) -> Path:
    return tf.kineto(path, [tf.step(1, 0, 10_000), *events], **kw)


def one_allreduce(path: Path, **args: Any) -> Path:
    """A Kineto trace of one all_reduce whose record_param_comms args are overridden by args."""
    return kineto_events(path, [tf.comm("allreduce", 64, 10, **args)])


def with_text(path: Path, text: str) -> Path:
    """The trace at path with PLACEHOLDER replaced by text in its JSON (1e400, NaN...)."""
    path.write_text(path.read_text().replace(str(PLACEHOLDER), text))
    return path


def compute_lines(n: int) -> Iterable[bytes]:
    """n compute events, each as a JSON line ending with a comma."""
    line = (json.dumps(tf.compute(5)) + ",\n").encode()
    for _ in range(n):
        yield line


def kineto_parts(body: Iterable[bytes], *, world: int = 2, rank: int = 0) -> Iterable[bytes]:
    """A Kineto trace's text around `body` (event lines, each ending with a comma): a step and an all_reduce after it."""
    info = {"backend": "nccl", "rank": rank, "world_size": world}
    yield b'{"schemaVersion": 1, "distributedInfo": ' + json.dumps(info).encode() + b', "traceEvents": [\n'
    yield (json.dumps(tf.step(1, 0, 10_000)) + ",\n").encode()
    yield from body
    yield json.dumps(tf.comm("allreduce", 64, 10)).encode() + b"\n]}\n"


def execution_trace(path: Path, nodes: list[dict], groups: list[dict]) -> Path:
    """An Execution Trace (schema 1.1.0-chakra) of the nodes, its groups in the process_group:init node."""
    init = {
        "name": "## process_group:init ##",
        "id": 2,
        "inputs": {"values": [json.dumps(groups)], "shapes": [[]], "types": ["String"]},
    }
    doc = {"schema": "1.1.0-chakra.0.0.4", "pid": 1, "nodes": [init, *nodes], "finish_ts": 1}
    path.write_text(json.dumps(doc))
    return path


def gloo_allreduce_node(rf: int = 5) -> dict:
    """An Execution Trace's c10d::allreduce_ node, as Gloo leaves it (no record_param_comms)."""
    return {
        "name": "c10d::allreduce_",
        "id": rf,
        "attrs": [{"name": "rf_id", "type": "uint64", "value": rf}],
        "inputs": {
            "values": [[], [], [], -1],
            "shapes": [[[1024]], [], [], []],
            "types": ["GenericList[Tensor(float)]"],
        },
    }


def fr_dump(entries: Any, **fields: Any) -> dict:
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "comm_lib_version": "",
        "entries": entries,
        **fields,
    }


def fr_pickle(path: Path, dump: dict) -> Path:
    path.write_bytes(pickle.dumps(dump))
    return path


def shared_lists(width: int, depth: int) -> list:
    """A list of width^depth leaves from depth + 1 lists, each level the previous one `width` times (a pickle of it is tiny)."""
    level: list = [1]
    for _ in range(depth):
        level = [level] * width
    return level


def allreduce_entries(n: int) -> list[dict]:
    return [tf.fr_entry("nccl:all_reduce", [[1024]], i + 1) for i in range(n)]


# -- the cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One hostile input: build(folder) writes it and returns `commbench replay`'s arguments; the
    refusal is one line holding `says`."""

    build: Callable[[Path], list[str]]
    says: str


def _paths(*paths: Path) -> list[str]:
    return [str(p) for p in paths]


def _nelems(text: str) -> Callable[[Path], list[str]]:
    return lambda d: _paths(with_text(one_allreduce(d / "rank0.json", **{"In msg nelems": PLACEHOLDER}), text))


def _kineto_bomb(d: Path) -> list[str]:
    bomb = gz(d / "bomb.json.gz", kineto_parts(compute_lines(40_000)))  # 4 MB inflated, 30 KB on disk
    return [str(bomb), "--trace-limit", "bytes=1M"]


def _whitespace_bomb(d: Path) -> list[str]:
    body = (b" " * (1 << 20) for _ in range(4))
    return [str(gz(d / "ws.json.gz", kineto_parts(body))), "--trace-limit", "bytes=2M"]


def _long_string(d: Path) -> list[str]:
    event = json.dumps({**tf.compute(5), "name": "x" * (1 << 20)}) + ",\n"
    return [str(gz(d / "long.json.gz", kineto_parts([event.encode()]))), "--trace-limit", "event-bytes=256K"]


def _damaged(d: Path) -> list[str]:
    good = list(compute_lines(5000))
    body = [*good, b'{"ph": "X", "name": "aten::mm", "ts": 5, "dur": 3 "args": {}},\n', *good]
    return _paths(gz(d / "damaged.json.gz", kineto_parts(body)))


def _deep(d: Path) -> list[str]:
    event = '{"ph": "X", "name": "aten::mm", "ts": 5, "args": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}},\n"
    return _paths(gz(d / "deep.json.gz", kineto_parts([event.encode()])))


def _world(d: Path) -> list[str]:
    paths = [kineto_events(d / f"rank{r}.json", [tf.comm("allreduce", 64, 10)], rank=r) for r in (0, 1)]
    for path in paths:
        path.write_text(path.read_text().replace('"world_size": 2', '"world_size": 1000000000000'))
    return _paths(*paths)


def _fr_json(d: Path, dump: dict) -> list[str]:
    path = d / "nccl_trace_rank_0.json"
    path.write_text(json.dumps(dump))
    return _paths(path)


def _fr_pickle_bomb(d: Path) -> list[str]:
    data = pickle.dumps(fr_dump(allreduce_entries(2), padding=b"\0" * (4 << 20)))
    return [str(gz(d / "nccl_trace_rank_0.gz", [data])), "--trace-limit", "pickle-bytes=1M"]


def _fr_json_bomb(d: Path) -> list[str]:
    entry = json.dumps(tf.fr_entry("nccl:all_reduce", [[1024]], 1) | {"process_group": ["0", "default_pg"]})
    head = json.dumps(fr_dump([]))[:-2].encode()  # up to the entries' "["
    parts = [head, *(entry.encode() + b", " for _ in range(10_000)), entry.encode() + b"]}"]
    return [str(gz(d / "nccl_trace_rank_0.json.gz", parts)), "--trace-limit", "bytes=1M"]


def _fifo(d: Path) -> list[str]:
    os.mkfifo(d / "trace.json")
    return _paths(d / "trace.json")


def _symlink_loop(d: Path) -> list[str]:
    (d / "a.json").symlink_to(d / "b.json")
    (d / "b.json").symlink_to(d / "a.json")
    return _paths(d / "a.json")


def _two_jobs(d: Path) -> list[str]:
    sizes = (2_049_000, 7_875_584, 6_563_840)
    for rank, scale in ((0, 1), (1, 4)):
        events = [tf.comm("allreduce", n * scale, 10 + 10 * i, Seq=i) for i, n in enumerate(sizes)]
        kineto_events(d / f"rank{rank}.json", events, rank=rank)
    return _paths(d / "rank0.json", d / "rank1.json")


def _all_unmapped(d: Path) -> list[str]:
    return _paths(kineto_events(d / "rank0.json", [tf.comm("nccl_custom", 64, 10), tf.comm("nccl_custom", 8, 20)]))


REFUSED: dict[str, Case] = {
    "nelems 'lots'": Case(
        lambda d: _paths(one_allreduce(d / "rank0.json", **{"In msg nelems": "lots"})), "not a count"
    ),
    "nelems 0 (every collective unmapped)": Case(
        lambda d: _paths(one_allreduce(d / "rank0.json", **{"In msg nelems": 0, "Out msg nelems": 0})),
        "none of its 1 collective(s) can be replayed (no sizes recorded: 1",
    ),
    "nelems 1e400": Case(_nelems("1e400"), "is inf, not a count"),
    "nelems 10^400": Case(_nelems("1" + "0" * 400), "a 401-digit number, not a count"),
    "nelems negative": Case(_nelems("-8"), "is -8, not a count"),
    "nelems of 5000 digits": Case(_nelems("9" * 5000), "damaged at byte"),
    "dur 'fast'": Case(
        lambda d: _paths(kineto_events(d / "rank0.json", [{**tf.comm("allreduce", 64, 10), "dur": "fast"}])),
        "dur is 'fast', not a duration",
    ),
    "args not an object": Case(
        lambda d: _paths(
            kineto_events(d / "rank0.json", [{**tf.comm("allreduce", 64, 10), "args": ["In msg nelems"]}])
        ),
        "args is a list of 1 items, not an object",
    ),
    "traceEvents not a list": Case(
        lambda d: [str(_write(d / "rank0.json", b'{"schemaVersion": 1, "traceEvents": 5}'))],
        "traceEvents is 5, not a list",
    ),
    "group ranks negative": Case(
        lambda d: _paths(one_allreduce(d / "rank0.json", **{"Process Group Ranks": "[-1, 1]"})), "out of range"
    ),
    "group ranks twice": Case(
        lambda d: _paths(one_allreduce(d / "rank0.json", **{"Process Group Ranks": "[0, 0]"})), "lists rank 0 twice"
    ),
    "Group size 10^12": Case(
        lambda d: _paths(
            one_allreduce(
                d / "rank0.json",
                **{"Process Group Ranks": "[]", "Group size": 10**12, "Global rank start": 0, "Global rank stride": 1},
            )
        ),
        "is 1000000000000, not a number of ranks",
    ),
    "world_size 10^12": Case(_world, "distributedInfo.world_size is 1000000000000, not a number of ranks"),
    "Execution Trace group_size 10^12": Case(
        lambda d: _paths(
            execution_trace(
                d / "rank0.json",
                [gloo_allreduce_node()],
                [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo", "group_size": 10**12}],
            )
        ),
        "group_size is 1000000000000, not a number of ranks",
    ),
    "deep nesting": Case(_deep, "nested too deep"),
    "Flight Recorder entries 5": Case(lambda d: _fr_json(d, fr_dump(5)), "entries is 5, not a list"),
    "Flight Recorder pg_config a list": Case(
        lambda d: _paths(fr_pickle(d / "nccl_trace_rank_0", fr_dump(allreduce_entries(2), pg_config=[1, 2]))),
        "pg_config is a list of 2 items, not an object",
    ),
    "Flight Recorder pickle of shared lists (2^60 leaves)": Case(
        lambda d: _paths(
            fr_pickle(
                d / "nccl_trace_rank_0",
                fr_dump([tf.fr_entry("nccl:all_reduce", [[1024]], 1) | {"input_sizes": [shared_lists(8, 20)]}]),
            )
        ),
        "expand to more than 2,000,000 list elements",
    ),
    "Flight Recorder pickle of shared lists, 61 deep": Case(
        lambda d: _paths(
            fr_pickle(
                d / "nccl_trace_rank_0",
                fr_dump([tf.fr_entry("nccl:all_reduce", [[1024]], 1) | {"input_sizes": shared_lists(2, 60)}]),
            )
        ),
        "nests deeper than 32 lists",
    ),
    "pickle asking for 2^62 bytes": Case(
        lambda d: [str(_write(d / "nccl_trace_rank_0", b"\x80\x04\x8e" + (2**62).to_bytes(8, "little")))],
        "asks for more memory than this machine has",
    ),
    "gzip bomb (Kineto)": Case(_kineto_bomb, "inflates to more than 1M (the bytes budget)"),
    "gzip bomb (Flight Recorder pickle)": Case(_fr_pickle_bomb, "inflates to more than 1M (the pickle-bytes budget)"),
    "gzip bomb (Flight Recorder JSON)": Case(_fr_json_bomb, "inflates to more than 1M (the bytes budget)"),
    "gzip bomb of whitespace": Case(_whitespace_bomb, "inflates to more than 2M"),
    "a string longer than an event may be": Case(_long_string, "is longer than 256K (the event-bytes budget)"),
    "a damaged event": Case(_damaged, "damaged at byte"),
    "more events than the budget": Case(
        lambda d: [str(gz(d / "many.json.gz", kineto_parts(compute_lines(2000)))), "--trace-limit", "events=1000"],
        "holds more than 1,000 events (the events budget)",
    ),
    "more collectives than the budget": Case(
        lambda d: [
            str(kineto_events(d / "rank0.json", [tf.comm("allreduce", 8, i) for i in range(20)])),
            "--trace-limit",
            "collectives=10",
        ],
        "holds more than 10 collectives",
    ),
    "empty path": Case(lambda d: [""], "an empty path"),
    "FIFO": Case(_fifo, "a FIFO (named pipe), not a trace file"),
    "device": Case(lambda d: ["/dev/zero"], "a character device, not a trace file"),
    "symlink loop": Case(_symlink_loop, "a symbolic link loop"),
    "two jobs (same world and backend, 4x the sizes)": Case(_two_jobs, "traces of two different jobs"),
    "every collective unmapped (unknown names)": Case(_all_unmapped, "none of its 2 collective(s) can be replayed"),
    "--trace-limit malformed": Case(
        lambda d: [str(one_allreduce(d / "rank0.json")), "--trace-limit", "bites=1G"], "give NAME=VALUE"
    ),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path

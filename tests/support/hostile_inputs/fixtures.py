"""The files the hostile cases are made of, generated where a case asks (never committed): the small
traces they start from, the real DDP Kineto trace of tests/data/traces, and bombs of any size,
written in seconds and a few MB whatever size they inflate to."""

from __future__ import annotations

import json
import pickle
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.nccl_tests_json import nccl_tests_file
from tests.support.trace_files import comm, compute, flight_recorder, fr_entry, kineto, step

BLOCK = 1 << 24  # bytes of a bomb's fill compressed once and written again and again
_FILL = "@@FILL@@"  # where a bomb's fill goes in the document it is cut from


def write_repeated(path: Path, head: bytes, unit: bytes, count: int, tail: bytes, *, gz: bool = True) -> Path:
    """head + unit * count + tail, gzip-compressed when gz, written without ever holding the fill.

    Deflate after Z_FULL_FLUSH forgets what came before, so one compressed block of units is written
    as many times as needed: an 8 GiB bomb is 8 MB written in a few seconds (the CRC is still computed
    over every byte, so the file is a valid gzip stream that any reader inflates to the end)."""
    block = unit * max(1, BLOCK // len(unit))
    full, rest = divmod(count * len(unit), len(block))
    with path.open("wb") as f:
        if not gz:
            f.write(head)
            for _ in range(full):
                f.write(block)
            f.write(block[:rest] + tail)
            return path
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: the gzip frame is written here
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        crc = zlib.crc32(head)
        f.write(deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH))
        once = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
        for _ in range(full):
            f.write(once)
            crc = zlib.crc32(block, crc)
        end = block[:rest] + tail
        f.write(deflate.compress(end) + deflate.flush(zlib.Z_FINISH))
        crc = zlib.crc32(end, crc)
        total = len(head) + full * len(block) + len(end)
        f.write(struct.pack("<II", crc, total & 0xFFFFFFFF))
    return path


def cut_at_fill(text: bytes, fill: bytes) -> tuple[bytes, bytes]:
    """The document's bytes before and after its one placeholder `fill`."""
    head, found, tail = text.partition(fill)
    assert found, "the placeholder is missing"
    return head, tail


def out(folder: Path, _size: int = 0) -> None:
    """An empty out/, where a case's command writes."""
    (folder / "out").mkdir()


# -- traces ------------------------------------------------------------------------------------------


def small_trace(path: Path, *, rank: int = 0, scale: int = 1, **args: Any) -> Path:
    """A Kineto trace of one 2-rank step (an all_reduce of 1024 floats, a broadcast of 256) that a
    2-rank Gloo replay finishes in seconds; args override both collectives' record_param_comms fields."""
    events = [step(1, 0, 100), comm("allreduce", 1024 * scale, 10, ext=1, **args)]
    events.append(comm("broadcast", 256 * scale, 20, ext=2, **args))
    return kineto(path, events, rank=rank)


def one_collective(path: Path, name: str, elems: Any = 1024, **args: Any) -> Path:
    """A Kineto trace whose one collective is `name` of `elems` elements, with args overriding its fields."""
    return kineto(path, [step(1, 0, 100), comm(name, elems, 10, ext=1, **args)])


def timed_trace(path: Path, kernel_dur: Any) -> Path:
    """small_trace's all_reduce with its NCCL kernel, whose recorded `dur` (µs) is kernel_dur."""
    kernel = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7}
    kernel |= {"ts": 12, "dur": kernel_dur, "args": {"External id": 1}}
    return kineto(path, [step(1, 0, 100), comm("allreduce", 1024, 10, ext=1), kernel])


def edited_json(path: Path, edit: Callable[[dict[str, Any]], object], source: Path | None = None) -> Path:
    """A JSON trace (path itself, or source) rewritten at path after edit(document) changed it in place."""
    document = json.loads((source or path).read_text())
    edit(document)
    path.write_text(json.dumps(document))
    return path


def prefixed_trace(path: Path, prefix: str) -> Path:
    """small_trace with prefix before its text (a BOM: as an editor on Windows saves a file)."""
    path.write_text(prefix + small_trace(path).read_text(encoding="utf-8"), encoding="utf-8")
    return path


def fr_dump(path: Path, *, ranks: str = "[0, 1]", **entry: Any) -> Path:
    """A Flight Recorder pickle of two all_reduces (1024 and 256 floats), entry fields overridden."""
    entries = [{**fr_entry("nccl:all_reduce", [[1024]], 1), **entry}, fr_entry("nccl:all_reduce", [[256]], 2)]
    return flight_recorder(path, entries, ranks=ranks)


def fr_document(**fields: Any) -> dict[str, Any]:
    """A Flight Recorder dump's dict (two all_reduces of 1024 and 256 floats on ranks 0 and 1), with
    fields replaced: entries=5, pg_config=[...] and the like."""
    entries = [fr_entry("nccl:all_reduce", [[1024]], 1), fr_entry("nccl:all_reduce", [[256]], 2)]
    dump = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": 2}},
        "comm_lib_version": "2.21.5",
        "entries": entries,
    }
    return {**dump, **fields}


def fr_pickle(path: Path, dump: dict[str, Any]) -> Path:
    path.write_bytes(pickle.dumps(dump, protocol=2))
    return path


def with_frames(dump: dict[str, Any], name: str) -> dict[str, Any]:
    """The dump with a stack frame named `name` on its first entry (where a dump keeps Python frames)."""
    first = {**dump["entries"][0], "frames": [{"name": name, "filename": "train.py", "line": 1}]}
    return {**dump, "entries": [first, *dump["entries"][1:]]}


# -- bombs -------------------------------------------------------------------------------------------


def fr_pickle_bomb(path: Path, size: int) -> Path:
    """A gzipped Flight Recorder pickle whose one frame name is `size` bytes ('a' x size): a valid
    dump of two all_reduces, 1/1000 of its size on disk. Protocol 2 (BINUNICODE): size < 4 GiB."""
    marker = _FILL.encode()
    data = pickle.dumps(with_frames(fr_document(), _FILL), protocol=2)
    head, tail = cut_at_fill(data, b"X" + struct.pack("<I", len(marker)) + marker)
    return write_repeated(path, head + b"X" + struct.pack("<I", size), b"a", size, tail)


def fr_json_bomb(path: Path, size: int) -> Path:
    """fr_pickle_bomb's dump as JSON (`_dump_fr_trace_json`), gzipped."""
    head, tail = cut_at_fill(json.dumps(with_frames(fr_document(), _FILL)).encode(), _FILL.encode())
    return write_repeated(path, head, b"a", size, tail)


def kineto_cut(path: Path, marker: Any, cut: str, at: int = 1) -> tuple[bytes, bytes]:
    """small_trace's JSON with marker inserted as the at-th of its events, cut around the text `cut`."""
    document = json.loads(small_trace(path).read_text())
    document["traceEvents"].insert(at, marker)
    return cut_at_fill(json.dumps(document).encode(), cut.encode())


_ELEMENT = f'"{_FILL}", '  # the marker as an element of traceEvents, its comma included


def long_string_trace(path: Path, size: int) -> Path:
    """small_trace with a CPU op whose name is `size` characters long (gzipped)."""
    head, tail = kineto_cut(path, {**compute(50), "name": _FILL}, _FILL)
    return write_repeated(path, head, b"x", size, tail)


def whitespace_trace(path: Path, size: int) -> Path:
    """small_trace with `size` spaces between two of its events, inside traceEvents (gzipped)."""
    head, tail = kineto_cut(path, _FILL, _ELEMENT, at=2)
    return write_repeated(path, head, b" ", size, tail)


DAMAGED_EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm" "pid": 1, "tid": 1, "ts": 4, "dur": 3}, '


def damaged_trace(path: Path, size: int) -> Path:
    """A plain Kineto trace of about `size` bytes: small_trace's events, then one event damaged (a
    comma lost), then CPU ops up to the size, as a disk error or a cut copy leaves one."""
    head, tail = kineto_cut(path, _FILL, _ELEMENT)
    unit = json.dumps(compute(60)).encode() + b", "
    return write_repeated(path, head + DAMAGED_EVENT, unit, size // len(unit), tail, gz=False)


def shared_lists(depth: int) -> list[Any]:
    """A list of two references to one list, `depth` times: 2^depth leaves, a few bytes pickled."""
    tree: list[Any] = [1]
    for _ in range(depth):
        tree = [tree, tree]
    return tree


def replaced(path: Path, old: str, new: str) -> Path:
    """The file with every `old` replaced by new: JSON that json.dumps cannot write (1e400, deep nesting)."""
    text = path.read_text()
    assert old in text, f"no {old!r} in {path}"
    path.write_text(text.replace(old, new))
    return path


def nccl_tests_edited(path: Path, edit: Callable[[dict[str, Any]], object], *, per_iter: bool = True) -> Path:
    """An nccl-tests -J file (all_gather_perf on 2 hosts x 2 GPUs, 4 sizes) after edit(document)."""
    return edited_json(nccl_tests_file(path, per_iter=per_iter), edit)

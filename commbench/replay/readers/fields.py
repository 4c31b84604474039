"""What the formats share: dtype names, element counts from recorded shapes, the lists Kineto cuts at
30 entries, and the dispatcher ops (`c10d::allreduce_`...) that stand for a collective where no
`record_param_comms` was written (Gloo and other backends without it)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# c10's ScalarType names (record_param_comms "dtype"), C++ type names (Kineto's "Input type", ET's
# Tensor(...)) and torch's own: all onto torch's name without the prefix.
_DTYPES = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "c10::half": "float16",
    "bfloat16": "bfloat16",
    "c10::bfloat16": "bfloat16",
    "long": "int64",
    "long int": "int64",
    "int64": "int64",
    "int": "int32",
    "int32": "int32",
    "short": "int16",
    "short int": "int16",
    "int16": "int16",
    "char": "int8",
    "signed char": "int8",
    "int8": "int8",
    "byte": "uint8",
    "unsigned char": "uint8",
    "uint8": "uint8",
    "bool": "bool",
}


def dtype_name(recorded: str) -> str | None:
    """torch's name for a recorded dtype ("Float", "long int", "Tensor(c10::BFloat16)"), None if unknown."""
    text = recorded.strip()
    if match := re.search(r"Tensor\(([^)]*)\)", text):
        text = match.group(1)
    return _DTYPES.get(text.lower())


# Sane bounds, checked before anything is built from a recorded number
MAX_RANKS = 1 << 20  # ranks of a world or group, and a rank's number: no job has more
MAX_ELEMS = 1 << 48  # elements of one collective (a petabyte of float32): no real count is larger
MAX_DEPTH = 32  # nesting of a recorded shape or list (a list of tensors' dims nests 2 deep)
MAX_US = 86_400e6  # a recorded duration over a day is no collective's


class Damaged(ValueError):
    """A field no PyTorch trace holds (a count that is text, a group that lists a rank twice). The
    readers raise it without the file's name; load() adds it: one line, exit code 2."""


def shown(value: Any) -> str:
    """A recorded value as a message shows it: short, and never by walking a container (a pickle's
    lists may share themselves into 2^60 leaves)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return (
            str(value)
            if value.bit_length() <= 64
            else f"a {len(str(value)) if value.bit_length() < 10_000 else 'huge'}-digit number"
        )
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if isinstance(value, list | tuple | dict):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def _whole(value: Any) -> int | None:
    """value as a whole number (7, 7.0, "7"), None where it is none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and 0 < len(text := value.strip()) <= 20 and text.lstrip("-").isdigit():
        return int(text)
    return None


def count(value: Any, field: str) -> int | None:
    """An element count as recorded ("In msg nelems"): None where absent, Damaged unless a whole
    number from 0 to MAX_ELEMS."""
    if value is None:
        return None
    n = _whole(value)
    if n is None or not 0 <= n <= MAX_ELEMS:
        raise Damaged(f"{field} is {shown(value)}, not a count of elements (0 to 2^48)")
    return n


def rank_count(value: Any, field: str) -> int | None:
    """A world or group size as recorded: None where absent (or 0), Damaged unless 1 to MAX_RANKS."""
    if value is None:
        return None
    n = _whole(value)
    if n is None or not 0 <= n <= MAX_RANKS:
        raise Damaged(f"{field} is {shown(value)}, not a number of ranks (1 to 2^20)")
    return n or None


def rank_number(value: Any, field: str, world: int | None) -> int | None:
    """A rank as recorded (distributedInfo.rank): None where absent, Damaged unless 0 to the world's last."""
    if value is None:
        return None
    n = _whole(value)
    if n is None or not 0 <= n < (world or MAX_RANKS):
        of = f"a world of {world}" if world else "2^20 ranks"
        raise Damaged(f"{field} is {shown(value)}, not a rank of {of}")
    return n


def key(value: Any) -> Any:
    """An id as a dict key (External id, correlation, a flow's id): None where it is no scalar (a
    tuple is the readers' own key)."""
    return value if value is None or isinstance(value, int | float | str | tuple) else None


def strided_ranks(start: int, stride: int, size: int, field: str) -> tuple[int, ...]:
    """The ranks start, start + stride, ... (size of them), once they are known to be sane ranks."""
    if start < 0 or stride <= 0 or start + (size - 1) * stride >= MAX_RANKS:
        raise Damaged(f"{field}: ranks from {shown(start)} by {shown(stride)} are no ranks (0 to 2^20)")
    return tuple(range(start, start + size * stride, stride))


class Durations:
    """The recorded durations of one trace, read alike: a value that is not a number is damage; one
    that is NaN, negative or over a day is dropped (the collective keeps no recorded time) and
    counted in a note, never shown as "nan ms" or 300 digits."""

    def __init__(self) -> None:
        self.dropped = 0

    def us(self, value: Any, field: str, scale: float = 1.0) -> float | None:
        """The duration in µs (value times scale), None where absent or dropped."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Damaged(f"{field} is {shown(value)}, not a duration")
        us = float(value) * scale if isinstance(value, float) or abs(value) < 1 << 60 else math.inf
        if not 0 <= us <= MAX_US:  # NaN fails both
            self.dropped += 1
            return None
        return us

    def note(self) -> list[str]:
        if not self.dropped:
            return []
        return [f"{self.dropped} recorded duration(s) dropped: NaN, negative or over a day (no collective takes that)"]


def time_point(value: Any, field: str) -> float:
    """A recorded timestamp (Kineto's ts, in µs): 0 where absent, Damaged unless a finite number."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Damaged(f"{field} is {shown(value)}, not a time")
    return float(value)


def walk(value: Any, field: str, into: Callable[[list | tuple], bool] = lambda _: True) -> Iterator[Any]:
    """value and what it holds, depth first, without recursion and without copying a list: the
    lists `into` accepts are entered, to MAX_DEPTH (deeper is damage)."""
    stack = [iter((value,))]
    while stack:
        for node in stack[-1]:
            yield node
            if isinstance(node, list | tuple) and node and into(node):
                if len(stack) > MAX_DEPTH:
                    raise Damaged(f"{field} nests deeper than {MAX_DEPTH} lists")
                stack.append(iter(node))
                break
        else:
            stack.pop()


def elements(values: Iterable[Any], field: str, most: int) -> int:
    """The list elements the values hold, each list counted as often as it is reached (a pickle's
    lists may be shared), counted up to just past `most`: linear in that count, not in the
    expansion. Damaged where lists nest deeper than MAX_DEPTH."""
    n = 0
    stack = [(v, 0) for v in values if isinstance(v, list | tuple)]
    while stack and n <= most:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise Damaged(f"{field} nests deeper than {MAX_DEPTH} lists")
        n += len(node)
        stack.extend((child, depth + 1) for child in node if isinstance(child, list | tuple))
    return n


def _is_tensor(node: Any) -> bool:
    return isinstance(node, list | tuple) and bool(node) and all(type(d) is int for d in node)


def _product(dims: list[int] | tuple[int, ...], field: str) -> int:
    n = 1
    for d in dims:
        if d < 0:
            raise Damaged(f"{field} holds the dimension {shown(d)}")
        n *= d
        if n > MAX_ELEMS:
            raise Damaged(f"{field} holds a tensor of more than 2^48 elements")
    return n


def tensor_sizes(shape: Any, field: str = "a shape") -> list[int]:
    """The elements of each tensor of a recorded shape: [4, 3] is one tensor, [[4], [3]] a list of
    tensors; [] and what is no list hold none. Damaged where a dimension is not a whole number or
    is negative, the lists nest deeper than MAX_DEPTH, or the total passes MAX_ELEMS."""
    sizes: list[int] = []
    total = 0
    for node in walk(shape, field, lambda node: not _is_tensor(node)):
        if _is_tensor(node):
            sizes.append(_product(node, field))
            total += sizes[-1]
            if total > MAX_ELEMS:
                raise Damaged(f"{field} holds more than 2^48 elements")
        elif node is not shape and not isinstance(node, list | tuple) and type(node) is not int:
            raise Damaged(f"{field} holds {shown(node)}, not a dimension")
    return sizes


def tensor_shapes(shape: Any, field: str = "a shape") -> tuple[tuple[int, ...], ...]:
    """The shape of each tensor a recorded shape holds ([4, 3] one tensor, [[4], [3]] a list of
    them), checked as tensor_sizes checks them."""
    tensor_sizes(shape, field)
    return tuple(tuple(node) for node in walk(shape, field, lambda node: not _is_tensor(node)) if _is_tensor(node))


def numel(shape: Any, field: str = "a shape") -> int:
    """Elements of a recorded shape, its tensors' summed (see tensor_sizes)."""
    return sum(tensor_sizes(shape, field))


def count_tensors(shape: Any, field: str = "a shape") -> int:
    return len(tensor_sizes(shape, field))


_INT = re.compile(r"-?\d+")


def _entry(item: str | int, field: str, largest: int) -> int:
    n = item if isinstance(item, int) else int(item) if len(item) <= 20 else -1
    if not 0 <= n <= largest:
        raise Damaged(f"{field} holds {shown(item)}, out of range (0 to {largest:,})")
    return n


def int_list(recorded: Any, field: str = "a list", largest: int = MAX_ELEMS) -> tuple[tuple[int, ...], bool]:
    """A recorded list of counts ("[1, 2]", [1, 2], nested or not) and whether it was cut (Kineto
    writes the first 29 entries of a longer list, "...", then the last). Damaged where it holds
    more than MAX_RANKS entries, or an entry that is negative, over `largest` or not a number."""
    values: list[int] = []
    cut = False
    for node in walk(recorded, field):
        if isinstance(node, str):
            cut = cut or "..." in node
            items: Iterable[str | int] = (m.group() for m in _INT.finditer(node))
        elif type(node) is int:
            items = (node,)
        elif node is None or isinstance(node, list | tuple):
            continue
        else:
            raise Damaged(f"{field} holds {shown(node)}, not a list of whole numbers")
        for item in items:
            values.append(_entry(item, field, largest))
            if len(values) > MAX_RANKS:
                raise Damaged(f"{field} holds more than 2^20 entries")
    return tuple(values), cut


def rank_list(recorded: Any, field: str) -> tuple[tuple[int, ...], bool]:
    """A recorded list of a group's ranks (as int_list), Damaged where a rank is negative, past
    MAX_RANKS or listed twice (torch refuses such a group on every rank)."""
    ranks, cut = int_list(recorded, field, MAX_RANKS - 1)
    if len(set(ranks)) < len(ranks):
        seen: set[int] = set()
        twice = next(r for r in ranks if r in seen or seen.add(r))  # type: ignore[func-returns-value]
        raise Damaged(f"{field} lists rank {twice} twice")
    return ranks, cut


@dataclass(frozen=True)
class DispatcherOp:
    """Where a c10d dispatcher op's arguments sit (positions in its schema, torch 2.x)."""

    name: str  # the collective's name in record_param_comms' words
    inp: int | None  # argument holding the input tensor(s)
    out: int | None  # argument holding the output tensor(s); None: in place (same as inp)
    root: int | None = None  # argument holding the root or peer (a rank of the group)
    splits: tuple[int, int] | None = None  # (output_split_sizes, input_split_sizes)
    annotation: str = ""  # the annotation Gloo records the work under (its time, its dtype), "" for none


_AR, _AG, _A2A = "gloo:all_reduce", "gloo:all_gather", "gloo:all_to_all"
# Gloo reduce-scatters by all-reducing a clone of the whole input: its annotation is gloo:all_reduce
DISPATCHER_OPS = {
    "c10d::allreduce_": DispatcherOp("allreduce", 0, None, annotation=_AR),
    "c10d::allreduce_coalesced_": DispatcherOp("allreduce_coalesced", 0, None, annotation=_AR),
    "c10d::broadcast_": DispatcherOp("broadcast", 0, None, root=2, annotation="gloo:broadcast"),
    "c10d::reduce_": DispatcherOp("reduce", 0, None, root=3, annotation="gloo:reduce"),
    "c10d::allgather_": DispatcherOp("allgather", 1, 0, annotation=_AG),
    "c10d::_allgather_base_": DispatcherOp("_allgather_base", 1, 0, annotation=_AG),
    "c10d::allgather_into_tensor_coalesced_": DispatcherOp("allgather_into_tensor_coalesced", 1, 0, annotation=_AG),
    "c10d::allgather_coalesced_": DispatcherOp("allgather_coalesced", 1, 0, annotation=_AG),
    "c10d::reduce_scatter_": DispatcherOp("reduce_scatter", 1, 0, annotation=_AR),
    "c10d::_reduce_scatter_base_": DispatcherOp("_reduce_scatter_base", 1, 0, annotation=_AR),
    "c10d::reduce_scatter_tensor_coalesced_": DispatcherOp("reduce_scatter_tensor_coalesced", 1, 0, annotation=_AR),
    "c10d::alltoall_": DispatcherOp("alltoall", 1, 0, annotation=_A2A),
    "c10d::alltoall_base_": DispatcherOp("alltoall_base", 1, 0, splits=(3, 4), annotation=_A2A),
    "c10d::gather_": DispatcherOp("gather", 1, 0, root=3, annotation="gloo:gather"),
    "c10d::scatter_": DispatcherOp("scatter", 1, 0, root=3, annotation="gloo:scatter"),
    "c10d::send": DispatcherOp("send", 0, None, root=2, annotation="gloo:send"),
    "c10d::recv_": DispatcherOp("recv", 0, None, root=2, annotation="gloo:recv"),
    "c10d::barrier": DispatcherOp("barrier", None, None, annotation="gloo:barrier"),
    "c10d::monitored_barrier_": DispatcherOp("barrier", None, None),
}

NO_PROCESS_GROUP = "process group not recorded by the dispatcher op (the default group assumed)"


def arg(values: Any, index: int | None) -> Any:
    """The argument at index of a recorded list of them, None where there is none."""
    if not isinstance(values, list | tuple) or index is None or index >= len(values):
        return None
    return values[index]


def as_int(value: Any) -> int | None:
    """A whole number where the value holds one (an id, a seq), else None: never an exception."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None

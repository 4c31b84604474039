"""What the formats share: dtype names, element counts from recorded shapes, the lists Kineto cuts at
30 entries, and the dispatcher ops (`c10d::allreduce_`...) that stand for a collective where no
`record_param_comms` was written (Gloo and other backends without it)."""

from __future__ import annotations

import math
import re
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


def numel(shape: Any) -> int:
    """Elements of a recorded shape: [4, 3] is one tensor, [[4], [3]] a list of tensors (summed)."""
    if not isinstance(shape, list):
        return 0
    if all(isinstance(d, int) for d in shape):
        return math.prod(shape) if shape else 0
    return sum(numel(s) for s in shape)


def count_tensors(shape: Any) -> int:
    if not isinstance(shape, list) or not shape:
        return 0
    if all(isinstance(d, int) for d in shape):
        return 1
    return sum(count_tensors(s) for s in shape)


def int_list(recorded: Any) -> tuple[tuple[int, ...], bool]:
    """A recorded list of ints ("[1, 2]", [1, 2]) and whether it was cut (Kineto writes the first 29
    entries of a longer list, "...", then the last)."""
    text = " ".join(str(x) for x in recorded) if isinstance(recorded, list) else str(recorded or "")
    return tuple(int(n) for n in re.findall(r"-?\d+", text)), "..." in text


@dataclass(frozen=True)
class DispatcherOp:
    """Where a c10d dispatcher op's arguments sit (positions in its schema, torch 2.x)."""

    name: str  # the collective's name in record_param_comms' words
    inp: int | None  # argument holding the input tensor(s)
    out: int | None  # argument holding the output tensor(s); None: in place (same as inp)
    root: int | None = None  # argument holding the root or peer (a rank of the group)
    splits: tuple[int, int] | None = None  # (output_split_sizes, input_split_sizes)


DISPATCHER_OPS = {
    "c10d::allreduce_": DispatcherOp("allreduce", 0, None),
    "c10d::allreduce_coalesced_": DispatcherOp("allreduce_coalesced", 0, None),
    "c10d::broadcast_": DispatcherOp("broadcast", 0, None, root=2),
    "c10d::reduce_": DispatcherOp("reduce", 0, None, root=3),
    "c10d::allgather_": DispatcherOp("allgather", 1, 0),
    "c10d::_allgather_base_": DispatcherOp("_allgather_base", 1, 0),
    "c10d::allgather_into_tensor_coalesced_": DispatcherOp("allgather_into_tensor_coalesced", 1, 0),
    "c10d::allgather_coalesced_": DispatcherOp("allgather_coalesced", 1, 0),
    "c10d::reduce_scatter_": DispatcherOp("reduce_scatter", 1, 0),
    "c10d::_reduce_scatter_base_": DispatcherOp("_reduce_scatter_base", 1, 0),
    "c10d::reduce_scatter_tensor_coalesced_": DispatcherOp("reduce_scatter_tensor_coalesced", 1, 0),
    "c10d::alltoall_": DispatcherOp("alltoall", 1, 0),
    "c10d::alltoall_base_": DispatcherOp("alltoall_base", 1, 0, splits=(3, 4)),
    "c10d::gather_": DispatcherOp("gather", 1, 0, root=3),
    "c10d::scatter_": DispatcherOp("scatter", 1, 0, root=3),
    "c10d::send": DispatcherOp("send", 0, None, root=2),
    "c10d::recv_": DispatcherOp("recv", 0, None, root=2),
    "c10d::barrier": DispatcherOp("barrier", None, None),
    "c10d::monitored_barrier_": DispatcherOp("barrier", None, None),
}

NO_PROCESS_GROUP = "process group not recorded by the dispatcher op (the default group assumed)"


def arg(values: list[Any], index: int | None) -> Any:
    return values[index] if index is not None and index < len(values) else None


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

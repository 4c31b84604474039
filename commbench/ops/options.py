"""Op-specific options: parsed and validated in each op's __init__, checked once before ranks spawn.

Every op receives the same SweepConfig.op_options dict (strings, as typed) and reads only the
keys it understands, so one `--tensors` can serve several ops with one documented meaning.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from commbench.errors import UserError
from commbench.workload import parse_tensors

TENSORS = "tensors"
BUCKET_CAP_MB = "bucket_cap_mb"
MESSAGE_SIZE = "message_size"
VARIANT = "variant"
# sync_bn's input shape: channel counts to sweep, samples per rank, height = width.
CHANNELS = "channels"
BATCH = "batch"
SPATIAL = "spatial"


def split_list(text: str) -> list[str]:
    return [item.strip() for item in str(text).split(",") if item.strip()]


def tensors_option(options: Mapping[str, str], default: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The `--tensors` element counts, or default when the option was not given."""
    return parse_tensors(options[TENSORS]) if options.get(TENSORS) else default


def parse_caps_mb(text: str) -> tuple[float, ...]:
    """'1,5,25' -> (1.0, 5.0, 25.0); 0 disables bucketing (REFERENCE.md section 5), negatives are refused."""
    caps: list[float] = []
    for item in split_list(text) or [str(text)]:
        try:
            cap = float(item)
        except ValueError:
            raise UserError(f"--bucket-cap-mb {item!r} is not a number: give megabytes such as 1,5,25,100 (0 disables bucketing)") from None
        if not cap >= 0 or cap == float("inf"):
            raise UserError(f"--bucket-cap-mb {item!r} must be a finite number of megabytes >= 0 (0 disables bucketing)")
        caps.append(cap)
    return tuple(dict.fromkeys(caps))


def format_mb(cap: float) -> str:
    return f"{cap:g}"


def choose_variants(offered: Sequence[str], options: Mapping[str, str]) -> tuple[str, ...]:
    """The offered variants that `--variant` names; all of them when it names none of this op's."""
    wanted = split_list(options.get(VARIANT, ""))
    chosen = tuple(v for v in offered if v in wanted)
    return chosen or tuple(offered)


def validate_op_options(names: Sequence[str], options: Mapping[str, str]) -> None:
    """Instantiate every selected op once, so bad options fail with one line before ranks spawn.

    A `--variant` name must belong to at least one selected op; the error lists the valid ones.
    """
    from commbench.ops import load_op

    plain = {k: v for k, v in options.items() if k != VARIANT}
    offered = {name: load_op(name)(plain).variants for name in names}
    for name in names:
        load_op(name)(options)
    known = {v for variants in offered.values() for v in variants}
    unknown = [v for v in split_list(options.get(VARIANT, "")) if v not in known]
    if unknown:
        valid = "; ".join(f"{name}: {', '.join(variants)}" for name, variants in offered.items())
        raise UserError(f"unknown variant {unknown[0]!r} for the selected ops; valid variants: {valid}")

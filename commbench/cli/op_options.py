"""The op-specific options of `commbench sweep`, gathered into SweepConfig.op_options.

Each op reads the keys it understands and ignores the rest; one name keeps one meaning across ops.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from commbench.ops.options import BATCH, BUCKET_CAP_MB, CHANNELS, MESSAGE_SIZE, SPATIAL, TENSORS, VARIANT
from commbench.workload import DEFAULT_GRADIENTS_TEXT, TENSORS_SYNTAX

F = Callable[..., Any]

_FLAGS = (
    click.option("--tensors", default=None, help=(
        f"The tensors each rank contributes, in elements: {TENSORS_SYNTAX} (K, M, G are 1024 powers). "
        "grouped_all_gather gathers them together (default: SyncBN's 1,C,C with C swept from the sizes); "
        f"bucketed_reduce_scatter and bucketed_all_reduce reduce them as one gradient step (default: {DEFAULT_GRADIENTS_TEXT}).")),
    click.option("--bucket-cap-mb", default=None, help=(
        "bucketed_reduce_scatter: bucket caps in MB (2**20 bytes), one variant bucketed_<cap>MB each; 0 disables bucketing. "
        "[default: 1,5,25,100]")),
    click.option("--message-size", default=None, help=(
        "bucketed_all_reduce: minimum elements per all-reduce bucket (apex's message_size), one variant bucketed_<M> each, "
        "e.g. 256K,1e7. [default: 256K,1M,1e7]")),
    click.option("--channels", default=None, help="sync_bn: channel counts C to sweep, comma-separated. [default: 32,256,2048]"),
    click.option("--batch", default=None, help="sync_bn: samples per rank N. [default: 4]"),
    click.option("--spatial", default=None, help="sync_bn: height = width of the (N, C, H, W) input. [default: 8]"),
    click.option("--variant", "variants", multiple=True, help=(
        "Run only these variants (repeatable or comma-separated) of each op that has any of them; an op with "
        "none of them runs all of its own. Names are in `commbench list`.")),
)


def op_option_flags(fn: F) -> F:
    """Add --tensors, --bucket-cap-mb, --message-size, --channels, --batch, --spatial and --variant to a command."""
    for decorator in reversed(_FLAGS):
        fn = decorator(fn)
    return fn


def pop_op_options(options: dict[str, Any]) -> dict[str, str]:
    """Take the op-specific values out of a command's keyword arguments; only those the user gave."""
    given = {
        TENSORS: options.pop("tensors", None),
        BUCKET_CAP_MB: options.pop("bucket_cap_mb", None),
        MESSAGE_SIZE: options.pop("message_size", None),
        VARIANT: ",".join(options.pop("variants", ()) or ()),
        CHANNELS: options.pop("channels", None),
        BATCH: options.pop("batch", None),
        SPATIAL: options.pop("spatial", None),
    }
    return {key: str(value) for key, value in given.items() if value}

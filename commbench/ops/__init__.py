"""The op registry: every module in this package that defines an Op with a spec is an op.

Adding an op is adding one module (nccl-tests' contract); nothing else lists it. A user's own op
is named as ``module:Class`` on the command line and imported the same way. Op modules import
torch lazily, so discovering them (for `commbench list`, `--help` and option checks) is cheap.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from commbench.errors import UserError, did_you_mean
from commbench.ops.base import Op
from commbench.ops.options import OpOption
from commbench.ops.spec import OpSpec

if TYPE_CHECKING:
    import torch

    from commbench.backends.base import Backend


@functools.cache
def registry() -> dict[str, type[Op]]:
    """Every op of this package by name, in module order."""
    found: dict[str, type[Op]] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Op)
                and "spec" in value.__dict__
                and value.__module__ == module.__name__
            ):
                if value.spec.name in found:
                    raise RuntimeError(f"two ops are named {value.spec.name!r}: {found[value.spec.name]} and {value}")
                found[value.spec.name] = value
    return found


def specs() -> list[OpSpec]:
    return [cls.spec for cls in registry().values()]


def spec_of(name: str) -> OpSpec | None:
    """The spec of a registered op, or None (a plugin op, or a name from another version's CSV)."""
    cls = registry().get(name)
    return cls.spec if cls is not None else None


def op_options() -> list[OpOption]:
    """Every option the registered ops read, once each; one flag must keep one meaning."""
    by_flag: dict[str, OpOption] = {}
    for spec in specs():
        for option in spec.options:
            if by_flag.setdefault(option.flag, option) != option:
                raise RuntimeError(
                    f"{spec.name} declares {option.flag} differently from another op: share one OpOption"
                )
    return list(by_flag.values())


def load_op(name: str) -> type[Op]:
    """An op class by registered name or 'module:Class'; unknown names list the valid ones."""
    if name in registry():
        return registry()[name]
    if ":" not in name:
        raise UserError(
            f"unknown op {name!r}{did_you_mean(name, registry())}; valid ops: {', '.join(registry())} "
            "(or module:Class for your own)"
        )
    module_name, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load op {name!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Op)):
        raise UserError(f"cannot load op {name!r}: it is not a commbench.ops.base.Op subclass")
    return cls


def choose_variants(offered: Sequence[str], wanted: Sequence[str]) -> tuple[str, ...]:
    """The offered variants that --variant names; all of them when it names none of this op's."""
    chosen = tuple(v for v in offered if v in wanted)
    return chosen or tuple(offered)


def build_ops(names: Sequence[str], options: Mapping[str, Any], variants: Sequence[str]) -> list[Op]:
    """Instantiate the selected ops, so bad options fail with one line before any rank starts.

    A --variant name must belong to at least one selected op; the error lists the valid ones.
    """
    ops = [load_op(name)(options) for name in names]
    known = {v for op in ops for v in op.variants}
    unknown = [v for v in variants if v not in known]
    if unknown:
        valid = "; ".join(f"{op.name}: {', '.join(op.variants)}" for op in ops)
        hint = did_you_mean(unknown[0], known)
        raise UserError(f"unknown variant {unknown[0]!r}{hint} for the selected ops; valid variants: {valid}")
    return ops


def world_error(ops: Sequence[Op], world_size: int) -> str | None:
    """The first selected op's reason it cannot run on world_size ranks (`--root 4` on 4 ranks), or None."""
    return next((e for op in ops if (e := op.world_error(world_size)) is not None), None)


def unavailable(op: Op, variant: str, backend: Backend, dtype: torch.dtype) -> str | None:
    """Why this case cannot run (the transport, the op's dtype, the variant), or None when it can."""
    return backend.dtype_unavailable(dtype) or op.dtype_unavailable(dtype) or op.unavailable(variant, backend)

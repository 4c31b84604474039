"""torch, imported on first use.

Op modules are imported to list, describe and validate ops (`commbench list`, `--help`, option
checks before ranks spawn), which must not pay for importing torch. They write
``from commbench.lazy import torch`` and use ``torch.*`` inside methods as usual.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any


def resolve(path: str) -> Any:
    """The object a `module:name` path names, its module imported now (a backend's class, a
    transport's spawner, a rank program): the name travels as text, so nothing imports it before it runs."""
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)


class LazyModule:
    """A stand-in for a module that imports it at the first attribute access."""

    def __init__(self, name: str) -> None:
        self.__module_name = name

    def __getattr__(self, attr: str) -> Any:
        module: ModuleType = importlib.import_module(self.__module_name)
        # Later lookups find the module's attributes here and skip __getattr__; attributes the
        # module gains afterwards (submodules imported later) still fall through to it.
        self.__dict__.update(vars(module))
        return getattr(module, attr)


if TYPE_CHECKING:
    import torch
else:
    torch = LazyModule("torch")

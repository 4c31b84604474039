"""SyncBatchNorm with the communication strategy as a parameter (PyTorch, apex, Horovod, ...).

`commbench.syncbn.SyncBatchNorm(num_features, eps=1e-5, momentum=0.1, affine=True,
track_running_stats=True, strategy="torch", process_group=None)`. Names are imported on first
use, so the CLI can read the strategy list (and the report helpers) without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# The same names, in order, as commbench.syncbn.strategies.STRATEGIES (a test keeps them equal).
STRATEGY_NAMES = ("torch", "torch_legacy", "apex", "horovod", "horovod_grouped", "allreduce")
# The layers the sync_bn op also measures where they can run (CUDA): torch.nn.SyncBatchNorm, hvd.SyncBatchNorm.
NATIVE_VARIANTS = ("native_torch", "native_horovod")

_LAZY = {
    "SyncBatchNorm": "commbench.syncbn.module",
    "SyncBatchNormFunction": "commbench.syncbn.function",
    "STRATEGIES": "commbench.syncbn.strategies",
    "Communicator": "commbench.syncbn.comm",
    "ProcessGroupComm": "commbench.syncbn.comm",
}

__all__ = ["STRATEGY_NAMES", "NATIVE_VARIANTS", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

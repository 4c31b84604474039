"""What each torch's Gloo has, known before a call: the table against the header this torch ships,
and the all_to_all list case an `unavailable` row where the table says so (torch 2.11)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from commbench.backends.gloo import SINCE_TORCH, GlooBackend, torch_lacks
from commbench.ops.all_to_all import AllToAll

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api

HEADER = Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"


def test_the_table_names_the_first_torch_with_the_method():
    assert "torch 2.11.0+cu130's Gloo has no alltoall" in torch_lacks("all_to_all_list", "2.11.0+cu130")
    assert torch_lacks("all_to_all_list", "2.1.2") is not None
    assert torch_lacks("all_to_all_list", "2.12.0") is None and torch_lacks("all_to_all_list", "2.13.0+cpu") is None
    assert torch_lacks("all_to_all_single", "2.11.0") is None  # alltoall_base: every torch


@pytest.mark.skipif(not HEADER.exists(), reason="this torch ships no C++ headers")
@pytest.mark.parametrize("collective", sorted(SINCE_TORCH))
def test_the_table_agrees_with_this_torchs_process_group_gloo(collective):
    # Gloo's own declaration, as the Backend base's default refuses what a backend does not override.
    _, method = SINCE_TORCH[collective]
    declared = f"c10::intrusive_ptr<Work> {method}(" in HEADER.read_text()
    assert declared == (torch_lacks(collective) is None), (torch.__version__, declared)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_list_all_to_all_is_unavailable_exactly_where_torch_lacks_it(device):
    reason = AllToAll().unavailable("list", GlooBackend(device))
    assert reason == torch_lacks("all_to_all_list")
    assert AllToAll().unavailable("single", GlooBackend(device)) is None

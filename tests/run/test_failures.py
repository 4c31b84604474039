"""How a transport's error is read: c10d's refusal of a method a backend lacks is a refusal, and a
diagnosis that finds no rank at fault says what failed instead of calling every failure a stall."""

from __future__ import annotations

import pytest

from commbench.run.failures import first_sentence, refusal
from commbench.run.heartbeat import ALL_ALIVE, because

# Depends on torch's API: CI runs it again on the oldest torch it tests (.ci/run, -m torch_api).
pytestmark = pytest.mark.torch_api

# torch 2.11's c10d Backend base, for alltoall on a ProcessGroupGloo that does not override it.
C10D = "Backend gloo does not support alltoall"


def test_c10ds_refusal_of_a_missing_method_is_a_refusal():
    assert refusal(RuntimeError(C10D))
    assert refusal(RuntimeError("[../gloo/x.cc:12] allgather: only supports CPU tensors. Use nccl"))
    assert not refusal(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1"))
    assert first_sentence(RuntimeError(C10D)) == C10D


def test_the_diagnosis_names_what_failed_when_no_rank_is_at_fault():
    assert because(ALL_ALIVE, "the transport refused the call") == (
        "every rank is alive and issued the same collectives (the transport refused the call, not a missing rank)"
    )
    assert "stall" not in because(ALL_ALIVE, "the transport refused the call")
    behind = "rank 1 is behind: it issued 3 collectives, the others 4"
    assert because(behind, "a transport stall") == behind
    assert because("", "a transport stall") == ""  # the store could not tell: nothing to add

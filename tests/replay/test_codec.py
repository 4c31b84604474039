"""A Plan travels to the ranks as JSON and comes back equal."""

from __future__ import annotations

import dataclasses
import json

from commbench.replay.codec import plan_from_dict, plan_to_dict
from commbench.replay.record import Call
from tests.replay.plans import fsdp_like, plan_of, tensor_parallel


def test_plans_round_trip_through_json() -> None:
    for plan in (fsdp_like(), tensor_parallel()):
        assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan


def test_each_distinct_call_is_sent_once() -> None:
    data = plan_to_dict(fsdp_like())
    assert len(data["calls"]) == 5 and data["sequence"] == [0, 1, 1, 2, 3, 4]


def test_per_step_sequences_communicators_and_transfers_round_trip() -> None:
    one = Call("sendrecv", "oneway", "float32", 8, 8, (0, 1), src=1, dst=0, group="1")
    other = dataclasses.replace(one, in_elems=4, out_elems=4)
    plan = dataclasses.replace(
        plan_of([one]), counts=((one, 0.5), (other, 0.5)), step_sequences=((one,), (other,)), steps=2
    )
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan

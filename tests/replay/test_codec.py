"""A Plan travels to the ranks as JSON and comes back equal."""

from __future__ import annotations

import json

from commbench.replay.codec import plan_from_dict, plan_to_dict
from tests.replay.plans import fsdp_like, tensor_parallel


def test_plans_round_trip_through_json() -> None:
    for plan in (fsdp_like(), tensor_parallel()):
        assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan


def test_each_distinct_call_is_sent_once() -> None:
    data = plan_to_dict(fsdp_like())
    assert len(data["calls"]) == 5 and data["sequence"] == [0, 1, 1, 2, 3, 4]

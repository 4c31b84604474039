"""A replay's fingerprint holds its traces' digest; a sweep's is what it always was."""

from __future__ import annotations

from commbench.provenance import fingerprint, layout

HOST = {"host": "a", "torch": "2.13.0", "ranks": 2}


def test_the_workload_digest_splits_replays_of_different_jobs_from_each_other_and_from_sweeps() -> None:
    def of(workload: str) -> str:
        return fingerprint(layout("gloo", 2, ["a", "a"], "world", "blocking", 8, "cpu", workload), [HOST])

    sweep = fingerprint(layout("gloo", 2, ["a", "a"], "world", "blocking", 8, "cpu"), [HOST])
    assert of("") == sweep
    assert of("digest-a") == of("digest-a") != of("digest-b")
    assert sweep not in (of("digest-a"), of("digest-b"))
    # The hash of a sweep's layout is the one earlier versions wrote, so histories keep matching.
    assert "workload" not in layout("gloo", 2, ["a"], "world", "blocking", 8, "cpu")

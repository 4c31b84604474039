"""Every hostile or broken trace of issue 44 through `commbench replay`: one line, exit code 2, before
any rank starts (tests/support/hostile_traces.py writes them, small, in the shapes that broke the
readers); and the odd but genuine ones read as they should."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.errors import UserError
from commbench.replay.load import load
from commbench.replay.readers.limits import Limits, parse_limits
from tests.support import hostile_traces as ht
from tests.support import trace_files as tf
from tests.support.errors import assert_one_line_error
from tests.support.hostile_traces import REFUSED


@pytest.fixture
def no_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(*_: object, **__: object) -> None:
        raise AssertionError("a rank was started for a trace that should have been refused")

    monkeypatch.setattr(importlib.import_module("commbench.cli.replay"), "execute", started)


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_hostile_trace_is_one_line_and_exit_2(name: str, tmp_path: Path, no_ranks: None) -> None:
    case = REFUSED[name]
    args = case.build(tmp_path)
    result = CliRunner().invoke(main, ["replay", *args, "--nproc", "2", "--backend", "gloo"])
    assert_one_line_error(result, case.says, exit_code=2)


def test_a_utf8_bom_before_a_json_trace_is_read_past(tmp_path: Path) -> None:
    plain = ht.kineto_events(tmp_path / "rank0.json", [tf.comm("allreduce", 64, 10)])
    with_bom = tmp_path / "bom" / "rank0.json"
    with_bom.parent.mkdir()
    with_bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    packed = ht.gz(tmp_path / "bom.json.gz", [with_bom.read_bytes()])
    expected = load([str(plain)])[0].collectives
    assert load([str(with_bom)])[0].collectives == load([str(packed)])[0].collectives == expected


def test_impossible_recorded_durations_are_dropped_with_a_note(tmp_path: Path) -> None:
    def kernel(ext: int, dur: str) -> str:
        return json.dumps(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclKernel_AllReduce",
                "ts": 11,
                "args": {"External id": ext},
                "dur": ht.PLACEHOLDER,
            }
        ).replace(str(ht.PLACEHOLDER), dur)

    comms = [tf.comm("allreduce", 64 * (i + 1), 10 + i, ext=i + 1) for i in range(4)]
    path = ht.kineto_events(tmp_path / "rank0.json", comms)
    text = path.read_text()
    kernels = ", ".join(kernel(i + 1, dur) for i, dur in enumerate(("NaN", "-150", "1e300", "42.5")))
    path.write_text(text.replace('"traceEvents": [', f'"traceEvents": [{kernels}, '))
    trace = load([str(path)])[0]
    assert [c.recorded_us for c in trace.collectives] == [None, None, None, 42.5]
    assert "3 recorded duration(s) dropped: NaN, negative or over a day (no collective takes that)" in trace.notes
    fr = tf.flight_recorder(tmp_path / "nccl_trace_rank_0", [tf.fr_entry("nccl:all_reduce", [[8]], 1, ms=float("nan"))])
    assert load([str(fr)])[0].collectives[0].recorded_us is None


def test_a_json_dump_is_streamed_whatever_the_order_of_its_keys(tmp_path: Path) -> None:
    """pg_config after the entries (the entries are mapped as they stream by, their groups after)."""
    entries = [{**e, "process_group": ["0", "default_pg"]} for e in ht.allreduce_entries(3)]
    path = tmp_path / "nccl_trace_rank_1.json"
    path.write_text(json.dumps({"entries": entries, "pg_config": {"0": {"name": "0", "ranks": "[0, 1]"}}}))
    trace = load([str(path)])[0]
    assert trace.rank == 1 and [c.group_ranks for c in trace.collectives] == [(0, 1)] * 3
    assert trace.digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_skips_what_is_no_regular_file_and_names_a_dangling_link(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    ht.kineto_events(folder / "rank0.json", [tf.comm("allreduce", 64, 10)])
    os.mkfifo(folder / "rank1.json")  # opened, it would block the reader
    (folder / "rank2.json").symlink_to("/dev/zero")
    assert [t.path for t in load([str(folder)])] == [str(folder / "rank0.json")]
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(UserError, match=r"a symbolic link to .*nowhere\.json, which does not exist"):
        load([str(tmp_path / "gone.json")])


def test_the_budgets_are_set_by_name_and_refused_when_malformed() -> None:
    limits = parse_limits(["bytes=64G", "events=1e9", "pickle-bytes=128M", "event-bytes=1M"])
    assert (limits.bytes, limits.events, limits.pickle_bytes, limits.event_bytes) == (
        64 << 30,
        10**9,
        128 << 20,
        1 << 20,
    )
    assert parse_limits([]) == Limits()
    for bad, says in (("bytes", "give NAME=VALUE"), ("events=0", "must be positive"), ("bytes=lots", "malformed size")):
        with pytest.raises(UserError, match=says):
            parse_limits([bad])

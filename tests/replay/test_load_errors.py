"""Traces that cannot be replayed are refused with one line (a UserError: exit 2 at the CLI) saying
what to give instead."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.replay.load import load
from tests.support import trace_files as tf

DDP = Path(__file__).resolve().parents[1] / "data" / "traces" / "ddp-2gpu-nccl-kineto.json.gz"


def _refused(paths: list[Path], *fragments: str) -> str:
    with pytest.raises(UserError) as err:
        load([str(p) for p in paths])
    line = err.value.line()
    assert "\n" not in line and line.startswith("commbench: error: ")
    for fragment in fragments:
        assert fragment in line, line
    return line


def _job(folder: Path, rank: int, world: int = 2) -> Path:
    folder.mkdir(exist_ok=True)
    return tf.kineto(
        folder / f"rank{rank}.json", [tf.step(1, 0, 100), tf.comm("allreduce", 64, 10)], rank=rank, world=world
    )


def test_a_file_that_is_not_a_trace(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("loss went down\n")
    _refused([notes], "notes.txt: not a trace", "give a torch.profiler trace")
    other = tmp_path / "other.json"
    other.write_text('{"model": "resnet", "epochs": 3}')
    _refused([other], "not a trace")


def test_an_empty_trace(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    _refused([empty], "an empty file")
    _refused([tf.kineto(tmp_path / "none.json", [])], "an empty trace (no events)")
    _refused([tf.flight_recorder(tmp_path / "fr.pkl", [])], "an empty trace", "no entries")


def test_a_trace_with_no_collectives(tmp_path):
    path = tf.kineto(tmp_path / "compute.json", [tf.step(1, 0, 100), tf.compute(5), tf.compute(50)])
    _refused([path], "holds no collectives")
    only_waits = tf.kineto(tmp_path / "waits.json", [tf.comm("wait", 0, 5, dtype="Byte")])
    _refused([only_waits], "holds no collectives")


def test_traces_of_two_different_jobs(tmp_path):
    two = _job(tmp_path / "a", 0, world=2)
    four = _job(tmp_path / "b", 1, world=4)
    _refused([two, four], "two different jobs", "world sizes")
    _refused([DDP, DDP], "both rank 0", "one trace per rank of one job")
    nccl = _job(tmp_path / "c", 0)
    gloo = tf.kineto(tmp_path / "gloo1.json", [tf.comm("allreduce", 64, 10)], rank=1, backend="gloo")
    _refused([nccl, gloo], "two different jobs", "backends")


def test_a_gz_cut_short(tmp_path):
    cut = tmp_path / "cut.json.gz"
    data = DDP.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    _refused([cut], "cut.json.gz: the file is cut short or damaged", "copy it again in full")
    cut_json = tmp_path / "cut.json"
    cut_json.write_bytes(gzip.decompress(data)[:200_000])
    _refused([cut_json], "cut short")


def test_a_ranks_trace_missing_from_a_folder(tmp_path):
    folder = tmp_path / "job"
    for rank in (0, 1, 3):
        _job(folder, rank, world=4)
    _refused([folder], f"the folder {folder} lacks the trace of rank 2 of 4", "or one rank's trace alone")


def test_a_folder_holding_no_trace_and_a_path_that_does_not_exist(tmp_path):
    (tmp_path / "README.md").write_text("# traces\n")
    _refused([tmp_path], "holds no trace")
    _refused([tmp_path / "nope.json"], "no such file or folder")


def test_a_single_flight_recorder_dump_that_names_no_ranks(tmp_path):
    dump = tf.flight_recorder(tmp_path / "fr_rank0", [tf.fr_entry("gloo:all_reduce", [[8]], 1)], ranks="[]")
    _refused([dump], "does not say how many ranks", "give every rank's trace together")


def test_a_folder_of_every_rank_is_read_and_its_other_files_are_skipped(tmp_path):
    folder = tmp_path / "job"
    for rank in (0, 1):
        _job(folder, rank)
    (folder / "README.md").write_text("recorded on the cluster\n")
    shutil.copy(folder / "rank0.json", tmp_path / "spare.json")
    assert [t.rank for t in load([str(folder)])] == [0, 1]

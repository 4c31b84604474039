"""The readers on traces in the formats PyTorch writes: what each keeps, what it says it lost."""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle
from pathlib import Path

import pytest

from commbench.errors import UserError
from commbench.replay.load import load, rank_in_name
from commbench.replay.mapping import plan
from commbench.replay.readers import stream
from commbench.replay.readers.flight_recorder import RING_BUFFER
from commbench.replay.readers.kineto import read as read_kineto
from tests.support import trace_files as tf

DDP = Path(__file__).resolve().parents[1] / "data" / "traces" / "ddp-2gpu-nccl-kineto.json.gz"


def test_the_stream_yields_every_event_whatever_the_chunk_boundaries(tmp_path, monkeypatch):
    whole = json.loads(gzip.decompress(DDP.read_bytes()))
    monkeypatch.setattr(stream, "CHUNK", 997)  # a prime: boundaries fall inside strings, numbers and escapes
    s = stream.JsonStream(DDP)
    events = list(s.items("traceEvents"))
    assert events == whole["traceEvents"]
    assert s.meta["distributedInfo"] == whole["distributedInfo"]
    assert s.digest() == hashlib.sha256(DDP.read_bytes()).hexdigest()


def test_kineto_keeps_issue_order_steps_and_marks_lists_cut_at_30_entries(tmp_path):
    cut = "[" + ", ".join(str(i) for i in range(29)) + ', "...", 63]'
    events = [
        tf.step(7, 100, 100),
        tf.comm("all_to_allv", 640, 150, **{"In split size": cut, "Out split size": cut, "Seq": 4}),
        tf.comm("allreduce", 8, 120, dtype="BFloat16", ext=3),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_bf16",
            "pid": 0,
            "tid": 7,
            "ts": 121,
            "dur": 42.5,
            "args": {"External id": 3},
        },
        tf.comm("broadcast", 4, 50, dtype="Long"),
        tf.compute(130),
    ]
    trace = read_kineto(tf.kineto(tmp_path / "t.json", events))
    assert [c.name for c in trace.collectives] == ["broadcast", "allreduce", "all_to_allv"]  # by ts, not file order
    assert [c.step for c in trace.collectives] == [None, 7, 7]
    assert trace.collectives[1].dtype == "bfloat16" and trace.collectives[1].recorded_us == 42.5
    a2a = trace.collectives[2]
    assert "splits cut at 30 entries" in a2a.lossy and a2a.seq == 4 and len(a2a.in_splits) == 30


def test_kineto_links_kernels_without_external_id_through_correlation_or_flow_events(tmp_path):
    def x(cat, name, pid, tid, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    def flow(ph, flow_id, pid, tid, ts):
        return {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": flow_id, "pid": pid, "tid": tid, "ts": ts, "bp": "e"}

    reduce_op, broadcast_op = tf.comm("allreduce", 8, 100), tf.comm("broadcast", 4, 200)
    for op in (reduce_op, broadcast_op):
        del op["args"]["External id"]  # the form some exporters write: no "External id" anywhere
    events = [
        # the kernels first: a reader cannot know, on meeting them, which op launched them
        x("kernel", "ncclDevKernel_AllReduce_Sum_f32", 0, 7, 110, 30.0, correlation=500),
        x("kernel", "ncclDevKernel_Broadcast", 0, 7, 210, 12.0),  # no correlation either: its flow says
        flow("f", 777, 0, 7, 210),
        x("kernel", "void gemm_kernel", 0, 7, 150, 99.0, correlation=501),  # compute: not a collective's
        reduce_op,
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 102, 1.0, correlation=500),  # inside the all_reduce's span
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 150, 1.0, correlation=501),  # inside no collective
        broadcast_op,
        flow("s", 777, 1, 1, 203),  # the broadcast's launch, inside its span
    ]
    trace = read_kineto(tf.kineto(tmp_path / "t.json", events))
    assert [(c.name, c.recorded_us) for c in trace.collectives] == [("allreduce", 30.0), ("broadcast", 12.0)]


def test_an_nccl_coalescing_block_is_read_as_its_grouped_form(tmp_path):
    def kernel(ext, ts, dur):
        args = {"External id": ext}
        return {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllGather",
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

    events = [
        tf.step(1, 0, 1000),
        tf.comm("allreduce", 100, 10, ext=1),  # before the block, with its own kernel
        kernel(1, 11, 20.0),
        # FSDP1-style: three all_gathers in one coalescing block, then the marker that launches its kernel
        tf.comm("_allgather_base", 300, 100, out=600),
        tf.comm("_allgather_base", 200, 110, out=400),
        tf.comm("_allgather_base", 100, 120, out=200),
        tf.comm("coalesced", 0, 130, dtype="Byte", ext=2),
        kernel(2, 131, 55.0),
        # a batch of sends and recvs: not one op, kept as its members
        tf.comm("send", 64, 200, **{"Dst Rank": 1}),
        tf.comm("recv", 64, 210, **{"Src Rank": 1}),
        tf.comm("coalesced", 0, 220, dtype="Byte", ext=3),
        kernel(3, 221, 9.0),
    ]
    trace = read_kineto(tf.kineto(tmp_path / "t.json", events))
    got = [(c.name, c.in_elems, c.out_elems, c.coalesced, c.recorded_us) for c in trace.collectives]
    assert got == [
        ("allreduce", 100, 100, None, 20.0),
        ("allgather_into_tensor_coalesced", 600, 1200, 3, 55.0),
        ("send", 64, 64, None, None),
        ("recv", 64, 64, None, None),
    ]
    assert "1 NCCL coalescing block(s) read as one grouped collective each" in trace.notes
    (call,) = [c for c, _ in plan([trace]).counts if c.op == "grouped_all_gather"]
    assert (call.variant, call.tensors, call.in_elems) == ("coalesced", 3, 600)


def test_the_flight_recorder_reader_on_a_dump_in_the_documented_format(tmp_path):
    entries = [
        tf.fr_entry("nccl:all_reduce", [[1024]], 1, ms=0.5),
        tf.fr_entry("nccl:_allgather_base", [[256]], 2, out=[[512]], dtype="BFloat16"),
        tf.fr_entry("nccl:broadcast", [[16]], 3, dtype="Long"),
    ]
    for as_json in (False, True):
        folder = tmp_path / ("json" if as_json else "pickle")
        folder.mkdir()
        for rank in (0, 1):
            tf.flight_recorder(folder / f"nccl_trace_rank_{rank}", entries, as_json=as_json)
        traces = load([str(folder)])
        assert [t.rank for t in traces] == [0, 1] and traces[0].format == "flight-recorder"
        got = [(c.name, c.dtype, c.in_elems, c.out_elems, c.seq, c.recorded_us) for c in traces[0].collectives]
        assert got == [
            ("allreduce", "float32", 1024, 1024, 1, 500.0),
            ("_allgather_base", "bfloat16", 256, 512, 2, None),
            ("broadcast", "int64", 16, 16, 3, None),
        ]
        assert traces[0].collectives[0].group_ranks == (0, 1)
        assert RING_BUFFER in traces[0].notes


def test_a_ranks_number_is_read_from_the_file_name():
    assert [rank_in_name(Path(n)) for n in ("rank3.et.json", "et_1.json", "nccl_trace_rank_12", "trace.json")] == [
        3,
        1,
        12,
        None,
    ]


def test_a_pickle_that_names_a_class_is_refused_never_loaded(tmp_path):
    path = tmp_path / "fr_rank_0.pkl"
    path.write_bytes(pickle.dumps({"entries": [Path("/etc")]}))
    with pytest.raises(UserError, match=r"not a trace .*names pathlib"):
        load([str(path)])


def _gloo_entry(
    name: str, n: int, seq: int, group: str, *, out: list | None = None, frames: list | None = None
) -> dict:
    desc = "default_pg" if group == "0" else "undefined"
    entry = {**tf.fr_entry(f"gloo:{name}", [[n]], seq, out=out, group=group), "process_group": (group, desc)}
    return {**entry, "frames": frames} if frames is not None else entry


def test_gloo_dumps_recover_each_groups_members_from_the_dumps_that_hold_it(tmp_path):
    # new_group([r]) for each r: group "1" is rank 0's alone, "2" rank 1's; pg_config names none of them
    for rank, solo in ((0, "1"), (1, "2")):
        entries = [_gloo_entry("all_reduce", 128, 1, solo), _gloo_entry("all_gather", 32, 2, solo, out=[[1, 32]])]
        entries += [_gloo_entry("all_reduce", 100, 1, "0")]
        tf.flight_recorder(tmp_path / f"rank{rank}.fr.pkl", entries, pg_config=tf.GLOO_PG_CONFIG)
    traces = load([str(tmp_path)])
    assert [t.world_size for t in traces] == [2, 2]
    assert [(c.group, c.group_ranks) for c in traces[0].collectives] == [("1", (0,)), ("1", (0,)), ("0", (0, 1))]
    assert [(c.group, c.group_ranks) for c in traces[1].collectives] == [("2", (1,)), ("2", (1,)), ("0", (0, 1))]
    assert any("each group's members are the ranks whose dumps hold its entries" in n for n in traces[0].notes)
    with pytest.raises(UserError, match=r"give every rank's trace together$"):  # one dump alone cannot tell
        load([str(tmp_path / "rank0.fr.pkl")])


def test_a_gloo_dump_missing_a_members_dump_is_refused_in_one_line(tmp_path):
    entries = [_gloo_entry("all_gather", 64, 1, "1", out=[[4, 64]]), _gloo_entry("barrier", 0, 1, "0")]
    for rank in (0, 1):
        tf.flight_recorder(tmp_path / f"rank{rank}.fr.json", entries, pg_config=tf.GLOO_PG_CONFIG, as_json=True)
    with pytest.raises(UserError, match=r"group '1' gathers from 4 ranks, but only the dumps of rank 0, 1 hold it"):
        load([str(tmp_path)])


C10D = "/usr/lib/python3/torch/distributed/distributed_c10d.py"


def test_a_gloo_reduce_scatter_is_told_from_an_all_reduce_by_its_stack(tmp_path):
    scatter = [{"filename": C10D, "name": "reduce_scatter_single", "line": 4936},
               {"filename": "fsdp.py", "name": "foreach_reduce", "line": 619}]  # fmt: skip
    reduce = [{"filename": C10D, "name": "all_reduce", "line": 3245}, {"filename": "ddp.py", "name": "hook", "line": 9}]
    entries = [
        _gloo_entry("all_reduce", 1040, 1, "0", frames=scatter),
        _gloo_entry("all_reduce", 8, 2, "0", frames=reduce),
    ]
    (trace,) = load([str(tf.flight_recorder(tmp_path / "rank0.fr.pkl", entries))])
    assert [(c.name, c.in_elems, c.out_elems) for c in trace.collectives] == [
        ("_reduce_scatter_base", 1040, 520),
        ("allreduce", 8, 8),
    ]
    assert any("1 gloo:all_reduce entries read as reduce-scatters" in n for n in trace.notes)
    bare = [{k: v for k, v in e.items() if k != "frames"} for e in entries]  # a JSON dump keeps none
    (dumped,) = load([str(tf.flight_recorder(tmp_path / "rank0.fr.json", bare, as_json=True))])
    assert [c.name for c in dumped.collectives] == ["allreduce", "allreduce"]
    assert any("a JSON dump keeps no stacks" in n for n in dumped.notes)


def test_a_gloo_dump_says_how_many_point_to_point_ops_it_lacks(tmp_path):
    barrier = {**_gloo_entry("barrier", 0, 1, "0"), "op_id": 17}  # 16 sends and recvs issued, none recorded
    (trace,) = load([str(tf.flight_recorder(tmp_path / "rank0.fr.pkl", [barrier]))])
    assert any(
        n.startswith("Gloo records no send/recv in a Flight Recorder dump: 16 on group '0'") for n in trace.notes
    )
    nccl = tf.fr_entry("nccl:all_reduce", [[8]], 1)
    (trace,) = load([str(tf.flight_recorder(tmp_path / "nccl.fr.pkl", [{**nccl, "op_id": 5}]))])
    assert not any("send/recv" in n for n in trace.notes)  # NCCL records its point-to-point ops


def _event(name: str, rf: int, ts: float, dur: float, dims: list, *, tid: int = 1, dtype: str = "float") -> dict:
    args = {"Record function id": rf, "Input Dims": dims, "Input type": [dtype]}
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_each_gloo_dispatcher_op_gets_the_annotation_that_ran_it_wherever_it_sits(tmp_path):
    """As Gloo records them (torch 2.13): an all_gather's annotation 3 + 3 x the group's size record
    functions after its op (chunk, split, narrow...), a reduce-scatter's named gloo:all_reduce 4 after,
    a run-loop thread's own ops taking ids between, and an async all_reduce's annotation after another's."""
    events = [
        tf.step(1, 0.0, 1000.0),
        _event("c10d::allreduce_", 10, 10.0, 5.0, [[[256]], [], [], [], [], []]),
        _event("c10d::_allgather_base_", 12, 20.0, 5.0, [[128], [64], [], [], []]),
        *(_event("aten::narrow", rf, 21.0, 1.0, [[128]]) for rf in range(13, 21)),
        _event("gloo:all_gather", 21, 30.0, 40.0, [[64]], tid=7),
        _event("c10d::_reduce_scatter_base_", 22, 80.0, 5.0, [[520], [1040], [], [], [], []]),
        _event("aten::clone", 23, 81.0, 1.0, [[1040]]),
        _event("gloo:all_reduce", 26, 90.0, 60.0, [[1040]], tid=8),
        _event("aten::div_", 27, 151.0, 1.0, [[1040]], tid=8),  # the worker's own op, from the same counter
        _event("gloo:all_reduce", 28, 95.0, 200.0, [[256]], tid=7),  # the first all_reduce's, run late
    ]
    (trace,) = load([str(tf.kineto(tmp_path / "rank0.json", events, backend="gloo"))])
    got = [(c.name, c.in_elems, c.out_elems, c.recorded_us, c.recorded_span_us) for c in trace.collectives]
    assert got == [
        ("allreduce", 256, 256, 200.0, (95.0, 295.0)),
        ("_allgather_base", 64, 128, 40.0, (30.0, 70.0)),
        ("_reduce_scatter_base", 1040, 520, 60.0, (90.0, 150.0)),
    ]
    assert all(c.dtype == "float32" and c.step == 1 for c in trace.collectives)

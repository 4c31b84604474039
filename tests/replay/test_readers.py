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

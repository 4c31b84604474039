"""The CLI as users meet it: real runs through the spawner and torchrun, and one-line errors."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.backends.torch_dist import FLAT_ALL_GATHER, FLAT_REDUCE_SCATTER, resolve_api
from commbench.cli import main
from commbench.results.schema import COLUMNS
from commbench.run.config import ONE_RANK_NOTE
from tests.support.distributed import commbench, torchrun
from tests.support.errors import assert_one_line_error


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--op", "all_gatherx"], ["unknown op 'all_gatherx'", "all_gather", "reduce_scatter_base"]),
        (["--backend", "mpi"], ["unknown backend 'mpi'", "gloo"]),
        (["--dtype", "float8"], ["unknown dtype 'float8'", "float32"]),
        (["-b", "1M", "-e", "1K"], ["larger than"]),
        (["--sizes", "0"], ["must be positive"]),
        (["--sizes", "-4"], ["malformed size"]),
        (["--sizes", "1K,lots"], ["malformed size 'lots'"]),
        (["-e", "12Q"], ["malformed size"]),
        (["--group", "rack"], ["'rack' is not one of", "world", "intra", "inter"]),
    ],
)
def test_bad_input_is_one_line(args, fragments):
    assert_one_line_error(_invoke("sweep", *args), *fragments)


def test_nccl_without_a_gpu_says_what_to_do():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is usable here")
    assert_one_line_error(_invoke("sweep", "--backend", "nccl"), "nccl", "--backend gloo")


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_one_line_error(_invoke("sweep", "-o", str(blocker / "out.csv")), "cannot create the output folder")


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "run.csv"
    out.write_text("precious\n")
    assert_one_line_error(_invoke("sweep", "-o", str(out)), "already exists", "--overwrite")
    assert out.read_text() == "precious\n"


@pytest.mark.slow
def test_help_and_list_do_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from click.testing import CliRunner; from commbench.cli import main; "
        "r = CliRunner().invoke(main, ['list']); assert r.exit_code == 0, r.output; "
        "CliRunner().invoke(main, ['--help']); CliRunner().invoke(main, ['sweep', '--help']); "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy imported'; print(r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "all_gather" in out.stdout and "S = " in out.stdout and "gloo" in out.stdout


@pytest.mark.slow
def test_a_trace_is_read_before_torch_is_imported(tmp_path):
    """replay reads its traces before it imports torch: a wrong trace is refused without paying
    for torch, and a Ctrl-C during a long read is not swallowed by torch's import (its numpy
    set-up clears a KeyboardInterrupt: tests/support/hostile_inputs, ctrl-c-read)."""
    import subprocess
    import sys

    (tmp_path / "t.json").write_text('{"traceEvents": [{"ph": "X" "name": "x"}]}')
    code = (
        "import sys; from click.testing import CliRunner; from commbench.cli import main; "
        "r = CliRunner().invoke(main, ['replay', 't.json', '--backend', 'gloo', '--nproc', '2']); "
        "assert r.exit_code == 2, r.output; assert 'torch' not in sys.modules, 'torch imported'; print(r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "t.json" in out.stdout


@pytest.mark.slow
def test_sweep_through_the_spawner_writes_every_row(tmp_path):
    out = tmp_path / "sub" / "run.csv"  # the missing folder is created
    result = _invoke("sweep", "--sizes", "8,1K,64K", "-n", "3", "-w", "1", "-o", str(out), "--raw", "--no-plot")
    assert result.exit_code == 0, result.output
    assert "all_gather" in result.output and "busbw" in result.output
    df = pd.read_csv(out)
    assert list(df.columns) == list(COLUMNS)
    expected = {
        (op, v, s) for op in ("all_gather", "reduce_scatter_base") for v in ("flat", "list") for s in (8, 1024, 65536)
    }
    got = set(zip(df.op, df.variant, df.size_bytes))
    assert expected <= got
    core = df[df.op.isin(["all_gather", "reduce_scatter_base"])]
    assert (core.wrong == 0).all() and (core.world_size == 2).all() and (core.status == "ok").all()
    assert set(df.group) == {"world"} and set(df.group_size) == {2}
    assert set(df[df.status == "ok"].timer) == {"perf_counter"}  # the CPU backends' timer
    assert not df.note.fillna("").str.contains(ONE_RANK_NOTE).any()
    flat_names = resolve_api(FLAT_ALL_GATHER), resolve_api(FLAT_REDUCE_SCATTER)
    assert set(core.api) == {*flat_names, "all_gather", "reduce_scatter"}
    assert (core.time_us_min <= core.time_us_p50).all() and (core.time_us_p50 <= core.time_us_max).all()
    measured = df[df.status == "ok"]
    assert (measured.iters == 3).all() and (measured.rounds == 3).all()  # --iters 3 is 3, one per round
    raw = pd.read_csv(out.with_name("run.raw.csv"))
    one = raw[(raw.op == "all_gather") & (raw.variant == "flat") & (raw.size_bytes == 8)]
    assert len(one) == 3 * 2 and sorted(one["round"]) == [0, 0, 1, 1, 2, 2]  # iters x ranks


@pytest.mark.slow
def test_a_one_rank_run_says_it_measures_no_communication(tmp_path):
    out = tmp_path / "one.csv"
    proc = commbench(*"sweep --nproc 1 --op all_gather,sync_bn --sizes 8 --channels 4 -n 2 -w 1 -o".split(), str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        f"commbench: warning: {ONE_RANK_NOTE}; start 2 or more ranks to measure it"
    ]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("# commbench"))
    assert f"({ONE_RANK_NOTE})" in header
    df = pd.read_csv(out)
    measured = df[df.status != "unavailable"]
    assert set(measured.op) == {"all_gather", "sync_bn"} and (measured.wrong == 0).all()
    assert measured.note.str.contains(ONE_RANK_NOTE).all()


@pytest.mark.slow
def test_a_corrupted_op_fails_the_run(tmp_path):
    out = tmp_path / "bad.csv"
    proc = commbench(
        *"sweep --op tests.support.broken_ops:CorruptAllGather --sizes 1K -n 2 -w 1 -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED" in proc.stdout and "Traceback" not in proc.stderr
    df = pd.read_csv(out)
    assert (df.wrong == 2).all() and (df.status == "wrong").all()  # one bad element per rank per variant


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_sweep_under_torchrun(tmp_path, nproc):
    out = tmp_path / "tr.csv"
    proc = torchrun(nproc, "sweep", "--sizes", "8,4K,1M", "-n", "2", "-w", "1", "-o", str(out), "--no-plot")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_csv(out)
    core = df[df.op.isin(["all_gather", "reduce_scatter_base"])]
    assert len(core) == 2 * 3 * 3  # flat, list, inplace at each size
    assert (df.wrong.fillna(0) == 0).all()  # every op checks out under torchrun, the new family included
    assert {"all_to_all", "broadcast", "reduce", "gather", "scatter", "sendrecv", "barrier"} <= set(
        df[df.status == "ok"].op
    )
    assert (core.world_size == nproc).all() and (core.wrong == 0).all()
    # sizes round to a multiple of the world size, and the bytes moved are reported
    assert (core["count"] % nproc == 0).all()
    assert (core.size_bytes == core["count"] * 4).all()


@pytest.mark.slow
def test_variant_filter_and_int_dtype_on_an_op_that_cannot_use_it(tmp_path):
    out = tmp_path / "v.csv"
    proc = commbench(
        *"sweep --op all_gather,sync_bn --variant list,apex --channels 4 --sizes 1K --dtype int32 -n 1 -w 0 -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    df = pd.read_csv(out)
    assert set(df[df.op == "all_gather"].variant) == {"list"}
    bn = df[df.op == "sync_bn"]
    assert list(bn.variant) == ["apex"] and list(bn.status) == ["unavailable"] and "floating" in bn.note.iloc[0]


@pytest.mark.slow
def test_nonblocking_rows_of_variants_that_wait_inside_are_honest(tmp_path):
    out = tmp_path / "nb.csv"
    proc = commbench(
        *"sweep --op bucketed_reduce_scatter --variant per_tensor,flat --tensors 3x1K --mode nonblocking".split(),
        *"--window 4 -n 2 -w 1 --no-plot -o".split(),
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = pd.read_csv(out, keep_default_na=False).set_index("variant")
    # (two iterations on a shared machine may also be noted as noisy; that is not this test's concern)
    assert rows.loc["per_tensor", "window"] == 4 and "window" not in rows.loc["per_tensor", "note"]
    assert rows.loc["flat", "window"] == 1 and "window 1" in rows.loc["flat", "note"]


@pytest.mark.slow
@pytest.mark.torch_api
@pytest.mark.parametrize(
    "op, variant, said, others",
    [
        ("RefusingAllGather", "list", "not supported", {"flat", "inplace"}),
        # c10d's words for a method a backend lacks (torch 2.11's Gloo alltoall)
        ("RefusingAllToAll --variant single,uneven", "uneven", "Backend gloo does not support alltoall", {"single"}),
    ],
)
def test_a_variant_the_transport_refuses_on_every_rank_is_an_unavailable_row(tmp_path, op, variant, said, others):
    out = tmp_path / "refused.csv"
    proc = commbench(
        *f"sweep --op tests.support.broken_ops:{op} --sizes 1K,4K -n 2 -w 1 -o".split(),
        str(out),
        "--no-plot",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    df = pd.read_csv(out)
    refused = df[df.variant == variant]
    assert (refused.status == "unavailable").all() and len(refused) == 1
    assert refused.note.iloc[0].startswith("the transport refused it: ") and said in refused.note.iloc[0]
    assert set(df[df.status == "ok"].variant) == others and (df[df.status == "ok"].wrong == 0).all()


@pytest.mark.slow
@pytest.mark.torch_api
def test_a_refusal_after_the_first_round_fails_the_run_and_is_called_a_refusal(tmp_path):
    proc = commbench(
        *"sweep --op tests.support.broken_ops:LateRefusingAllGather --variant flat --sizes 1K -n 2 -w 1".split(),
        *"--no-plot -o".split(),
        str(tmp_path / "late.csv"),
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    (line, *_) = [line for line in proc.stderr.splitlines() if "failed: " in line] or [proc.stderr]
    assert "failed: Backend gloo does not support allgather" in line, line
    assert "(the transport refused the call, not a missing rank)" in line and "stall" not in line, line

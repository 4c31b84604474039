"""Inputs that cannot hurt the host: refused in one line by the launching process, before a rank
is spawned and before torch is imported; and what a spawned run is handed instead of the environment."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import commbench.backends
import commbench.backends.horovod
import commbench.launch.horovod
import commbench.launch.start
import commbench.run.resources
from commbench.cli import main
from commbench.errors import ExitCode
from commbench.run.config import SweepConfig
from tests.support.distributed import REPO, torchrun
from tests.support.distributed import commbench as commbench_process
from tests.support.errors import assert_one_line_error

QUICK = ("--op", "all_gather", "--sizes", "8", "-n", "1", "-w", "0", "--no-plot")


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[SweepConfig, int]]:
    """Stand in for the spawner: record what would have started, start nothing."""
    calls: list[tuple[SweepConfig, int]] = []

    def spawn(cfg: SweepConfig, nproc: int) -> int:
        calls.append((cfg, nproc))
        return ExitCode.OK

    monkeypatch.setattr(commbench.launch.start, "spawn", spawn)
    return calls


@pytest.fixture
def small_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host of 2 cores and 8 GiB available, whatever runs the tests."""
    monkeypatch.setattr(commbench.run.resources, "usable_cores", lambda: 2)
    monkeypatch.setattr(commbench.run.resources, "host_available_bytes", lambda: 8 << 30)


# (arguments, fragments of the one line). Each is refused by the launching process.
REFUSED = [
    (["--nproc", "100000"], ["--nproc 100000 is more ranks than this host runs well", "= 16", "--oversubscribe"]),
    (
        ["--nproc", "100", "--oversubscribe", *QUICK],
        ["100 ranks would need about 25G (256M each to run)", "8G is available", "use --nproc 31 or fewer"],
    ),
    (["--nproc", "0"], ["--nproc must be at least 1"]),
    (["-f", "1"], ["--factor must be a finite number greater than 1", "(got 1.0)"]),
    (["-f", "nan"], ["--factor must be a finite number greater than 1", "(got nan)"]),
    (["-f", "inf"], ["--factor must be a finite number greater than 1", "(got inf)"]),
    (["-f", "1.000001", "-e", "64M"], ["would measure about 5,206,311 sizes", "at most 1,000", "2 gives 24"]),
    (["--sizes", ",".join(str(8 * i) for i in range(1, 1002))], ["--sizes lists 1,001 sizes", "at most 1,000"]),
    (["--timeout", "0.000001"], ["--timeout must be between 1 and 604800 seconds (got 1e-06)"]),
    (["--timeout", "0"], ["--timeout must be between 1 and 604800 seconds (got 0)"]),
    (["--timeout", "nan"], ["--timeout must be between 1 and 604800 seconds (got nan)"]),
    (["--timeout", "inf"], ["--timeout must be between 1 and 604800 seconds (got inf)"]),
    (["--iters", "0"], ["--iters must be between 1 and 1,000,000 (got 0)"]),
    (["--iters", "10000000"], ["--iters must be between 1 and 1,000,000"]),
    (["--warmup", "-1"], ["--warmup must be between 0 and 1,000,000"]),
    (["--window", "0"], ["--window must be between 1 and 1,024"]),
    (["--window", "4096"], ["--window must be between 1 and 1,024"]),
    (["--iters", "nan"], ["--iters takes a number of iterations or auto (got 'nan')"]),
    (["--op", "bucketed_reduce_scatter", "--bucket-cap-mb", "nan"], ["--bucket-cap-mb 'nan' must be a finite"]),
    (["--op", "bucketed_reduce_scatter", "--bucket-cap-mb", "inf"], ["--bucket-cap-mb 'inf' must be a finite"]),
    (["--op", "bucketed_all_reduce", "--message-size", "0"], ["--message-size '0' must be positive"]),
    (["--op", "sync_bn", "--batch", "nan"], ["--batch 'nan' is not a sample count"]),
    (["-o", ""], ["--output is empty"]),
    # Memory refusals name the op's own workload and the option that sets it, not --max-bytes.
    (["--op", "sync_bn", "--channels", "100000000"], ["sync_bn at C=100000000", "lower --channels, --batch"]),
    (
        ["--op", "bucketed_reduce_scatter", "--tensors", "4x64G"],
        ["bucketed_reduce_scatter at 4 tensors, 256G elements", "lower --tensors or --bucket-cap-mb"],
    ),
    (["--op", "bucketed_all_reduce", "--tensors", "1x64G"], ["at 1 tensor, 64G elements", "lower --tensors"]),
]


@pytest.mark.parametrize("args, fragments", REFUSED)
def test_refused_in_one_line_before_a_rank_is_spawned(
    args: list[str], fragments: list[str], spawned: list, small_host: None
) -> None:
    result = CliRunner().invoke(main, ["sweep", *args])
    assert_one_line_error(result, "commbench: error: ", *fragments)
    assert result.exit_code == ExitCode.USAGE
    assert spawned == []


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_an_output_that_cannot_be_created_is_refused_before_spawning(spawned: list) -> None:
    # /proc passes a permission check for root, yet no file can be created in it.
    result = CliRunner().invoke(main, ["sweep", *QUICK, "-o", "/proc/commbench-x.csv"])
    assert_one_line_error(result, "cannot write /proc/commbench-x.csv")
    assert spawned == []


def test_nccl_ranks_beyond_the_visible_gpus_are_refused(spawned: list, monkeypatch: pytest.MonkeyPatch) -> None:
    nccl = dataclasses.replace(commbench.backends.BACKENDS["nccl"], missing=lambda: None)
    monkeypatch.setitem(commbench.backends.BACKENDS, "nccl", nccl)
    monkeypatch.setattr(commbench.launch.start, "visible_gpus", lambda: 1)
    result = CliRunner().invoke(main, ["sweep", "--backend", "nccl", "--nproc", "2", *QUICK])
    assert_one_line_error(result, "--nproc 2 needs 2 GPUs with nccl (one per rank), but 1 is visible", "--backend gloo")
    assert spawned == []


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A host with CUDA and `gpus.count` visible GPUs (nccl usable), and a Horovod built with NCCL
    or not (`gpus.horovod_nccl`); nothing on it is started."""
    gpus = SimpleNamespace(count=2, horovod_nccl=True)
    nccl = dataclasses.replace(commbench.backends.BACKENDS["nccl"], missing=lambda: None)
    monkeypatch.setitem(commbench.backends.BACKENDS, "nccl", nccl)
    monkeypatch.setattr(commbench.backends, "cuda_missing", lambda: None)
    monkeypatch.setattr(commbench.launch.start, "visible_gpus", lambda: gpus.count)
    monkeypatch.setattr(commbench.backends.horovod, "horovod_on_gpus", lambda: gpus.horovod_nccl)
    return gpus


@pytest.fixture
def spawned_horovod(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Stand in for the Horovod spawner: record how many ranks would have started."""
    calls: list[int] = []

    def spawn_horovod(cfg: SweepConfig, nproc: int, spawn: Any) -> int:
        calls.append(nproc)
        return ExitCode.OK

    monkeypatch.setattr(commbench.launch.horovod, "spawn_horovod", spawn_horovod)
    return calls


def test_horovod_ranks_beyond_the_visible_gpus_are_refused(fake_gpus: Any, spawned_horovod: list[int]) -> None:
    result = CliRunner().invoke(main, ["sweep", "--backend", "horovod", "--nproc", "3", *QUICK])
    assert_one_line_error(result, "--nproc 3 needs 3 GPUs with horovod (one per rank), but 2 are visible", "--nproc 2")
    assert spawned_horovod == []


@pytest.mark.parametrize("nccl, expected", [(True, 3), (False, 2)], ids=["built with NCCL", "Gloo only"])
def test_horovod_on_gpus_starts_a_rank_per_gpu_by_default(
    nccl: bool, expected: int, fake_gpus: Any, spawned_horovod: list[int], tmp_path: Path
) -> None:
    fake_gpus.count, fake_gpus.horovod_nccl = 3, nccl
    result = CliRunner().invoke(main, ["sweep", "--backend", "horovod", *QUICK, "-o", str(tmp_path / "h.csv")])
    assert result.exit_code == 0, result.output
    assert spawned_horovod == [expected]


def test_a_horovod_without_nccl_runs_more_ranks_than_gpus(
    fake_gpus: Any, spawned_horovod: list[int], tmp_path: Path
) -> None:
    fake_gpus.horovod_nccl = False
    args = ["sweep", "--backend", "horovod", "--nproc", "4", *QUICK, "-o", str(tmp_path / "h.csv")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert spawned_horovod == [4]


@pytest.mark.parametrize(
    "args, warning",
    [
        (["--backend", "nccl"], "commbench: warning: 1 GPU is visible, so 1 rank runs, and a single rank measures"),
        (["--nproc", "1"], "commbench: warning: a single rank measures a local copy, not communication;"),
    ],
    ids=["nccl on one GPU", "gloo --nproc 1"],
)
def test_one_rank_is_run_with_one_warning_line(
    args: list[str], warning: str, fake_gpus: Any, spawned: list, tmp_path: Path
) -> None:
    fake_gpus.count = 1
    result = CliRunner().invoke(main, ["sweep", *args, *QUICK, "-o", str(tmp_path / "one.csv")])
    assert result.exit_code == 0, result.output
    assert [nproc for _, nproc in spawned] == [1]
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(warning) and line.endswith("start 2 or more ranks to measure it"), line


def test_oversubscribe_lifts_the_core_limit_and_says_how_many_start(
    spawned: list, small_host: None, tmp_path: Path
) -> None:
    out = str(tmp_path / "run.csv")
    result = CliRunner().invoke(main, ["sweep", "--nproc", "17", "--oversubscribe", *QUICK, "-o", out])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "# starting 17 local gloo ranks"
    assert [nproc for _, nproc in spawned] == [17]


@pytest.mark.parametrize("given", ["runs/", "runs"])
def test_a_folder_as_output_gets_the_default_name_inside(
    given: str, spawned: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if not given.endswith("/"):
        (tmp_path / given).mkdir()  # an existing folder, named without the slash
    result = CliRunner().invoke(main, ["sweep", *QUICK, "-o", given])
    assert result.exit_code == 0, result.output
    ((cfg, _),) = spawned
    written = Path(cfg.output)
    assert written.parent == tmp_path / "runs" and re.fullmatch(r"\d{8}-\d{6}-gloo-n2-[0-9a-f]{6}\.csv", written.name)


@pytest.mark.slow
def test_validation_imports_no_torch() -> None:
    """Every refusal above happens before torch is imported: a mistake costs a fraction of a second."""
    cases = [args for args, _ in REFUSED if "--nproc" not in args] + [["--nproc", "0"], ["--nproc", "100000"]]
    code = (
        "import sys; from click.testing import CliRunner; from commbench.cli import main\n"
        f"for args in {cases!r}:\n"
        "    r = CliRunner().invoke(main, ['sweep', *args])\n"
        "    assert r.exit_code == 2, (args, r.output)\n"
        "    assert 'torch' not in sys.modules, ('torch imported by', args)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_the_configuration_reaches_the_ranks_whatever_its_size(tmp_path: Path) -> None:
    """It travels on the ranks' stdin: in their environment, 140 KB of options once failed with E2BIG."""
    out = tmp_path / "long.csv"
    variants = ",".join(["torch"] * 70_000)  # one variant, written out long: 420 KB of configuration
    args = ["sweep", "--op", "sync_bn", "--channels", "4", "--variant", variants, "-n", "1", "-w", "0"]
    result = CliRunner().invoke(main, [*args, "--no-plot", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out)
    assert set(rows["count"]) == {4} and set(rows.variant) == {"torch"} and (rows.status == "ok").all()


@pytest.mark.slow
def test_when_rank_0_refuses_its_peers_say_nothing(tmp_path: Path) -> None:
    """Under torchrun the output is checked by rank 0; the other rank exits without a line of its own."""
    proc = torchrun(2, "sweep", *QUICK, "-o", "/proc/commbench-x.csv", cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("commbench:")]
    assert lines == [
        "commbench: error: cannot write /proc/commbench-x.csv: No such file or directory; choose another --output"
    ]
    assert "is gone" not in proc.stderr


@pytest.mark.slow
def test_a_rank_that_cannot_join_exits_3_not_1(tmp_path: Path) -> None:
    """Exit 1 means wrong results; a rank whose rendezvous never answers is a lost collective (3)."""
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
        env["MASTER_PORT"] = str(closed.getsockname()[1])
        proc = commbench_process("sweep", *QUICK, "--timeout", "1", "-o", str(tmp_path / "x.csv"), env=env)
    assert proc.returncode == ExitCode.COLLECTIVE_FAILURE, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("commbench: rank 1: could not join the process group:")
    assert "Traceback (most recent call last)" not in proc.stderr


@pytest.mark.slow
def test_torchruns_summary_shows_commbenchs_line(tmp_path: Path) -> None:
    """torchrun wraps every failed worker in its own traceback and exits 1; commbench hands it its
    line through TORCHELASTIC_ERROR_FILE, so the summary's root cause is the line, not a docs link,
    and an error file given to torchrun itself holds the worker's exit code."""
    (tmp_path / "taken.csv").touch()
    error_file = tmp_path / "torchrun-error.json"
    proc = torchrun(
        2, "sweep", *QUICK, "-o", "taken.csv", cwd=tmp_path, env={"TORCHELASTIC_ERROR_FILE": str(error_file)}
    )
    line = "commbench: error: taken.csv already exists; choose another --output or pass --overwrite"
    assert proc.returncode == 1, proc.stderr[-3000:]
    root_cause = proc.stderr.split("Root Cause (first observed failure):")[1]
    assert f"traceback : {line}" in root_cause, proc.stderr[-3000:]
    assert "To enable traceback see" not in proc.stderr
    copied = json.loads(error_file.read_text())["message"]
    assert copied["message"].startswith(line) and copied["errorCode"] == ExitCode.USAGE

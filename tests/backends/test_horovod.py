"""The Horovod backend on real Horovod ranks (horovodrun --gloo, 2 and 3 ranks, and commbench's own
spawner), plus its one-line errors. Skipped only when horovod.torch cannot be imported: CI installs
it with scripts/install-horovod.sh, so there these tests run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

pytest.importorskip("horovod.torch", reason="Horovod is not installed (bash scripts/install-horovod.sh)")

from commbench.backends import horovod_missing
from commbench.backends.horovod import REQUIRED_APIS, _Names, import_horovod
from commbench.cli import main
from commbench.errors import UserError
from commbench.ops import registry
from tests.support.call_counts import RESULT_TAG as CALL_COUNTS_TAG
from tests.support.distributed import REPO, commbench
from tests.support.errors import assert_one_line_error
from tests.support.horovod_cases import RESULT_TAG

# Small workloads: horovod start-up dominates, and CI shares two cores. Uneven tensors make the
# bucketed ops split and flush; --bucket-cap-mb 0.05 forces several buckets; sync_bn stays tiny.
SMALL = (
    *"--sizes 8,4K -n 2 -w 1 --dtype float32 --no-plot --tensors 1000,3x4K,7 --bucket-cap-mb 0,0.05 --message-size 2K --channels 1,6 --batch 2 --spatial 2".split(),
)


def horovodrun(nproc: int, *command: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`horovodrun -np N --gloo` on this host (loopback), running command in the repository."""
    exe = shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or "horovodrun"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}
    return subprocess.run(
        [exe, "-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo", "--network-interface", "lo", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**env, "OMP_NUM_THREADS": "1"},
    )


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3])
def test_backend_contract_under_horovodrun(nproc):
    proc = horovodrun(nproc, sys.executable, "-m", "tests.support.horovod_cases")
    assert proc.returncode == 0, _tail(proc)
    line = next(line for line in proc.stdout.splitlines() if RESULT_TAG in line)
    result = json.loads(line.split(RESULT_TAG, 1)[1])
    assert result["world_size"] == nproc
    assert all(w == 0 for w in result["wrong"].values()), result["wrong"]
    assert {
        "allgather",
        "reducescatter",
        "allreduce_",
        "grouped_allgather",
        "grouped_allreduce_",
        "grouped_reducescatter",
        "alltoall",
        "broadcast_",
        "barrier",
    } <= set(result["calls"])


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def horovod_sweep(request, tmp_path_factory) -> tuple[int, Path]:
    """Every registered op swept once under `horovodrun -np N --gloo`; (N, the CSV)."""
    nproc = request.param
    out = tmp_path_factory.mktemp(f"hvd{nproc}") / "horovod.csv"
    proc = horovodrun(nproc, sys.executable, "-m", "commbench", "sweep", "--backend", "horovod", *SMALL, "-o", str(out))
    assert proc.returncode == 0, _tail(proc)
    return nproc, out


@pytest.mark.slow
def test_every_op_is_correct_under_horovodrun(horovod_sweep):
    nproc, out = horovod_sweep
    df = pd.read_csv(out)
    assert set(df.op) == set(registry())  # every registered op ran (or said why a variant cannot)
    ok = df[df.status == "ok"]
    assert (ok.wrong == 0).all() and (ok.world_size == nproc).all() and (ok.backend == "horovod").all()
    assert set(df.status) <= {"ok", "unavailable"}
    # Horovod has no rooted reduce, gather or scatter and no point-to-point: one row each says so.
    lacking = {"reduce", "gather", "scatter", "sendrecv"}
    for op in set(registry()) - lacking:
        assert len(ok[ok.op == op]) > 0, f"{op} measured nothing on horovod"
    said = df[df.op.isin(lacking)]
    assert (said.status == "unavailable").all() and said.note.str.startswith("Horovod has no").all()
    assert set(said.op) == lacking
    # Otherwise only torch's coalescing manager, CUDA-only forms and in-place forms (Horovod returns
    # new tensors) may be unavailable on Horovod's CPU build.
    unavailable = df[(df.status == "unavailable") & ~df.op.isin(lacking)]
    assert set(unavailable.variant) <= {"coalesced", "native_torch", "native_horovod", "inplace"}, unavailable[
        ["op", "variant", "note"]
    ]
    assert unavailable[unavailable.variant == "inplace"].note.str.contains("no in-place form").all()
    family = ok[ok.op.isin(["all_to_all", "broadcast", "barrier"])]
    assert set(zip(family.op, family.api)) == {
        ("all_to_all", "alltoall"),
        ("broadcast", "broadcast_"),
        ("barrier", "barrier"),
    }
    assert set(family[family.op == "all_to_all"].variant) == {"single", "list", "uneven"}
    grouped = ok[(ok.op == "grouped_all_gather") & (ok.variant == "grouped")]
    assert len(grouped) > 0 and (grouped.api == "grouped_allgather").all() and (grouped.calls == 1).all()
    separate = ok[(ok.op == "grouped_all_gather") & (ok.variant == "separate")]
    assert (separate.api == "allgather").all() and (separate.calls == 5).all()  # one per --tensors entry
    horovod_strategies = ok[(ok.op == "sync_bn") & ok.variant.isin(["horovod", "horovod_grouped"])]
    assert set(horovod_strategies.variant) == {"horovod", "horovod_grouped"}
    core = ok[ok.op.isin(["all_gather", "reduce_scatter_base"])]
    assert set(core.api) == {"allgather", "reducescatter"}


@pytest.mark.slow
@pytest.mark.parametrize("horovod_sweep", [2], indirect=True, ids=["np2"])
def test_gloo_and_horovod_in_one_chart(horovod_sweep, tmp_path):
    """README's pair: the same sweep on gloo, then both CSVs into one chart per op."""
    _, horovod_csv = horovod_sweep
    gloo_csv = tmp_path / "gloo.csv"
    proc = commbench(
        *"sweep --backend gloo --nproc 2 --op all_gather --sizes 8,4K -n 2 -w 1 -o".split(),
        str(gloo_csv),
    )
    assert proc.returncode == 0, _tail(proc)
    proc = commbench("plot", str(gloo_csv), str(horovod_csv), "-o", str(tmp_path / "charts"))
    assert proc.returncode == 0, _tail(proc)
    assert (tmp_path / "charts" / "all_gather-comm.png").stat().st_size > 0


@pytest.mark.slow
def test_spawned_ranks_catch_a_corrupted_result_and_skip_bfloat16(tmp_path):
    out = tmp_path / "bad.csv"
    proc = commbench(
        *"sweep --backend horovod --nproc 2 --op tests.support.broken_ops:CorruptAllGather --sizes 1K -n 2 -w 1 --dtype float32,bfloat16 -o".split(),
        str(out),
    )
    assert proc.returncode == 1, _tail(proc)
    assert "FAILED" in proc.stdout and "Traceback" not in proc.stderr
    df = pd.read_csv(out)
    measured = df[(df.dtype == "float32") & (df.status != "unavailable")]
    assert len(measured) == 2 and (measured.wrong == 2).all() and (measured.status == "wrong").all()
    assert (measured.backend == "horovod").all() and (measured.world_size == 2).all()
    assert set(df[(df.dtype == "float32") & (df.status == "unavailable")].variant) == {"inplace"}
    bf16 = df[df.dtype == "bfloat16"]
    assert len(bf16) == 3 and (bf16.status == "unavailable").all() and bf16.note.str.contains("bfloat16").all()


# -- one-line errors ------------------------------------------------------------------------------


@pytest.mark.slow
def test_horovod_under_torchrun_says_to_use_horovodrun(monkeypatch):
    for key in [k for k in os.environ if k.startswith("HOROVOD_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = CliRunner().invoke(main, ["sweep", "--backend", "horovod", "--sizes", "8"])
    assert_one_line_error(result, "torchrun", "horovodrun -np N --gloo", "--nproc N")


@pytest.mark.slow
def test_nproc_under_horovodrun_is_refused(monkeypatch):
    monkeypatch.setenv("HOROVOD_RANK", "0")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    result = CliRunner().invoke(main, ["sweep", "--backend", "horovod", "--nproc", "2", "--sizes", "8"])
    assert_one_line_error(result, "under horovodrun use -np")


@pytest.mark.slow
def test_missing_horovod_says_how_to_install(monkeypatch):
    import commbench.backends as registry

    real = registry._package_dir
    monkeypatch.setattr(registry, "_package_dir", lambda name: None if name == "horovod" else real(name))
    assert "scripts/install-horovod.sh" in horovod_missing()
    assert_one_line_error(CliRunner().invoke(main, ["sweep", "--backend", "horovod"]), "horovod", "install-horovod.sh")


@pytest.mark.slow
def test_horovod_without_its_torch_extension_is_named(monkeypatch, tmp_path):
    import commbench.backends as registry

    (tmp_path / "torch").mkdir()  # a horovod package whose torch extension was never built
    real = registry._package_dir
    monkeypatch.setattr(registry, "_package_dir", lambda name: tmp_path if name == "horovod" else real(name))
    assert "without PyTorch support" in horovod_missing()


def _fake_hvd(**overrides) -> types.SimpleNamespace:
    api = {name: (lambda *a, **k: None) for name in REQUIRED_APIS}
    return types.SimpleNamespace(**{**api, "gloo_built": lambda: True, "mpi_built": lambda: False, **overrides})


@pytest.mark.slow
@pytest.mark.parametrize(
    "fake, fragment",
    [
        (None, "needs Horovod with PyTorch support"),  # import fails
        (_fake_hvd(gloo_built=lambda: False), "without a controller"),
        (_fake_hvd(gloo_built=lambda: False, mpi_built=lambda: True), "without Gloo"),
        (types.SimpleNamespace(gloo_built=lambda: True, mpi_built=lambda: False), "lacks allgather_async"),
    ],
)
def test_unusable_horovod_builds_are_one_line_errors(monkeypatch, fake, fragment):
    import horovod

    monkeypatch.setenv("HOROVOD_CONTROLLER", "gloo")  # as horovodrun --gloo and commbench's spawner set it
    monkeypatch.setitem(sys.modules, "horovod.torch", fake)
    monkeypatch.setattr(horovod, "torch", fake, raising=False)
    with pytest.raises(UserError) as info:
        import_horovod()
    message = info.value.format_message()
    assert fragment in message and "install-horovod.sh" in message and "\n" not in message


@pytest.mark.slow
def test_names_match_across_ranks_repeat_across_iterations_and_never_collide_in_flight():
    names = _Names()
    first, release_first = names.take("allgather")
    second, release_second = names.take("allgather")
    assert first != second and names.take("reducescatter")[0].endswith(".0")
    release_first()
    again, _ = names.take("allgather")
    assert again == first  # the next iteration reuses the name: Horovod's response cache can hit
    release_second()


@pytest.mark.slow
def test_bound_calls_count_what_recorded_calls_did_under_horovodrun():
    # tests/support/call_counts.py on Horovod: calls, api and the issued-call counter of every op, variant
    # and phase Horovod runs, blocking and window 3, as recording every call made them.
    proc = horovodrun(2, sys.executable, "-m", "tests.support.call_counts")
    assert proc.returncode == 0, _tail(proc)
    line = next(x for x in proc.stdout.splitlines() if CALL_COUNTS_TAG in x)
    found = json.loads(line.split(CALL_COUNTS_TAG, 1)[1])
    assert found["differ"] == {}
    assert found["compared"]["all_gather/flat/comm/window=3"][:2] == [1.0, "allgather"]
    assert found["compared"]["grouped_all_gather/grouped/comm/window=1"][:2] == [1.0, "grouped_allgather"]

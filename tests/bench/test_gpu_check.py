"""bench/gpu-check.sh and bench/gpu_check.py without a GPU: one line saying so and exit 0 where no GPU
exists (CI runs it this way, so it cannot rot); a loud failure where a GPU exists that torch cannot
use; step budgets that fit in 5 minutes, and a step past its budget killed with every process it
started, its output logged as text."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support.distributed import REPO

NO_GPU_LINE = (
    "gpu-check: no usable CUDA GPU here (or torch is missing or a CPU build): nothing to check; run it on a GPU machine"
)


def _script(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "bench" / "gpu-check.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})},
    )


def _fake_nvidia_smi(tmp_path: Path) -> str:
    """A PATH whose nvidia-smi lists one GPU and driver 550.54.15."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *-L*) echo 'GPU 0: NVIDIA H200 (UUID: GPU-0000)';;\n"
        "  *driver_version*) echo '550.54.15';;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is usable here: the script would run the check")
@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="an NVIDIA driver is here: the script must fail")
@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_without_a_gpu_the_check_says_so_in_one_line():
    proc = _script()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines() == [NO_GPU_LINE]
    assert proc.stderr == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is usable here")
@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_a_gpu_that_torch_cannot_use_fails_loudly_with_the_versions(tmp_path):
    proc = _script({"PATH": _fake_nvidia_smi(tmp_path)})
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-check: failed: this machine has an NVIDIA GPU (driver 550.54.15)")
    assert f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'}) cannot use it" in lines[0]


@pytest.mark.slow
def test_a_gpu_with_torch_missing_fails_loudly_too(tmp_path):
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    proc = _script({"PATH": _fake_nvidia_smi(tmp_path), "PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 1
    assert "torch cannot be imported (ImportError: libcudart.so.13" in proc.stderr
    assert "driver 550.54.15" in proc.stderr


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_steps_fit_in_five_minutes_in_the_order_of_what_they_prove():
    check = _gpu_check()
    assert check.LIMIT_S == sum(check.BUDGETS.values()) <= 300
    steps = list(check.BUDGETS)
    assert steps[:2] == ["nccl-ops", "nccl-large"] and steps[-1] == "gloo-cuda"
    assert steps.index("syncbn-cuda") < steps.index("timers") < steps.index("memory-cuda") < steps.index("gloo-cuda")
    source = (REPO / "bench" / "gpu_check.py").read_text()
    # the steps run in the budget table's order
    calls = [source.index(f'"{name}"', source.index("def main")) for name in steps]
    assert calls == sorted(calls)
    assert (REPO / "docs" / "gpu.md").read_text().count("| ") > 0
    for name, seconds in check.BUDGETS.items():
        assert f"| {name} | {seconds} |" in (REPO / "docs" / "gpu.md").read_text(), name


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_a_step_past_its_budget_is_killed_with_every_process_it_started(tmp_path, monkeypatch, capsys):
    """The step starts a grandchild in its own session (as commbench starts its ranks); both die."""
    check = _gpu_check()
    monkeypatch.setitem(check.BUDGETS, "nccl-ops", 6)
    pid_file = tmp_path / "pid"
    step = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "print('half-way', flush=True)\n"
        "time.sleep(300)\n"
    )
    runner = check.Check(tmp_path)
    began = time.monotonic()
    assert runner.run("nccl-ops", [sys.executable, "-c", step]) is None
    assert time.monotonic() - began < 60
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the step's grandchild outlived the step")
    runner.log.close()
    log = (tmp_path / "gpu-check.log").read_text()
    assert "half-way" in log and "b'" not in log and "killed after 6 s" in log
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(
        r"gpu-check: nccl-ops {9}failed  +\d+\.\d s of +6 s  timed out after 6 s \(its budget\); killed with its processes",
        line,
    ), line


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_an_orphan_holding_the_steps_output_does_not_hold_the_check(tmp_path, monkeypatch, capsys):
    """A grandchild whose parent exited before the kill is no longer below the step: the kill misses
    it, and reading the step's output until it closes would wait as long as it lives."""
    check = _gpu_check()
    monkeypatch.setitem(check.BUDGETS, "nccl-ops", 5)
    monkeypatch.setattr(check, "DRAIN_S", 1.0)
    pid_file, middle = tmp_path / "pid", tmp_path / "middle.py"
    # the middle process starts the orphan (its stdout the step's pipe) and exits at once
    middle.write_text(
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '120'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
    )
    step = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, {str(middle)!r}])\n"
        "print('orphaned', flush=True)\n"
        "time.sleep(300)\n"
    )
    runner = check.Check(tmp_path)
    began = time.monotonic()
    try:
        assert runner.run("nccl-ops", [sys.executable, "-c", step]) is None
        assert time.monotonic() - began < 30
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    runner.log.close()
    assert "orphaned" in (tmp_path / "gpu-check.log").read_text()
    assert "held its output open 1 s after the kill" in capsys.readouterr().out


@pytest.mark.slow  # starts processes, or runs whole fake sweeps: outside the quick loop
def test_the_two_rank_step_gives_each_rank_its_own_nccl_host(tmp_path):
    """The nccl-2rank wrapper on the CPU: two ranks under torchrun, each with NCCL_HOSTID of its own."""
    check = _gpu_check()
    report = f"import os; open({str(tmp_path)!r} + '/' + os.environ['RANK'], 'w').write(os.environ['NCCL_HOSTID'])"
    proc = subprocess.run(check.two_ranks([sys.executable, "-c", report]), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    hosts = {(tmp_path / rank).read_text() for rank in ("0", "1")}
    assert hosts == {"commbench-gpu-check-0", "commbench-gpu-check-1"}
    assert check.TWO_RANK_ENV["NCCL_P2P_DISABLE"] == check.TWO_RANK_ENV["NCCL_SHM_DISABLE"] == "1"


@pytest.mark.slow  # runs a step: a process
def test_each_step_line_has_its_time_beside_its_budget(tmp_path, capsys):
    check = _gpu_check()
    runner = check.Check(tmp_path)
    finished = runner.run("timers", [sys.executable, "-c", "print('x')"])
    assert finished is not None and finished.returncode == 0
    runner.say("timers", "passed", "figure")
    runner.say("one-rank-note", "passed", "derived")  # not a step: no time
    runner.log.close()
    timed, derived = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"gpu-check: timers {11}passed  +\d+\.\d s of  15 s  figure", timed), timed
    assert derived == f"gpu-check: one-rank-note    passed  {' ' * 16}  derived"


def test_syncbn_vs_torch_judges_agreement_and_reports_the_ratios(tmp_path, capsys):
    """The time ratios against cuDNN's kernels are figures beside their targets, not verdicts; the
    outputs and gradients must agree."""
    check = _gpu_check()
    runner = check.Check(tmp_path)
    ratios = "syncbn compute: worst fwd 1.45 (target 1.2), fwd+bwd 1.31 (target 1.1)"
    for agreement, verdict in (("3.2e-06", "passed"), ("0.002", "failed")):
        out = f"# table\nsyncbn compute: agreement {agreement}\n{ratios}\n"
        check.syncbn_verdict(runner, check.Finished(0, out, ""))
        line = capsys.readouterr().out.strip()
        assert line.split()[1:3] == ["syncbn-vs-torch", verdict], line
        assert "fwd 1.45 (target 1.2), fwd+bwd 1.31 (target 1.1)" in line
    check.syncbn_verdict(runner, check.Finished(1, "", "Traceback ...\nRuntimeError: boom\n"))
    assert re.search(r"failed +exit 1: RuntimeError: boom$", capsys.readouterr().out.strip())
    runner.log.close()

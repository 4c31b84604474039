"""The backend registry: a backend is its module plus one BackendInfo line, proven on a copy of the package."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from commbench.backends import BACKENDS, backends_help, copies_of
from commbench.backends.copies import no_copies
from tests.support.package_copy import copy_package

# A thin Gloo-alike under another name: torch.distributed's Gloo, commbench's name "twin".
TWIN_MODULE = '''"""twin: torch.distributed over Gloo under another name (the add-a-backend test's)."""

from __future__ import annotations

from commbench.backends.gloo import GlooBackend


class TwinBackend(GlooBackend):
    name = "twin"
'''
TWIN_LINE = (
    '        BackendInfo("twin", "commbench.backends.twin:TwinBackend", "Gloo under another name", '
    "torch_missing, copies.gloo),\n"
)


def test_every_registered_backend_loads_and_names_what_it_needs():
    for name, info in BACKENDS.items():
        assert info.name == name and name in backends_help()
        assert copies_of(name) is info.copies and info.copies is not no_copies  # measured, not forgotten
        if info.spawner is not None:  # named by path: it must resolve
            module, _, attr = info.spawner.partition(":")
            assert callable(getattr(__import__(module, fromlist=[attr]), attr))
        assert info.launchers is None or info.launch_hint
    assert copies_of("no_such_backend") is no_copies


def test_a_rank_under_a_launcher_its_backend_cannot_use_gets_the_hint():
    horovod = BACKENDS["horovod"]
    assert horovod.launcher_error("horovodrun") is None
    assert "horovodrun -np N" in horovod.launcher_error("torchrun")
    assert BACKENDS["gloo"].launcher_error("slurm") is None


@pytest.mark.slow
def test_a_new_backend_is_its_module_and_one_registry_line(tmp_path: Path):
    """Copy the package, add a backend module and its registry line: list, --help and a 2-rank sweep use it."""
    run = copy_package(tmp_path)
    (tmp_path / "commbench" / "backends" / "twin.py").write_text(TWIN_MODULE)
    registry = tmp_path / "commbench" / "backends" / "__init__.py"
    text = registry.read_text()
    anchor = "    for info in (\n"
    assert text.count(anchor) == 1
    registry.write_text(text.replace(anchor, anchor + TWIN_LINE))
    listed = run("list")
    assert listed.returncode == 0 and "twin" in listed.stdout, listed.stdout + listed.stderr
    assert "twin" in " ".join(run("sweep", "--help").stdout.split())
    out = tmp_path / "twin.csv"
    swept = run(
        "sweep", "--backend", "twin", "--op", "all_reduce,all_gather", "--variant", "flat", "--sizes", "8,4K",
        "-n", "2", "-w", "1", "--no-plot", "-o", str(out),
    )  # fmt: skip
    assert swept.returncode == 0, swept.stdout + swept.stderr
    assert "# starting 2 local twin ranks" in swept.stdout
    rows = pd.read_csv(out)
    assert set(rows.backend) == {"twin"} and set(rows.world_size) == {2}
    assert len(rows) == 4 and (rows.status == "ok").all() and (rows.wrong == 0).all()


def test_a_rank_reports_the_host_its_launch_names(monkeypatch: pytest.MonkeyPatch):
    """COMMBENCH_HOST is read once, by the launcher detection; the backend reports what its Launch says."""
    import dataclasses
    import socket

    from commbench.backends.gloo import GlooBackend
    from commbench.backends.job import HOST_ENV, Launch
    from commbench.launch.env import detect

    assert detect({}).host == socket.gethostname()
    assert detect({HOST_ENV: "node7"}).host == "node7"
    with socket.socket() as sock:  # a free loopback port for a one-rank process group
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv(HOST_ENV, "not read here")
    launch = dataclasses.replace(Launch("torchrun", 0, 1, 0, 1, 0, "127.0.0.1", port), host="node7")
    backend = GlooBackend()
    backend.init(30, launch)
    try:
        assert backend.node_info()["host"] == "node7"
    finally:
        backend.close()

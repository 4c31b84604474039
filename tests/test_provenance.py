"""Every host's environment: what a record holds (the CUDA path with its calls faked), how hosts'
differences read, what the fingerprint hashes, and a real two-node run that gathers both records."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from commbench import provenance
from commbench.provenance import collect_host, comparable, differences, fingerprint, layout, transport_variables
from tests.support.distributed import REPO


def test_transport_variables_are_chosen_by_prefix_and_secrets_hidden():
    environ = {
        "NCCL_IB_DISABLE": "1",
        "GLOO_SOCKET_IFNAME": "eth0",
        "HOROVOD_FUSION_THRESHOLD": "0",
        "TORCH_NCCL_BLOCKING_WAIT": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "OMP_NUM_THREADS": "4",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_TOKEN": "xyz",
        "NCCL_API_KEY": "k3y",  # once recorded in clear: KEY was not in provenance's word list
        "HOROVOD_GLOO_AUTH": "a0th",
        "TORCH_DISTRIBUTED_CREDENTIAL": "cr3d",
        "PATH": "/bin",
        "TORCH_HOME": "/x",
    }
    chosen = transport_variables(environ)
    assert list(chosen) == sorted(set(environ) - {"PATH", "TORCH_HOME"})
    assert chosen["NCCL_TOKEN"] == "<hidden>"
    secrets = ("NCCL_TOKEN", "NCCL_API_KEY", "HOROVOD_GLOO_AUTH", "TORCH_DISTRIBUTED_CREDENTIAL")
    assert all(chosen[name] == "<hidden>" for name in secrets)
    assert chosen["NCCL_IB_DISABLE"] == "1" and chosen["GLOO_SOCKET_IFNAME"] == "eth0"


def _fake_cuda(monkeypatch):
    """torch's CUDA calls as a 2-GPU host answers them (no GPU here): the record's CUDA path runs as written."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(provenance.shutil, "which", lambda name: f"/usr/bin/{name}")


def test_a_gpu_host_records_nccl_driver_models_and_topology(monkeypatch):
    _fake_cuda(monkeypatch)
    calls = []

    def nvidia_smi(argv):
        calls.append(argv)
        if argv[1] == "topo":
            return "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X "
        return "NVIDIA H200, 550.54.15\nNVIDIA H200, 550.54.15"

    record = collect_host(
        "nccl", "nccl 2.21.5", 2, None, host="g1", environ={"NCCL_SOCKET_IFNAME": "lo"}, run=nvidia_smi
    )
    assert (record["nccl"], record["cuda"], record["driver"]) == ("2.21.5", "12.4", "550.54.15")
    assert (record["gpu_model"], record["gpu_count"]) == ("NVIDIA H200", 2)
    assert record["topology"].startswith("\tGPU0") and ["nvidia-smi", "topo", "-m"] in calls
    assert (record["interface"], record["interface_source"]) == ("lo", "NCCL_SOCKET_IFNAME")
    assert record["variables"] == {"NCCL_SOCKET_IFNAME": "lo"}


def test_a_cpu_host_records_no_gpu_and_the_route_to_the_master():
    record = collect_host("gloo", "", 2, "127.0.0.1", host="c1", environ={})
    assert (record["nccl"], record["gpu_count"], record["topology"]) == (None, 0, None)
    assert (record["interface"], record["interface_source"]) == ("lo", "route to 127.0.0.1")
    assert record["cpu_cores"] == os.cpu_count() and record["kernel"]


def _record(host: str, **changes) -> dict:
    base = {"host": host, "ranks": 2, "torch": "2.13.0", "nccl": None, "interface": "eth0", "variables": {}}
    return {**base, **changes}


def test_differences_name_the_odd_hosts_and_the_keys():
    same = [_record("a"), _record("b", interface="ens5")]  # the interface's name names a host: not a difference
    assert differences(same) == []
    hosts = [_record("a"), _record("b7", variables={"NCCL_IB_DISABLE": "1"}), _record("c")]
    assert differences(hosts) == ["host b7 has NCCL_IB_DISABLE=1, others unset"]
    two = [_record("a", torch="2.13.0"), _record("b", torch="2.1.0")]
    assert differences(two) == ["host b has torch 2.1.0, the other torch 2.13.0"]
    identity = [_record("a", variables={"HOROVOD_RANK": "0"}), _record("b", variables={"HOROVOD_RANK": "2"})]
    assert differences(identity) == []


def test_the_fingerprint_hashes_the_layout_and_each_kind_of_host_not_their_names():
    one = layout("gloo", 4, ["a", "a", "b", "b"], "world", "blocking", 8, "cpu")
    base = fingerprint(one, [_record("a"), _record("b")])
    assert fingerprint(one, [_record("x"), _record("y", interface="ens5")]) == base  # other nodes, same kind
    assert fingerprint(one, [_record("a"), _record("b", variables={"NCCL_ALGO": "Ring"})]) != base
    assert fingerprint(one, [_record("a", torch="2.1.0"), _record("b", torch="2.1.0")]) != base
    uneven = layout("gloo", 4, ["a", "a", "a", "b"], "world", "blocking", 8, "cpu")
    assert fingerprint(uneven, [_record("a"), _record("b")]) != base
    # The window counts only in nonblocking mode, where it changes what a sample is.
    assert layout("gloo", 4, ["a"] * 4, "world", "blocking", 8, "cpu") == layout(
        "gloo", 4, ["a"] * 4, "world", "blocking", 1, "cpu"
    )
    assert "host" not in comparable(_record("a")) and "interface" not in comparable(_record("a"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_gather_both_records_once_and_warn_about_the_odd_variable(tmp_path):
    """Two torchrun nodes on loopback, named as two hosts (COMMBENCH_HOST), one with NCCL_IB_DISABLE
    set: rank 0 gets both records through the store and warns once, naming the host and the key."""
    port = _free_port()
    out = tmp_path / "two.csv"
    nodes = []
    for node, (host, extra) in enumerate((("hostA", {}), ("hostB", {"NCCL_IB_DISABLE": "1"}))):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        env = {**env, "COMMBENCH_HOST": host, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **extra}
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
        argv += ["--rdzv-backend", "static", "--master-addr", "127.0.0.1", "--master-port", str(port)]
        argv += ["--node-rank", str(node), "-m", "commbench", "sweep", "--op", "all_gather", "--sizes", "8,1K"]
        argv += ["-n", "3", "-w", "1", "--no-plot", "-o", str(out)]
        nodes.append(
            subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    results = [n.communicate(timeout=240) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], results
    warnings = [line for _, err in results for line in err.splitlines() if "the hosts differ" in line]
    assert warnings == ["commbench: warning: the hosts differ: host hostB has NCCL_IB_DISABLE=1, the other unset"]
    document = json.loads(out.with_name("two.env.json").read_text())
    assert [h["host"] for h in document["hosts"]] == ["hostA", "hostB"]
    assert document["layout"]["ranks_per_host"] == [1, 1] and document["layout"]["hosts"] == 2
    import pandas as pd

    frame = pd.read_csv(out)
    assert set(frame.fingerprint) == {document["fingerprint"]} and set(frame.env_file) == {"two.env.json"}
    history = tmp_path / "history.sqlite"  # $COMMBENCH_HISTORY (tests/conftest.py), which rank 0 alone opens
    assert history.exists()


def test_commbench_env_hides_a_key_named_variable():
    from click.testing import CliRunner

    from commbench.cli import main

    result = CliRunner(env={"NCCL_API_KEY": "k3y-in-clear", "NCCL_IB_HCA": "mlx5_0"}).invoke(main, ["env"])
    assert result.exit_code == 0, result.output
    assert "NCCL_API_KEY=<hidden>" in result.output and "NCCL_IB_HCA=mlx5_0" in result.output
    assert "k3y-in-clear" not in result.output


@pytest.mark.slow
def test_a_sweep_records_no_secret_variable_in_its_env_file_or_history(tmp_path):
    """`NCCL_API_KEY=... commbench sweep` once wrote the key in clear to <stem>.env.json and the history."""
    from tests.support.distributed import commbench

    out = tmp_path / "run.csv"
    secrets = {"NCCL_API_KEY": "k3y-in-clear", "HOROVOD_AUTH_TOKEN": "t0ken-in-clear"}
    sweep = commbench(
        "sweep", "--op", "all_gather", "--sizes", "1K", "-n", "3", "--no-plot", "-o", str(out), env=secrets
    )
    assert sweep.returncode == 0, sweep.stderr
    import sqlite3

    with sqlite3.connect(tmp_path / "history.sqlite") as conn:  # $COMMBENCH_HISTORY (tests/conftest.py)
        filed = repr(conn.execute("SELECT * FROM history_runs").fetchall())
    recorded = out.with_suffix(".env.json").read_text() + filed
    assert '"NCCL_API_KEY": "<hidden>"' in out.with_suffix(".env.json").read_text() and "<hidden>" in filed
    assert not any(value in recorded + sweep.stdout + sweep.stderr for value in secrets.values())

"""Where a run ran: one record per host (versions, devices, network, the transport's variables), the
differences between hosts, and the run's fingerprint.

Each host's lowest rank collects its host's record once per run (commbench/run/host_records.py
gathers them to rank 0); rank 0 writes them beside the CSV as `<stem>.env.json`, warns once when
the hosts differ, and files them in the history. `commbench env` shows this host's record.

The fingerprint is a short hash of what makes two runs comparable (docs/history.md lists it): the
run's layout (backend, world size, hosts and ranks per host, group, mode, window, device) and
every host's environment less what names the host (its name, the interface's name, the
variables that number ranks). Two runs with one fingerprint measured the same thing on the same
kind of machines; a driver, NCCL, kernel or variable change gives a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import commbench
from commbench.errors import UserError
from commbench.redact import redact_variable
from commbench.results.ownership import JSON_MARK, WRITTEN_BY
from commbench.results.paths import env_path, write_atomically

ENV_FORMAT = 1  # the layout of <stem>.env.json

# The variables that steer the transports and their threads, recorded from every host.
VARIABLE_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_")
VARIABLE_NAMES = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
# Variables that number a host or a rank: they differ between hosts by design, so they are kept
# in the record but neither compared between hosts nor hashed into the fingerprint.
IDENTITY_VARIABLE = re.compile(r"^HOROVOD_(HOSTNAME|(LOCAL_|CROSS_)?RANK)$")

# Record fields that name the host rather than describe it: left out of comparisons and the fingerprint.
NAMING_FIELDS = ("host", "interface", "interface_source")
# Fields shown as a difference without their values (long text).
TEXT_FIELDS = ("topology",)
SUBPROCESS_TIMEOUT_S = 10.0


def transport_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL_*, GLOO_*, HOROVOD_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, OMP_NUM_THREADS and
    CUDA_VISIBLE_DEVICES variables set here, sorted, each as commbench/redact.py records it (a
    secret's name, NCCL_API_KEY, gives `<hidden>`)."""
    environ = os.environ if environ is None else environ
    chosen = {k: v for k, v in environ.items() if k.startswith(VARIABLE_PREFIXES) or k in VARIABLE_NAMES}
    return {k: redact_variable(k, chosen[k]) for k in sorted(chosen)}


def collect_host(
    backend: str,
    backend_version: str = "",
    ranks: int = 1,
    master_addr: str | None = None,
    host: str | None = None,
    environ: Mapping[str, str] | None = None,
    run: Callable[[list[str]], str | None] | None = None,
) -> dict[str, Any]:
    """This host's record. Reads files and, where nvidia-smi exists, asks it; creates no CUDA context.

    run(argv) returns a command's stdout or None (tests pass a fake nvidia-smi through it).
    """
    import torch

    from commbench import __version__
    from commbench.backends.job import HOST_ENV

    environ = os.environ if environ is None else environ
    run = run or _run
    cuda = torch.cuda.is_available()
    gpus = _gpus(torch, cuda, run)
    interface, source = backend_interface(backend, master_addr, environ)
    return {
        "host": host or environ.get(HOST_ENV) or socket.gethostname(),
        "ranks": ranks,
        "commbench": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "backend": backend,
        "backend_version": backend_version,
        "cuda": torch.version.cuda,
        # NCCL's version is the library's own call: it needs no device, only a CUDA build.
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "driver": gpus["driver"],
        "gpu_model": gpus["model"],
        "gpu_count": gpus["count"],
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "kernel": platform.release(),
        "interface": interface,
        "interface_source": source,
        "interface_speed_mbps": link_speed_mbps(interface) if interface else None,
        "variables": transport_variables(environ),
        "topology": run(["nvidia-smi", "topo", "-m"]) if gpus["count"] and shutil.which("nvidia-smi") else None,
    }


def _run(argv: list[str]) -> str | None:
    """A command's stdout, or None when it is missing, fails or hangs."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _gpus(torch: Any, cuda: bool, run: Callable[[list[str]], str | None]) -> dict[str, Any]:
    """GPU model(s), count and driver version. nvidia-smi answers without a CUDA context in this
    process; without it, the driver's version comes from the kernel module and the count from torch."""
    count = torch.cuda.device_count() if cuda else 0
    names: list[str] = []
    driver = None
    if shutil.which("nvidia-smi"):
        text = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]) or ""
        lines = [[part.strip() for part in line.split(",")] for line in text.splitlines() if line.strip()]
        names = [line[0] for line in lines]
        driver = next((line[1] for line in lines if len(line) > 1), None)
    if driver is None:
        driver = _read("/sys/module/nvidia/version")
    count = count or len(names)
    unique = sorted(set(names))
    model = " + ".join(f"{names.count(n)}x {n}" for n in unique) if len(unique) > 1 else (unique or [None])[0]
    return {"model": model, "count": count, "driver": driver}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()


def backend_interface(
    backend: str, master_addr: str | None, environ: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The network interface the backend's traffic uses, and how that was found.

    The backend's own variable (its BackendInfo's interface_env: GLOO_SOCKET_IFNAME for gloo,
    NCCL_SOCKET_IFNAME for nccl, HOROVOD_GLOO_IFACE for horovod) when it names one interface; else
    the route to the master; else, as Gloo itself decides, the interface holding this host name's address.
    """
    from commbench.backends import BACKENDS

    variable = BACKENDS[backend].interface_env if backend in BACKENDS else None
    names = set(interface_addresses())
    if variable and (value := environ.get(variable, "").strip()):
        first = value.split(",")[0]
        if first in names:  # NCCL also takes prefixes and ^exclusions: those are resolved by the route below
            return first, variable
    addr = master_addr or environ.get("MASTER_ADDR")
    if addr and (name := route_interface(addr)) is not None:
        return name, f"route to {addr}"
    try:
        own = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None, None
    name = next((n for n, a in interface_addresses().items() if own in a), None)
    return (name, "host name's address") if name else (None, None)


def interface_addresses() -> dict[str, list[str]]:
    """Every interface's IPv4 addresses (SIOCGIFADDR), by name; an interface without one maps to []."""
    import fcntl
    import struct

    siocgifaddr = 0x8915
    found: dict[str, list[str]] = {}
    try:
        interfaces = socket.if_nameindex()
    except OSError:
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in interfaces:
            try:
                packed = fcntl.ioctl(sock.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
                found[name] = [socket.inet_ntoa(packed[20:24])]
            except OSError:
                found[name] = []
    return found


def route_interface(addr: str) -> str | None:
    """The interface the kernel routes to addr through. A UDP socket's connect() only looks the
    route up: nothing is sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((addr, 9))
            local = sock.getsockname()[0]
    except OSError:
        return None
    if local.startswith("127."):
        return "lo" if "lo" in interface_addresses() else None
    return next((name for name, addrs in interface_addresses().items() if local in addrs), None)


def link_speed_mbps(interface: str) -> int | None:
    """/sys/class/net/<interface>/speed in Mb/s; None where the kernel gives none (loopback, a link down)."""
    text = _read(f"/sys/class/net/{interface}/speed")
    try:
        speed = int(text) if text else -1
    except ValueError:
        return None
    return speed if speed > 0 else None


# -- differences between hosts --------------------------------------------------------------------


def comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as flat key -> value, less what names the host: the variables appear as their own
    keys (NCCL_IB_DISABLE), identity variables left out."""
    flat = {k: v for k, v in record.items() if k not in (*NAMING_FIELDS, "variables")}
    for name, value in (record.get("variables") or {}).items():
        if not IDENTITY_VARIABLE.match(name):
            flat[name] = value
    return flat


def differences(records: list[Mapping[str, Any]]) -> list[str]:
    """One sentence per key in which the hosts differ, e.g. "host b7 has NCCL_IB_DISABLE=1, others
    unset"; the hosts that share the most common value are the "others". Empty when they agree."""
    if len(records) < 2:
        return []
    flats = [comparable(r) for r in records]
    hosts = [str(r.get("host")) for r in records]
    keys = sorted({k for f in flats for k in f}, key=lambda k: (k.isupper(), k))
    out = []
    for key in keys:
        values = [f.get(key) for f in flats]
        if len({json.dumps(v, sort_keys=True) for v in values}) < 2:
            continue
        counts: dict[str, int] = {}
        for v in values:
            counts[json.dumps(v, sort_keys=True)] = counts.get(json.dumps(v, sort_keys=True), 0) + 1
        common = max(counts, key=lambda v: (counts[v], v == "null"))
        odd = [(h, v) for h, v in zip(hosts, values) if json.dumps(v, sort_keys=True) != common]
        out.append(_sentence(key, odd, json.loads(common), len(records) - len(odd)))
    return out


def _sentence(key: str, odd: list[tuple[str, Any]], common: Any, others: int) -> str:
    shown = lambda v: "unset" if v is None else (f"{key}={v}" if key.isupper() else f"{key} {v}")  # noqa: E731
    if key in TEXT_FIELDS:
        names = ", ".join(h for h, _ in odd[:8]) + (" ..." if len(odd) > 8 else "")
        return f"host{'s' if len(odd) > 1 else ''} {names} differ{'' if len(odd) > 1 else 's'} from the others in {key}"
    by_value: dict[str, list[str]] = {}
    for host, value in odd:
        by_value.setdefault(shown(value), []).append(host)
    parts = [
        f"host{'s' if len(hs) > 1 else ''} {', '.join(hs[:8])}{' ...' if len(hs) > 8 else ''} "
        f"ha{'ve' if len(hs) > 1 else 's'} {value}"
        for value, hs in by_value.items()
    ]
    return f"{'; '.join(parts)}, {'the other' if others == 1 else 'others'} {shown(common)}"


# -- the fingerprint -------------------------------------------------------------------------------

# The run-layout fields the fingerprint hashes (besides every host's comparable environment).
LAYOUT_FIELDS = ("backend", "world_size", "hosts", "ranks_per_host", "group", "mode", "window", "device")


def layout(
    backend: str,
    world_size: int,
    rank_hosts: Iterable[str],
    group: str,
    mode: str,
    window: int,
    device: str,
    workload: str = "",
) -> dict[str, Any]:
    """The run's layout as the fingerprint sees it: how many hosts and ranks, not which. `workload`:
    the digest of what a run's workload was read from (a replay's traces), "" for a sweep."""
    hosts = list(rank_hosts)
    per_host = sorted(hosts.count(h) for h in dict.fromkeys(hosts))
    return {
        **({"workload": workload} if workload else {}),
        "backend": backend,
        "world_size": world_size,
        "hosts": len(per_host),
        "ranks_per_host": per_host,
        "group": group,
        "mode": mode,
        "window": window if mode == "nonblocking" else 1,
        "device": device,
    }


def fingerprint(run_layout: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> str:
    """12 hex digits of SHA-256 over the layout and the set of distinct host environments
    (comparable(), less the per-host rank count that the layout already holds)."""
    envs = sorted(
        {json.dumps({k: v for k, v in comparable(r).items() if k != "ranks"}, sort_keys=True) for r in records}
    )
    hashed = {k: run_layout.get(k) for k in LAYOUT_FIELDS}
    if run_layout.get(
        "workload"
    ):  # a replay's traces: only replays of the same job compare (a sweep's hash is unchanged)
        hashed["workload"] = run_layout["workload"]
    text = json.dumps({"layout": hashed, "hosts": envs}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# -- <stem>.env.json -------------------------------------------------------------------------------


def env_document(run_id: str, run_layout: Mapping[str, Any], records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """What <stem>.env.json holds: the fingerprint with what it hashed, every host, their differences."""
    return {
        JSON_MARK: f"{WRITTEN_BY} {commbench.__version__}",
        "format": ENV_FORMAT,
        "run_id": run_id,
        "fingerprint": fingerprint(run_layout, records),
        "layout": dict(run_layout),
        "hosts": list(records),
        "differences": differences(list(records)),
    }


def write_env(csv_path: Path, document: Mapping[str, Any]) -> Path:
    return write_atomically(env_path(csv_path), json.dumps(document, indent=2, sort_keys=False) + "\n")


def read_env(path: Path) -> dict[str, Any]:
    """A <stem>.env.json file, checked enough to be shown; one-line errors otherwise."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable environment file: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("hosts"), list):
        raise UserError(f"{path} is not a commbench environment file (no 'hosts' list)")
    if document.get("format", 0) > ENV_FORMAT:
        raise UserError(f"{path} was written by a newer commbench (format {document['format']}); upgrade commbench")
    return document


# -- how a record reads ----------------------------------------------------------------------------

# Labels for `commbench env` and the report, in the order shown.
LABELS = {
    "host": "host",
    "ranks": "ranks",
    "commbench": "commbench",
    "python": "python",
    "torch": "torch",
    "backend": "backend",
    "backend_version": "backend version",
    "cuda": "cuda",
    "nccl": "nccl",
    "driver": "driver",
    "gpu_model": "gpu",
    "gpu_count": "gpus",
    "cpu_model": "cpu",
    "cpu_cores": "cpu cores",
    "kernel": "kernel",
    "interface": "interface",
    "interface_speed_mbps": "link speed",
}


def shown(key: str, record: Mapping[str, Any]) -> str:
    """One field of a record as a person reads it."""
    value = record.get(key)
    if key == "interface" and value:
        return f"{value} ({record.get('interface_source')})"
    if key == "interface_speed_mbps":
        return f"{value} Mb/s" if value else "unknown (none in /sys/class/net)"
    if key in ("nccl", "cuda", "driver") and value is None:
        return "none"
    if key == "gpu_model" and value is None:
        return "none"
    return "unknown" if value is None else str(value)


def format_record(record: Mapping[str, Any], width: int = 20) -> list[str]:
    """A host's record as `label  value` lines, its variables and topology last."""
    lines = [f"{label:<{width}} {shown(key, record)}" for key, label in LABELS.items() if key in record]
    variables = record.get("variables") or {}
    lines.append(f"{'variables':<{width}} {'none set' if not variables else ''}".rstrip())
    lines.extend(f"  {name}={value}" for name, value in variables.items())
    if record.get("topology"):
        lines.append(f"{'nvidia-smi topo -m':<{width}}")
        lines.extend(f"  {line}" for line in str(record["topology"]).splitlines())
    return lines


# The run's measuring wall time, added to <stem>.env.json when it ends: what its noise advice
# scaled its cost by, so that a report of the CSV gives the same advice as the run's last line.
WALL_KEY = "measuring_wall_s"
PHASES_KEY = "phases_s"  # rank 0's phase clock: {began, ended (epoch s), totals {phase: s}}


def record_wall_time(csv_path: Path, wall_s: float, phases: dict[str, Any] | None = None) -> None:
    """Add the run's measuring wall time (and rank 0's phase clock, PhaseClock.record()) to its
    environment file (nothing when it is gone)."""
    path = env_path(csv_path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        document[WALL_KEY] = round(wall_s, 3)
        if phases is not None:
            document[PHASES_KEY] = phases
        path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    except (OSError, ValueError):
        return


def recorded_phases(csv_path: Path) -> dict[str, Any] | None:
    """Rank 0's phase clock as the run recorded it (record_wall_time); None when it did not."""
    try:
        value = json.loads(env_path(csv_path).read_text(encoding="utf-8")).get(PHASES_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


def wall_time(csv_paths: list[Path]) -> float | None:
    """The measuring wall time of the runs of these CSVs, summed; None unless every one recorded it."""
    total = 0.0
    for csv_path in csv_paths:
        try:
            value = json.loads(env_path(csv_path).read_text(encoding="utf-8")).get(WALL_KEY)
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(value, (int, float)) or value <= 0:
            return None
        total += value
    return total

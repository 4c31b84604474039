"""A rank's sweep session: the ranks agree on the configuration and form their groups, rank 0
opens its outputs (the CSV, the history, the printed header), and what every job of the sweep
shares is held in one Session."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import commbench
from commbench.backends.base import Backend
from commbench.backends.job import Launch
from commbench.console.display import Display, choose_mode
from commbench.errors import UserError
from commbench.history.store import History, open_run_history
from commbench.ops import world_error
from commbench.ops.base import Op
from commbench.provenance import layout
from commbench.results.metrics_output import MetricsRows
from commbench.results.outputs import OutputPlan
from commbench.results.paths import beside, default_output
from commbench.results.row_outputs import csv_outputs
from commbench.run.agreement import RunFacts, agree, share_refusal
from commbench.run.config import ONE_RANK_NOTE, SweepConfig
from commbench.run.eta import SweepProgress
from commbench.run.groups import Grouping, form_groups
from commbench.run.heartbeat import Heartbeat, because, connect_store
from commbench.run.host_records import begin_record, gather_host_envs
from commbench.run.phases import PhaseClock
from commbench.run.plan import SweepPlan, eta_prior
from commbench.run.resources import memory_error
from commbench.run.sink import HistoryRows, NoiseSummary, Sink
from commbench.run.watchdog import Watchdog, poll_s
from commbench.units import counted


@dataclass
class Session:
    """One rank's sweep once the ranks agree: its configuration, its group, its plan, the watchdog,
    the heartbeat, the progress estimate, and (rank 0 only) the sink its rows go to."""

    cfg: SweepConfig
    grouping: Grouping  # grouping.backend: the ranks an op sees
    plan: SweepPlan
    watchdog: Watchdog
    board: Heartbeat
    progress: SweepProgress
    sink: Sink | None = None
    path: Path | None = None  # rank 0's CSV
    phases: PhaseClock = dataclasses.field(default_factory=PhaseClock)  # where the time goes (the `# time:` line)
    outputs: OutputPlan | None = None  # rank 0's plan of its outputs (results/outputs.py), its claims held

    @property
    def backend(self) -> Backend:
        """The backend as the ops see it: their group's ranks."""
        return self.grouping.backend


@dataclass(frozen=True)
class Agreed:
    """What the ranks agreed on that rank 0's outputs record: the run's facts, its groups, every
    host's environment, and the CSV rank 0 checked it can create."""

    facts: RunFacts
    grouping: Grouping
    host_envs: list[dict]
    path: Path


def open_session(
    cfg: SweepConfig, launch: Launch, backend: Backend, ops: list[Op], phases: PhaseClock | None = None
) -> Session:
    """Agree on the configuration, form the groups and open rank 0's outputs; every refusal (a
    configuration the ranks disagree on, an output or history rank 0 cannot open) is shared, so
    that every rank stops with it. phases: the clock the session's steps are timed on."""
    phases = PhaseClock() if phases is None else phases
    lead = backend.rank == 0
    store = connect_store(launch, min(cfg.timeout, 30.0))
    # The board beats at the watchdog's pace and reads its label; the watchdog asks it for the diagnosis.
    board = Heartbeat(
        store, backend.rank, backend.world_size, poll_s(cfg.timeout), local=lambda: (backend.issued, watchdog.label)
    )
    watchdog = Watchdog(
        cfg.timeout, backend.rank, diagnose=lambda: timed_out(board, watchdog), diagnosis_s=board.diagnosis_s
    )
    board.start()
    watchdog.arm("agreeing on the configuration across ranks")
    path, outputs = None, OutputPlan(cfg.overwrite)
    # Every rank checks its own host or device; rank 0 alone owns the output file and the history.
    error = memory_error(ops, cfg, backend, launch.local_world_size)
    if lead and error is None:
        try:
            path, outputs = cfg.outputs().plan(
                lambda d: default_output(cfg.backend, backend.world_size, d or "results")
            )
        except UserError as exc:
            error = exc.format_message()
    with outputs.released_on_error():  # a refusal here or by a peer leaves no claim behind
        facts = agree(backend, cfg, error, lambda n: world_error(ops, n))
        watchdog.arm(f"creating the --group {cfg.group} process groups")
        grouping = form_groups(backend, cfg.group, facts.rank_hosts)
        watchdog.arm("gathering every host's environment")
        with phases.phase("history"):
            host_envs = gather_host_envs(
                backend, cfg.backend, facts.run_id, facts.rank_hosts, launch.master_addr, store
            )
        sink, error, history = None, None, None
        if lead and path is not None:
            try:
                # Opened once the ranks agree, so that a refused run leaves no history file behind.
                with phases.phase("history"):
                    history = open_run_history(cfg.history)
                agreed = Agreed(facts, grouping, host_envs or [], path)
                sink = _open_sink(cfg, launch, backend, agreed, history, phases)
            except (
                UserError
            ) as exc:  # a history that cannot be opened; or the name was free when checked, but taken since
                error = exc.format_message()
        watchdog.arm("learning whether rank 0 could create its output")
        share_refusal(backend, error)
        watchdog.disarm()
        plan = SweepPlan(cfg, grouping, ops)
        with phases.phase("progress"):
            progress = SweepProgress(plan.cases(), cfg.budget, prior=_last_run_prior(plan, history, sink))
    return Session(cfg, grouping, plan, watchdog, board, progress, sink, path, phases, outputs)


def _open_sink(
    cfg: SweepConfig, launch: Launch, backend: Backend, agreed: Agreed, history: History | None, phases: PhaseClock
) -> Sink:
    """Rank 0's sink, which files its rows in the history too, and the run's header line."""
    facts, grouping, path = agreed.facts, agreed.grouping, agreed.path
    run_layout = layout(
        cfg.backend,
        backend.world_size,
        facts.rank_hosts,
        grouping.kind,
        cfg.mode,
        cfg.window,
        backend.device.type,
        cfg.workload_digest,
    )
    # Each launch of `sweep --repeat` keeps its own hosts' record: <stem>.launch<i>.env.json.
    record_path = beside(path, f".launch{cfg.launch}{path.suffix}") if cfg.launch else path
    with phases.phase("history"):
        record_columns, recorder = begin_record(
            path, facts.run_id, run_layout, agreed.host_envs, cfg.command, history, record_path
        )
    base = {**_run_columns(cfg, backend, grouping, facts), **record_columns}
    # A rank commbench spawned writes to a pipe its launcher reads: the launcher owns the terminal.
    display = Display(choose_mode(sys.stdout, relay=launch.spawned))
    # Creates the files, or refuses before the header.
    outputs = csv_outputs(path, cfg.overwrite, cfg.raw, cfg.append)
    outputs += [*([HistoryRows(recorder)] if recorder is not None else []), NoiseSummary(display, cfg.budget, base)]
    if cfg.metrics_textfile or cfg.metrics_push:
        textfile = Path(cfg.metrics_textfile) if cfg.metrics_textfile else None
        outputs.append(MetricsRows(textfile, cfg.metrics_push))
    sink = Sink(path, base, display, outputs, phases)
    display.write(
        f"# commbench {commbench.__version__}: backend {cfg.backend} ({backend.version()}), "
        f"{counted(backend.world_size, 'rank')} on {facts.hosts}{in_groups(grouping)}, mode {cfg.mode}, "
        f"{cfg.iterations_text}, {cfg.warmup} warm-up{_alone(backend.world_size)}; results -> {path}"
    )
    return sink


def _last_run_prior(plan: SweepPlan, history: History | None, sink: Sink | None) -> dict[tuple[str, int], float]:
    """The ETA's prior from the last complete run of this run's fingerprint in the history (empty
    without one). A history that cannot be read costs the ETA its prior, never the run."""
    if history is None or sink is None:
        return {}
    from commbench.history.query import baseline_runs, run_rows

    fingerprint = str(sink.base.get("fingerprint", ""))
    try:
        # Asked first, so that a history without such a run costs no import of pandas (a second on start-up).
        runs = baseline_runs(history, fingerprint, None, None, 1) if fingerprint else []
        rows = run_rows(history, [r["run_id"] for r in runs]) if runs else None
    except Exception:  # a database error of any driver: the ETA goes on without its prior
        return {}
    return eta_prior(plan, rows) if rows is not None and len(rows) else {}


def _run_columns(cfg: SweepConfig, backend: Backend, grouping: Grouping, facts: RunFacts) -> dict[str, Any]:
    """The columns that are the same on every row of the run."""
    return {
        "run_id": facts.run_id,
        "mode": cfg.mode,
        "world_size": backend.world_size,
        "group": grouping.kind,
        "group_size": grouping.size,
        "backend": cfg.backend,
        "warmup": cfg.warmup,
        "hosts": facts.hosts,
        "node_ranks": facts.node_ranks,
        "torch_version": torch.__version__,
        "backend_version": backend.version(),
        "command": cfg.command,
        "launch": cfg.launch or None,
        "launch_group": cfg.launch_group or None,
    }


def _alone(world_size: int) -> str:
    return f" ({ONE_RANK_NOTE})" if world_size == 1 else ""


def in_groups(grouping: Grouping) -> str:
    """How the header and the table's sections say that ops ran in groups smaller than the world."""
    return "" if grouping.kind == "world" else f", --group {grouping.kind} (groups of {grouping.size})"


def timed_out(board: Heartbeat, watchdog: Watchdog) -> str:
    """The watchdog's diagnosis: name the peers at fault, then tell them this rank is leaving."""
    detail = because(board.diagnose(), "a transport stall")
    board.finish(f"timed out in {watchdog.label}")
    return detail

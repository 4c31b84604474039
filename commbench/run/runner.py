"""One rank's sweep: join the group, agree on the configuration, measure every case, write rows.

Used in-process under a launcher (torchrun, horovodrun) and by every rank `commbench sweep` spawns.
The jobs live apart: the session (agreement, groups, outputs) in commbench/run/session.py, what to
measure in commbench/run/plan.py, the rotation over cases in commbench/run/rotation.py, a visit's
iterations in commbench/run/iterations.py, the transport's errors in commbench/run/failures.py.
"""

from __future__ import annotations

from collections.abc import Callable

from commbench.backends import load_backend
from commbench.backends.base import Backend
from commbench.backends.job import Launch
from commbench.errors import ExitCode, UserError
from commbench.lazy import resolve
from commbench.ops.base import Op
from commbench.run.config import SWEEP_PROGRAM, Outcome, SweepConfig
from commbench.run.failures import CollectiveFailure, first_sentence
from commbench.run.heartbeat import because
from commbench.run.phases import PhaseClock
from commbench.run.rotation import sweep_op
from commbench.run.session import Session, in_groups, open_session
from commbench.run.watchdog import bounded
from commbench.units import counted

TRANSPORT_TIMEOUT_SLACK_S = 10.0
# A rank program (SweepConfig.program): run on a process group this rank has joined.
RankProgram = Callable[[SweepConfig, Launch, Backend], Outcome]


def run_rank(cfg: SweepConfig, launch: Launch) -> Outcome:
    """Run the sweep on this rank; the outcome's code is 0 (ok) or 1 (wrong results)."""
    phases = PhaseClock()  # rank 0's `# time:` categories (commbench/run/phases.py)
    with phases.phase("startup"):
        ops = cfg.built_ops()
        backend = load_backend(cfg.backend)(**({"device": cfg.device} if cfg.device != "auto" else {}))
    # The transport's own timeout is only a backstop: the watchdog fires first with the step's label and
    # a diagnosis, where NCCL's would abort the process with neither.
    try:
        with phases.phase("startup"):
            backend.init(cfg.timeout + TRANSPORT_TIMEOUT_SLACK_S, launch)
    except RuntimeError as exc:  # torch.distributed's errors: the store or a peer cannot be reached
        raise CollectiveFailure(f"rank {launch.rank}: could not join the process group: {first_sentence(exc)}") from exc
    try:
        if cfg.program == SWEEP_PROGRAM:
            return run_sweep(cfg, launch, backend, ops, phases)
        # Another program on the same launch (`commbench isolate`'s node sweep), named in the config.
        program: RankProgram = resolve(cfg.program)
        return program(cfg, launch, backend)
    finally:
        backend.close()


def run_sweep(
    cfg: SweepConfig, launch: Launch, backend: Backend, ops: list[Op] | None = None, phases: PhaseClock | None = None
) -> Outcome:
    """The sweep on a process group this rank has joined (backend.init done): agree, measure every
    case of the ops (cfg.built_ops() when not given), write rank 0's rows; the outcome's code is 0
    (ok) or 1 (wrong results). phases: the clock the rank's start-up was timed on (a fresh one when
    not given)."""
    phases = PhaseClock() if phases is None else phases
    with phases.phase("startup"):
        session = open_session(cfg, launch, backend, cfg.built_ops() if ops is None else ops, phases)
    return measure_session(session, lambda: _sweep_ops(session, backend))


def _sweep_ops(session: Session, backend: Backend) -> int:
    """Every op in every dtype; returns the wrong elements found."""
    cfg, sink = session.cfg, session.sink
    wrong_total = 0
    for op in session.plan.ops:
        if sink:
            names = {"op": [op.name], "variant": op.variants, "phase": op.phases, "dtype": cfg.dtypes}
            sink.section(f"{op.name} on {counted(backend.world_size, 'rank')}{in_groups(session.grouping)}", names)
        for dtype in cfg.dtypes:
            wrong_total += sweep_op(session, op, dtype)
    return wrong_total


def measure_session(session: Session, body: Callable[[], int]) -> Outcome:
    """Run a session's measurements (body returns the wrong elements found); a collective that fails
    is diagnosed (which peer) before the exit, and rank 0's outputs are closed whatever happens.
    The sweep's body is its ops; `commbench replay` has its own."""
    sink, board, watchdog = session.sink, session.board, session.watchdog
    try:
        wrong_total = body()
    except CollectiveFailure as exc:
        watchdog.disarm()  # this path diagnoses; the watchdog must not race it with a second report
        cause = "the transport refused the call" if exc.refusal else "a transport error"
        detail = because(bounded(board.diagnose, board.diagnosis_s), cause)
        board.finish(f"failed in {watchdog.label}")
        watchdog.arm(f"leaving the process group after {watchdog.label} failed")
        raise CollectiveFailure(f"{exc}; {detail}") from exc
    except UserError as exc:  # rank 0's results file took no more rows (a full disk): the peers' line names it
        board.finish(f"stopped: {exc.format_message().split(';')[0]}")
        raise
    except BaseException as exc:
        board.finish(f"stopped in {watchdog.label}")
        if sink and isinstance(exc, KeyboardInterrupt):
            sink.interrupted = True  # the history says so, not only `incomplete`
        raise
    finally:
        board.finish("finished")  # a no-op after either failure above: the first state stays
        if sink:
            with session.phases.phase("teardown"):
                sink.close()
    delivered = sink.finish(wrong_total) if sink else True
    code = ExitCode.FAILED if wrong_total else ExitCode.OK if delivered else ExitCode.UNDELIVERED
    return Outcome(code, session.path, session.outputs)

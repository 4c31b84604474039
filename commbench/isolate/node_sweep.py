"""One rank's node sweep: host pairs in the rounds a screen proposes, local pairs, the compute
probe, the bisection. The measuring is here; the verdicts are judge.py's, over what it measured.
Every rank runs this and reaches the same verdict from the same gathered samples; rank 0 writes
the CSV, the verdict file and the table.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import commbench
from commbench.backends.base import Backend
from commbench.backends.job import Launch
from commbench.console.lines import say
from commbench.errors import ExitCode, UserError
from commbench.isolate.cluster import Cluster
from commbench.isolate.exchanges import (
    PROBE_SAMPLES,
    PROBE_WINDOW_S,
    ComputeProbe,
    Exchange,
    Rounds,
    compute_probe,
)
from commbench.isolate.findings import (
    BisectStep,
    ComputeFindings,
    ComputeSeconds,
    Cut,
    LevelFindings,
    RoundCount,
    Verdict,
)
from commbench.isolate.judge import Level, Measure, Pair, RailBw, judge_compute, judge_level, screen_level
from commbench.isolate.options import BANDWIDTH_BOUND, PROBE_MAX_S, PROBE_SIZES, IsolateOptions
from commbench.isolate.report import COLUMNS, format_verdict, verdict_path
from commbench.isolate.schedule import circle_rounds
from commbench.isolate.screens import SCREENS, Bisect, Seen, pair_screen
from commbench.results.outputs import OutputPlan
from commbench.results.paths import default_output, write_atomically
from commbench.results.writer import CsvAppender
from commbench.run.agreement import PeerError, RunFacts, agree
from commbench.run.config import Outcome, SweepConfig
from commbench.run.failures import CollectiveFailure, first_sentence
from commbench.run.heartbeat import Heartbeat, because, connect_store
from commbench.run.session import timed_out
from commbench.run.watchdog import Watchdog, bounded, poll_s

ELASTIC_RUN_ENV = "TORCHELASTIC_RUN_ID"  # torchrun's agent sets it in every worker it starts
# Gloo binds a process group's sockets to the interface this names when the group is created.
GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"


def isolate_rank(cfg: SweepConfig, launch: Launch, backend: Backend) -> Outcome:
    """Run the node sweep on this rank; the outcome's code is 1 when anything was flagged, else 0.
    Rank 0 plans its outputs (results/outputs.py) before the ranks agree, so that a refusal stops
    every rank; the outcome holds that plan, with --json claimed where this process is the command's
    (under a launcher), for the command to write the verdict into and release."""
    opts = IsolateOptions.from_dict(cfg.program_options)
    lead = backend.rank == 0
    board, watchdog = _board(cfg, launch, backend)
    watchdog.arm("agreeing on the configuration across ranks")
    path, error, outputs = None, None, OutputPlan(cfg.overwrite)
    if not backend.torch_process_group:
        error = f"isolate needs torch process groups (gloo, nccl); the {backend.name} backend has none"
    elif lead:
        try:
            path, outputs = cfg.outputs().plan(
                lambda d: default_output(cfg.backend, backend.world_size, d or "results")
            )
        except UserError as exc:
            error = exc.format_message()
    with outputs.released_on_error():  # a refusal here or by a peer, a failed exchange: no claim left behind
        facts, cluster = _agreed(cfg, opts, backend, watchdog, error)
        writer = CsvAppender(path, COLUMNS, overwrite=cfg.overwrite) if lead and path is not None else None
        base = {"run_id": facts.run_id, "backend": cfg.backend, "world_size": backend.world_size}
        board.hosts = tuple(facts.rank_hosts)
        verdict = _measured(NodeSweep(cfg, opts, backend, cluster, watchdog, writer, base), board)
        if lead and path is not None:
            verdict = replace(verdict, csv=str(path))
            write_atomically(verdict_path(path), json.dumps(verdict.to_json(), indent=1))
            say(format_verdict(verdict))
            say(f"# done: results in {path}, verdict in {verdict_path(path)}")
    code = ExitCode.FAILED if verdict.flagged or verdict.wrong else ExitCode.OK
    if code == ExitCode.FAILED and under_torchrun(launch):
        # torchrun reports any rank's non-zero exit as a crash (a ChildFailedError traceback on every
        # node, "the job failed"): a finding is not one. The verdict file carries it instead.
        if lead:
            where = verdict_path(path) if path is not None else "the verdict file"
            say(
                f"# isolate: exit code 0 under torchrun (it turns a rank's exit 1 into a crash report); "
                f"the finding is in {where}: flagged_hosts, flagged_links, flagged_rails, flagged_ranks"
            )
        code = ExitCode.OK
    return Outcome(code, path, outputs if lead else None)


def _agreed(
    cfg: SweepConfig, opts: IsolateOptions, backend: Backend, watchdog: Watchdog, error: str | None
) -> tuple[RunFacts, Cluster]:
    """The ranks agree (an error, rank 0's or any rank's, stops them all) on a cluster the options
    can sweep; each rank's exchanges then bind to its rail's interface (--rails)."""
    facts = agree(backend, cfg, error)
    watchdog.disarm()
    cluster = Cluster.of(facts.rank_hosts)
    if (refusal := sweep_refusal(cluster, opts, cfg.backend)) is not None:
        if backend.rank == 0:
            raise UserError(refusal)
        raise PeerError(refusal)
    if interfaces := rail_interfaces(opts.rails):
        # The exchanges' process groups, created from here on, bind local rank g's sockets to rail g.
        os.environ[GLOO_IFNAME_ENV] = interfaces[cluster.local_index(backend.rank)]
    return facts, cluster


def _measured(sweep: NodeSweep, board: Board) -> Verdict:
    """The sweep's verdict; a peer that dies mid-screen is named by rank and host, as a timeout would be."""
    watchdog = sweep.watchdog
    try:
        return sweep.run()
    except RuntimeError as exc:  # a transport error
        watchdog.disarm()
        detail = board.named(because(bounded(board.diagnose, board.diagnosis_s), "a transport error"))
        board.finish(f"failed in {watchdog.label}")
        raise CollectiveFailure(
            f"rank {sweep.backend.rank}: {watchdog.label} failed: {first_sentence(exc)}; {detail}"
        ) from exc
    finally:
        board.finish("finished")
        if sweep.writer is not None:
            sweep.writer.close()


class Board(Heartbeat):
    """The progress board of the sweep's ranks (run/heartbeat.py), whose diagnosis of a peer that is
    gone or behind names its host beside its rank."""

    hosts: tuple[str, ...] = ()  # by rank, once the ranks have agreed

    def named(self, text: str) -> str:
        return re.sub(r"\brank (\d+)\b", lambda m: f"rank {m[1]} ({self.host_of(int(m[1]))})", text)

    def host_of(self, rank: int) -> str:
        return f"on {self.hosts[rank]}" if rank < len(self.hosts) else "host unknown"


def _board(cfg: SweepConfig, launch: Launch, backend: Backend) -> tuple[Board, Watchdog]:
    """The board beats at the watchdog's pace and reads its label; on a timeout the watchdog asks
    it which peer is at fault, by rank and host."""
    store = connect_store(launch, min(cfg.timeout, 30.0))
    board = Board(
        store, backend.rank, backend.world_size, poll_s(cfg.timeout), local=lambda: (backend.issued, watchdog.label)
    )
    watchdog = Watchdog(
        cfg.timeout,
        backend.rank,
        diagnose=lambda: board.named(timed_out(board, watchdog)),
        diagnosis_s=board.diagnosis_s,
    )
    board.start()
    return board, watchdog


def under_torchrun(launch: Launch, env: Mapping[str, str] | None = None) -> bool:
    """Ranks torchrun's agent started: not commbench's own spawner (its launcher passes exit 1
    through), nor ranks given RANK and WORLD_SIZE by hand or by a script."""
    env = os.environ if env is None else env
    return launch.kind == "torchrun" and not launch.spawned and ELASTIC_RUN_ENV in env


class NodeSweep:
    """The sweep's steps in order: the host screen, the local pairs, the compute probe, the bisection."""

    def __init__(
        self,
        cfg: SweepConfig,
        opts: IsolateOptions,
        backend: Backend,
        cluster: Cluster,
        watchdog: Watchdog,
        writer: CsvAppender | None,
        base: dict[str, Any],
    ) -> None:
        self.cfg, self.opts, self.backend, self.cluster = cfg, opts, backend, cluster
        self.watchdog, self.writer, self.base = watchdog, writer, base
        self.rounds = Rounds(backend, cfg, watchdog)
        self.lead = backend.rank == 0
        self.wrong = 0  # wrong elements received, over every checked exchange
        self.probe_s = 0.0  # the compute probe's wall time
        self.round_s: list[float] = []  # every host-pair round's wall time, the slowest rank's
        self.rails = bool(opts.rails) and cluster.local_size > 1

    def say(self, text: str) -> None:
        if self.lead:
            say(text)

    def run(self) -> Verdict:
        c, opts = self.cluster, self.opts
        everyone = list(range(len(c.hosts)))
        hosts = Level("host", everyone, lambda h: c.hosts[h])
        screen = pair_screen(opts.screen, len(c.hosts), zlib.crc32(str(self.base["run_id"]).encode()))
        self.say(
            f"# commbench {commbench.__version__} isolate: {len(c.hosts)} hosts x {c.local_size} rank(s), "
            f"backend {self.cfg.backend}, screen {screen.name} ({screen.plan()})"
            + (f", {c.local_size} rails" if self.rails else "")
        )
        start = time.perf_counter()
        probe = compute_probe(self.backend, self.watchdog)
        self.probe_s = self.backend_max(time.perf_counter() - start)
        first = screen.next_round(Seen(len(c.hosts))) or []
        size = opts.size or self.probe_size([u for a, b in first for u in self.units(a, b)])
        screened = screen_level(hosts, screen, self.host_measure(size), opts.threshold, opts.k)
        local, local_rounds = self.local_pairs(size) if c.local_size > 1 else (None, 0)
        compute = self.judge_compute(probe)
        bisect = self.bisect(size) if opts.bisect else None
        host = screened.findings
        flagged_ranks = sorted(set(local.flagged_ranks if local else []) | set(compute.flagged))
        return Verdict(
            hosts=list(c.hosts),
            ranks={str(r): c.rank_name(r) for h in c.ranks for r in h},
            size_bytes=size,
            latency_bytes=opts.latency_size,
            threshold=opts.threshold,
            k=opts.k,
            screen=screen.name,
            rounds=RoundCount(screened.screen_rounds, screened.confirmation_rounds, local_rounds, len(bisect or [])),
            rounds_used=screened.screen_rounds + screened.confirmation_rounds,
            round_seconds=self.round_s,
            host=host,
            local=local,
            compute=compute,
            bisect=bisect,
            flagged_hosts=host.flagged,
            flagged_links=host.flagged_links + (local.flagged_links if local else []),
            flagged_rails=host.flagged_rails,
            flagged_ranks=flagged_ranks,
            wrong=self.wrong,
            rails=self.rails,
        )

    def backend_max(self, value: float) -> float:
        return max(self.backend.all_gather_object(value))

    def units(self, a: int, b: int) -> list[list[int]]:
        """The rank groups whose results a host pair gives: one per rail where rails are judged
        ([a_g, b_g]), else the pair's every rank at once (its slowest rank's time)."""
        ranks = self.cluster.pair_ranks(a, b)
        return [ranks[i : i + 2] for i in range(0, len(ranks), 2)] if self.rails else [ranks]

    def host_measure(self, size: int) -> Measure:
        """A round of host pairs as judge.py asks for it: timed, written, its bandwidths per rail."""
        c = self.cluster
        count = {False: 0, True: 0}

        def measure(pairs: Sequence[Pair], label: str, confirming: bool) -> dict[Pair, RailBw]:
            count[confirming] += 1
            sizes = [size] if confirming else [size, self.opts.latency_size]
            start = time.perf_counter()
            kind = "confirm_host" if confirming else "host_pair"
            found = self.exchange(
                [(c.hosts[a], c.hosts[b], self.units(a, b)) for a, b in pairs], sizes, label, count[confirming], kind
            )
            self.round_s.append(self.backend_max(time.perf_counter() - start))
            self.say(f"# {label}: {len(pairs)} pair(s) at once, {self.round_s[-1]:.2f} s")
            return dict(zip(pairs, found))

        return measure

    def local_pairs(self, size: int) -> tuple[LevelFindings, int]:
        """Each host's local ranks pair by pair in the circle schedule, every host at once, judged
        as one level; (its findings, the rounds they took, confirmations included)."""
        c = self.cluster
        ranks = Level("local", [r for h in c.ranks for r in h], c.rank_name, c.host_of)
        count = {False: 0, True: 0}

        def measure(pairs: Sequence[Pair], label: str, confirming: bool) -> dict[Pair, RailBw]:
            count[confirming] += 1
            sizes = [size] if confirming else [size, self.opts.latency_size]
            kind = "confirm_local" if confirming else "local_pair"
            units = [(c.rank_name(a), c.rank_name(b), [[a, b]]) for a, b in pairs]
            return dict(zip(pairs, self.exchange(units, sizes, f"local {label}", count[confirming], kind)))

        bw: dict[Pair, RailBw] = {}
        schedule = circle_rounds(c.local_size)
        for r, local_pairs in enumerate(schedule):
            pairs = [(h[i], h[j]) for h in c.ranks for i, j in local_pairs]
            bw.update(measure(pairs, f"round {r + 1}/{len(schedule)}", False))
        judged = judge_level(ranks, bw, measure, self.opts.threshold, self.opts.k)
        return judged.findings, len(schedule) + judged.rounds

    # -- measuring -------------------------------------------------------------------------------
    def exchange(
        self,
        pairs: Sequence[tuple[str, str, list[list[int]]]],
        sizes: Sequence[int],
        label: str,
        round_no: int,
        kind: str,
    ) -> list[RailBw]:
        """Every pair's units at once, at every size (pairs: the two names and the rank groups of
        each, [a_i, b_i, ...]); each pair's first-size bandwidth per unit, and the CSV rows."""
        units = [unit for _, _, pair_units in pairs for unit in pair_units]
        groups = [unit[i : i + 2] for unit in units for i in range(0, len(unit), 2)]  # [a_i, b_i]
        found = iter(self.rounds.run(units, sizes, f"isolate {label}", groups=groups))
        out = []
        for index, (name_a, name_b, pair_units) in enumerate(pairs):
            mine = [next(found) for _ in pair_units]
            if index == 0:  # the check counts wrong elements over every rank of the round, once per size
                self.wrong += sum(max(ex.wrong, 0) for ex in mine[0])
            for rail, (unit, exchanges) in enumerate(zip(pair_units, mine)):
                self.write(kind, round_no, (name_a, name_b), unit, exchanges, rail if len(pair_units) > 1 else None)
            out.append(tuple(exchanges[0].busbw_gbps for exchanges in mine))
        return out

    def write(
        self,
        kind: str,
        round_no: int,
        names: tuple[str, str],
        group: list[int],
        exchanges: list[Exchange],
        rail: int | None,
    ) -> None:
        if self.writer is None:
            return
        for ex in exchanges:
            s = ex.stats
            self.writer.write(
                {
                    **self.base,
                    "kind": kind,
                    "round": round_no,
                    "host_a": names[0],
                    "host_b": names[1],
                    "rail": "" if rail is None else rail,
                    "ranks_a": ";".join(map(str, group[0::2])),
                    "ranks_b": ";".join(map(str, group[1::2])),
                    "size_bytes": ex.size_bytes,
                    "iters": ex.iters,
                    "time_us_p50": s.time_us_p50,
                    "time_us_p50_lo": s.time_us_p50_lo,
                    "time_us_p50_hi": s.time_us_p50_hi,
                    "busbw_gbps": ex.busbw_gbps,
                    "wrong": ex.wrong,
                }
            )

    def probe_size(self, units: list[list[int]]) -> int:
        """The smallest size (64K, 256K, ... 64M) whose exchange takes BANDWIDTH_BOUND times the
        latency size's, on the median pair of the first round: there the pair's bandwidth dominates."""

        def median_us(size: int) -> float:
            pairs = [unit[i : i + 2] for unit in units for i in range(0, len(unit), 2)]
            found = self.rounds.run(units, [size], "isolate size probe", iters=5, groups=pairs)
            return statistics.median(ex[0].stats.time_us_p50 for ex in found)

        floor = median_us(self.opts.latency_size)
        for size in PROBE_SIZES:
            took = median_us(size)
            if took >= BANDWIDTH_BOUND * floor or took * 1e-6 >= PROBE_MAX_S:
                break
        self.say(f"# size probe: {size} bytes ({took:.0f} us against {floor:.0f} us at {self.opts.latency_size} bytes)")
        return size

    # -- compute and bisection -------------------------------------------------------------------
    def judge_compute(self, probe: ComputeProbe) -> ComputeFindings:
        """judge.judge_compute over the probe of every rank at once; each re-timing is the probe
        again on the suspect and its reference alone (every rank takes part in the call)."""

        def retime(rank: int, reference: int) -> tuple[float, float]:
            again = compute_probe(self.backend, self.watchdog, only={rank, reference}, kernel=probe.kernel)
            return again.rates[rank], again.rates[reference]

        rates = dict(enumerate(probe.rates))
        start = time.perf_counter()
        judged = judge_compute(rates, retime, self.opts.threshold)
        retime_s = self.backend_max(time.perf_counter() - start)
        return ComputeFindings(
            gflops={self.cluster.rank_name(r): v for r, v in rates.items()},
            flops=probe.flops,
            bar=Cut.of(judged.bar),
            suspects=judged.suspects,
            reference=judged.reference,
            window_s=PROBE_WINDOW_S,
            samples=PROBE_SAMPLES,
            seconds=ComputeSeconds(self.probe_s, retime_s),
            beside_gflops={str(r): v for r, v in judged.beside.items()},
            flagged=judged.flagged,
        )

    def bisect(self, size: int) -> list[BisectStep]:
        """The bisection screen's steps, each an all_reduce over both of its halves at once."""
        reduce_rounds = Rounds(self.backend, self.cfg, self.watchdog, "all_reduce", "flat")
        c = self.cluster
        screen = Bisect(len(c.hosts), self.opts.threshold)
        seen = Seen(len(c.hosts))
        while (halves := screen.next_round(seen)) is not None:
            groups = [[r for h in part for r in c.ranks[h]] for part in halves]
            found = reduce_rounds.run(groups, [size], f"isolate bisection over {sum(map(len, halves))} hosts")
            seen.add(halves, {part: (ex[0].stats.time_us_p50,) for part, ex in zip(halves, found)})
        return [
            BisectStep([[c.hosts[h] for h in part] for part in halves], list(times), result)
            for halves, times, result in screen.steps(seen)
        ]


def sweep_refusal(cluster: Cluster, opts: IsolateOptions, backend: str) -> str | None:
    """Why these options cannot sweep these hosts, in one line that says what to do; None if they can."""
    if (refusal := cluster.refusal()) is not None:
        return refusal
    hosts = len(cluster.hosts)
    if (refusal := SCREENS[opts.screen].refusal(hosts)) is not None:
        return refusal
    if opts.bisect and (refusal := Bisect.refusal(hosts)) is not None:
        return refusal
    if opts.rails and cluster.local_size == 1:
        return (
            "--rails judges each local rank's NIC (local rank g pairs with local rank g), but every host runs "
            "1 rank; start one rank per rail on each host (--nproc-per-node), or leave --rails out"
        )
    interfaces = rail_interfaces(opts.rails)
    if interfaces and len(interfaces) != cluster.local_size:
        return (
            f"--rails {opts.rails} names {len(interfaces)} interface(s), but each host runs {cluster.local_size} "
            f"ranks; name one interface per local rank, in local rank order"
        )
    if interfaces and backend != "gloo":
        return f"--rails {opts.rails}: interfaces bind Gloo's sockets; on {backend} use --rails auto (the transport picks each rank's NIC)"
    return None


def rail_interfaces(rails: str | None) -> list[str]:
    """The interfaces --rails binds local rank g's exchanges to, in order (none for auto)."""
    return [] if rails in (None, "auto") else rails.split(",")

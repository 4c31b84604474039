"""One rank's node sweep: host pairs in circle rounds, local pairs, the compute probe, the
verdicts and their confirmation. Every rank runs this and reaches the same verdict from the same
gathered samples; rank 0 writes the CSV, the verdict file and the table.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import commbench
from commbench.backends.base import Backend
from commbench.backends.job import Launch
from commbench.console.lines import say
from commbench.errors import ExitCode, UserError
from commbench.isolate.cluster import Cluster
from commbench.isolate.exchanges import PROBE_SAMPLES, PROBE_WINDOW_S, Exchange, Rounds, compute_probe
from commbench.isolate.options import BANDWIDTH_BOUND, PROBE_MAX_S, PROBE_SIZES, IsolateOptions
from commbench.isolate.report import COLUMNS, format_verdict, verdict_path
from commbench.isolate.schedule import circle_rounds, pack
from commbench.isolate.verdict import (
    Bar,
    confirmed_link,
    confirmed_node,
    link_confirmation,
    low_outliers,
    node_confirmation,
    suspects,
)
from commbench.results.paths import default_output, write_atomically
from commbench.results.writer import CsvAppender
from commbench.run.agreement import PeerError, agree
from commbench.run.config import Outcome, SweepConfig
from commbench.run.watchdog import Watchdog

Pair = tuple[int, int]
ELASTIC_RUN_ENV = "TORCHELASTIC_RUN_ID"  # torchrun's agent sets it in every worker it starts
CONFIRM_REPEATS = 2
# The re-timings of a compute suspect beside its reference: a rank still shares its cores with
# whatever else the host runs, so one slow re-timing is not enough to flag it.
COMPUTE_REPEATS = 3


def isolate_rank(cfg: SweepConfig, launch: Launch, backend: Backend) -> Outcome:
    """Run the node sweep on this rank; the outcome's code is 1 when anything was flagged, else 0."""
    opts = IsolateOptions.from_dict(cfg.program_options)
    lead = backend.rank == 0
    watchdog = Watchdog(cfg.timeout, backend.rank)
    watchdog.arm("agreeing on the configuration across ranks")
    path, error = None, None
    if not backend.torch_process_group:
        error = f"isolate needs torch process groups (gloo, nccl); the {backend.name} backend has none"
    elif lead:
        try:
            path, _ = cfg.outputs().plan(lambda d: default_output(cfg.backend, backend.world_size, d or "results"))
        except UserError as exc:
            error = exc.format_message()
    facts = agree(backend, cfg, error)
    watchdog.disarm()
    cluster = Cluster.of(facts.rank_hosts)
    if (refusal := cluster.refusal()) is not None:
        if lead:
            raise UserError(refusal)
        raise PeerError(refusal)
    writer = CsvAppender(path, COLUMNS, overwrite=cfg.overwrite) if lead and path is not None else None
    base = {"run_id": facts.run_id, "backend": cfg.backend, "world_size": backend.world_size}
    sweep = NodeSweep(cfg, opts, backend, cluster, watchdog, writer, base)
    try:
        verdict = sweep.run()
    finally:
        if writer is not None:
            writer.close()
    if lead and path is not None:
        verdict["csv"] = str(path)
        text = json.dumps(verdict, indent=1)
        write_atomically(verdict_path(path), text)
        if opts.json:
            write_atomically(Path(opts.json), text)
        say(format_verdict(verdict))
        say(f"# done: results in {path}, verdict in {verdict_path(path)}")
    flagged = verdict["flagged_hosts"] or verdict["flagged_links"] or verdict["flagged_ranks"]
    code = ExitCode.FAILED if flagged or verdict["wrong"] else ExitCode.OK
    if code == ExitCode.FAILED and under_torchrun(launch):
        # torchrun reports any rank's non-zero exit as a crash (a ChildFailedError traceback on every
        # node, "the job failed"): a finding is not one. The verdict file carries it instead.
        if lead:
            where = opts.json or (verdict_path(path) if path is not None else "the verdict file")
            say(
                f"# isolate: exit code 0 under torchrun (it turns a rank's exit 1 into a crash report); "
                f"the finding is in {where}: flagged_hosts, flagged_links, flagged_ranks"
            )
        code = ExitCode.OK
    return Outcome(code, path)


def under_torchrun(launch: Launch, env: Mapping[str, str] | None = None) -> bool:
    """Ranks torchrun's agent started: not commbench's own spawner (its launcher passes exit 1
    through), nor ranks given RANK and WORLD_SIZE by hand or by a script."""
    env = os.environ if env is None else env
    return launch.kind == "torchrun" and not launch.spawned and ELASTIC_RUN_ENV in env


@dataclass
class Level:
    """Nodes whose pairs are judged together: hosts (their ranks exchange side by side) or the ranks
    of each host (local pairs). pair_ranks(a, b) is the rank group of a pair of nodes."""

    kind: str
    nodes: list[int]
    name: Callable[[int], str]
    pair_ranks: Callable[[int, int], list[int]]
    peers: Callable[[int], Sequence[int]]  # the nodes a node can be paired with (a local rank: its host's)
    bw: dict[Pair, float] = field(default_factory=dict)


class NodeSweep:
    """The sweep's steps in order; results accumulate in the verdict."""

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

    def say(self, text: str) -> None:
        if self.lead:
            say(text)

    def run(self) -> dict[str, Any]:
        c, opts = self.cluster, self.opts
        everyone = list(range(len(c.hosts)))
        hosts = Level("host", everyone, lambda h: c.hosts[h], c.pair_ranks, lambda h: everyone)
        schedule = circle_rounds(len(c.hosts))
        self.say(
            f"# commbench {commbench.__version__} isolate: {len(c.hosts)} hosts x {c.local_size} rank(s), "
            f"backend {self.cfg.backend}, {len(schedule)} rounds of host pairs"
        )
        start = time.perf_counter()
        probe = compute_probe(self.backend, self.watchdog)
        self.probe_s = self.backend_max(time.perf_counter() - start)
        size = opts.size or self.probe_size([c.pair_ranks(a, b) for a, b in schedule[0]])
        sizes = [size, opts.latency_size]
        round_s = []
        for r, pairs in enumerate(schedule):
            start = time.perf_counter()
            self.exchange_pairs(hosts, pairs, sizes, f"round {r + 1}/{len(schedule)}", r + 1)
            round_s.append(self.backend_max(time.perf_counter() - start))
            self.say(f"# round {r + 1}/{len(schedule)}: {len(pairs)} pair(s) at once, {round_s[-1]:.2f} s")
        verdict: dict[str, Any] = {
            "hosts": list(c.hosts),
            "ranks": {str(r): c.rank_name(r) for h in c.ranks for r in h},
            "size_bytes": size,
            "latency_bytes": opts.latency_size,
            "threshold": opts.threshold,
            "k": opts.k,
            "round_seconds": round_s,
        }
        verdict["host"] = self.judge(hosts, size)
        local = None
        if c.local_size > 1:
            ranks = Level(
                "local",
                [r for h in c.ranks for r in h],
                c.rank_name,
                lambda a, b: [a, b],
                lambda r: next(h for h in c.ranks if r in h),
            )
            local_schedule = circle_rounds(c.local_size)
            for r, local_pairs in enumerate(local_schedule):
                pairs = [(h[i], h[j]) for h in c.ranks for i, j in local_pairs]
                self.exchange_pairs(ranks, pairs, sizes, f"local round {r + 1}/{len(local_schedule)}", r + 1)
            local = self.judge(ranks, size)
        verdict["local"] = local
        verdict["compute"] = self.judge_compute(probe)
        verdict["bisect"] = self.bisect(size) if opts.bisect else None
        verdict["flagged_hosts"] = verdict["host"]["flagged"]
        verdict["flagged_links"] = verdict["host"]["flagged_links"] + (local["flagged_links"] if local else [])
        slow_local = {int(r) for r in local["flagged_ranks"]} if local else set()
        verdict["flagged_ranks"] = sorted(slow_local | set(verdict["compute"]["flagged"]))
        verdict["wrong"] = self.wrong
        return verdict

    def backend_max(self, value: float) -> float:
        return max(self.backend.all_gather_object(value))

    # -- measuring -------------------------------------------------------------------------------
    def exchange_pairs(
        self, level: Level, pairs: Sequence[Pair], sizes: Sequence[int], label: str, round_no: int, kind: str = ""
    ) -> dict[Pair, float]:
        """Exchange every pair at once, at every size; keeps and returns the first size's bandwidths."""
        units = [level.pair_ranks(a, b) for a, b in pairs]
        groups = [unit[i : i + 2] for unit in units for i in range(0, len(unit), 2)]  # [a_i, b_i]
        found = self.rounds.run(units, sizes, f"isolate {level.kind} {label}", groups=groups)
        # The check counts wrong elements over every rank of the round: once per round and size.
        self.wrong += sum(max(ex.wrong, 0) for ex in found[0]) if found else 0
        measured = {}
        for (a, b), exchanges in zip(pairs, found):
            measured[(a, b)] = exchanges[0].busbw_gbps
            self.write(kind or f"{level.kind}_pair", round_no, level.name(a), level.name(b), a, b, level, exchanges)
        if not kind:
            level.bw.update(measured)
        return measured

    def write(
        self,
        kind: str,
        round_no: int,
        name_a: str,
        name_b: str,
        a: int,
        b: int,
        level: Level,
        exchanges: list[Exchange],
    ) -> None:
        if self.writer is None:
            return
        group = level.pair_ranks(a, b)
        for ex in exchanges:
            s = ex.stats
            self.writer.write(
                {
                    **self.base,
                    "kind": kind,
                    "round": round_no,
                    "host_a": name_a,
                    "host_b": name_b,
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

    # -- judging ---------------------------------------------------------------------------------
    def judge(self, level: Level, size: int) -> dict[str, Any]:
        """Suspects from the sweep, each re-measured with healthy references in CONFIRM_REPEATS
        passes (best of them: interference only ever slows a pair); the confirmed ones are flagged."""
        t = self.opts.threshold
        first = suspects(level.nodes, level.bw, t, self.opts.k)
        slow = set(first.nodes)

        def among(node: int) -> dict[int, float]:  # the scores of the nodes it can be paired with
            return {m: first.scores[m] for m in level.peers(node) if m in first.scores}

        node_confirmations = {s: node_confirmation(s, among(s), slow, 2 * i) for i, s in enumerate(first.nodes)}
        link_confirmations = {p: link_confirmation(*p, among(p[0]), slow, i) for i, p in enumerate(first.links)}
        wanted = list(
            dict.fromkeys(
                p
                for confirmation in [*node_confirmations.values(), *link_confirmations.values()]
                for p in confirmation.pairs
            )
        )
        best: dict[Pair, float] = {}
        for repeat in range(CONFIRM_REPEATS if wanted else 0):
            for i, pairs in enumerate(pack(wanted)):
                label = f"confirmation {repeat + 1}.{i + 1}"
                for pair, bw in self.exchange_pairs(
                    level, pairs, [size], label, i + 1, kind=f"confirm_{level.kind}"
                ).items():
                    best[pair] = max(bw, best.get(pair, 0.0))
        flagged = [s for s in first.nodes if confirmed_node(node_confirmations[s], best, t, first.node_bar)]
        links = [p for p in first.links if confirmed_link(link_confirmations[p], best, t)]
        n = level.name

        def shown(pairs: list[Pair]) -> list[list[Any]]:
            return [[n(a), n(b), best[(a, b)]] for a, b in pairs]

        out = {
            "scores": {n(k): v for k, v in first.scores.items()},
            "bar": _bar(first.node_bar),
            "suspects": [n(s) for s in first.nodes],
            "confirmations": {
                n(s): {"pairs": shown(p.suspect_pairs), "references": shown(p.reference_pairs)}
                for s, p in node_confirmations.items()
            },
            "link_bar": _bar(first.link_bar) if first.link_bar else None,
            "link_suspects": [[n(a), n(b), first.ratios[(a, b)]] for a, b in first.links],
            "link_confirmations": {
                f"{n(a)}-{n(b)}": {"pairs": shown(p.suspect_pairs), "references": shown(p.reference_pairs)}
                for (a, b), p in link_confirmations.items()
            },
            "pairs": [[n(a), n(b), bw] for (a, b), bw in sorted(level.bw.items())],
            "flagged": [n(s) for s in flagged],
            "flagged_links": [[n(a), n(b)] for a, b in links],
        }
        if level.kind == "local":
            out["flagged_ranks"] = flagged
        return out

    def judge_compute(self, probe: Any) -> dict[str, Any]:
        """Suspects: ranks whose matmul rate in the probe of every rank at once is below the median
        by more than the threshold. Unlike the exchanges, the noise bound is not applied here: where
        ranks share cores (several ranks per CPU host, or namespace hosts on one machine) the spread
        of the concurrent rates is contention, and it would hide the culprit. Each suspect is then
        re-timed beside the median rank, the two alone and at the same moment (so whatever else
        the machine runs weighs on both), COMPUTE_REPEATS times, and flagged when it is below that
        reference by more than the threshold every time: a slow rank is slow every time."""
        rates = dict(enumerate(probe.rates))
        bar, low = low_outliers(rates, self.opts.threshold, 0.0)
        reference = compute_reference(rates, low, bar.median)
        beside: dict[int, list[tuple[float, float]]] = {r: [] for r in low}  # (suspect, reference) rates
        start = time.perf_counter()
        for _ in range(COMPUTE_REPEATS if low else 0):
            for rank in low:
                again = compute_probe(self.backend, self.watchdog, only={rank, reference}, kernel=probe.kernel)
                beside[rank].append((again.rates[rank], again.rates[reference]))
        retime_s = self.backend_max(time.perf_counter() - start)
        keep = 1 - self.opts.threshold
        flagged = [r for r in low if all(s < keep * ref for s, ref in beside[r])]
        return {
            "gflops": {self.cluster.rank_name(r): v for r, v in rates.items()},
            "flops": probe.flops,
            "bar": _bar(bar),
            "suspects": low,
            "reference": reference,
            "window_s": PROBE_WINDOW_S,
            "samples": PROBE_SAMPLES,
            "seconds": {"probe": self.probe_s, "retimings": retime_s},  # wall time, the slowest rank's
            "beside_gflops": {str(r): v for r, v in beside.items()},
            "flagged": flagged,
        }

    def bisect(self, size: int) -> list[dict[str, Any]]:
        """all_reduce in both halves of the remaining hosts at once, into the slower half while it is
        slower by more than the threshold: log2(N) steps, for slowness only collectives show."""
        reduce_rounds = Rounds(self.backend, self.cfg, self.watchdog, "all_reduce", "flat")
        c = self.cluster
        remaining = list(range(len(c.hosts)))
        steps = []
        while len(remaining) >= 4:
            half = len(remaining) // 2
            halves = [remaining[:half], remaining[half : 2 * half]]
            groups = [[r for h in part for r in c.ranks[h]] for part in halves]
            found = reduce_rounds.run(groups, [size], f"isolate bisection over {len(remaining)} hosts")
            times = [ex[0].stats.time_us_p50 for ex in found]
            slower = 0 if times[0] > times[1] else 1
            step = {"halves": [[c.hosts[h] for h in part] for part in halves], "time_us_p50": times}
            steps.append(step)
            if times[slower] <= times[1 - slower] * (1 + self.opts.threshold):
                step["result"] = "even: the halves are as fast"
                break
            step["result"] = f"half {slower + 1} is slower"
            remaining = halves[slower] + ([remaining[-1]] if len(remaining) % 2 else [])
        return steps


def compute_reference(rates: dict[int, float], suspects: Sequence[int], median: float) -> int:
    """The rank a compute suspect is re-timed beside: never a suspect, and from the healthy half
    (at or above the median) where there is one, the one nearest the median: a rank a little
    slower than the bar would make every suspect look fine beside it."""
    healthy = [r for r in rates if r not in suspects]
    upper = [r for r in healthy if rates[r] >= median] or healthy
    return min(upper, key=lambda r: (abs(rates[r] - median), r))


def _bar(bar: Bar) -> dict[str, float]:
    return {"median": bar.median, "mad": bar.mad, "margin": bar.margin, "cut": bar.cut}

"""What a node sweep leaves behind: its CSV columns, the verdict file beside the CSV, the console
verdict and the chart (host x host bandwidth matrix and per-host scores against the bar)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.results.paths import beside
from commbench.units import format_number as number

COLUMNS = (
    "run_id",
    "kind",  # host_pair, local_pair, confirm_host, confirm_local
    "round",
    "host_a",
    "host_b",
    "ranks_a",
    "ranks_b",
    "size_bytes",
    "iters",
    "time_us_p50",
    "time_us_p50_lo",
    "time_us_p50_hi",
    "busbw_gbps",
    "wrong",
    "backend",
    "world_size",
)


VERDICT, ISOLATE_CHART = ".verdict.json", "-isolate.png"  # beside the CSV (paths.beside)


def verdict_path(csv_path: Path) -> Path:
    """The verdict file beside the CSV: <stem>.verdict.json."""
    return beside(csv_path, VERDICT)


def read_verdict(csv_path: Path) -> dict[str, Any]:
    path = verdict_path(csv_path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the verdict {path}: {exc}") from None


def _pct(value: float, median: float) -> str:
    return f"{(value / median - 1) * 100:+.0f}%" if median > 0 else "-"


def format_verdict(v: dict[str, Any]) -> str:
    """The console verdict: every host's score against the bar, then what was flagged and why."""
    host = v["host"]
    bar = host["bar"]
    lines = [
        f"# verdict: threshold {v['threshold']:.0%}, noise bound {v['k']:g} x 1.4826 x MAD; "
        f"pairs exchanged {v['size_bytes']} bytes each way",
        f"# host scores (GB/s, upper quartile of each host's pairs): median {number(bar['median'])}, "
        f"MAD {number(bar['mad'])}, cut {number(bar['cut'])}",
    ]
    width = max(len(h) for h in v["hosts"])
    flagged = set(v["flagged_hosts"])
    suspects = set(host["suspects"])
    for name in v["hosts"]:
        score = host["scores"].get(name, float("nan"))
        state = "SLOW HOST" if name in flagged else ("suspect, cleared" if name in suspects else "ok")
        evidence = ""
        if name in suspects:
            evidence = f"  ({_confirmation(host['confirmations'][name])})"
        lines.append(f"  {name:<{width}}  {number(score):>8} GB/s  {_pct(score, bar['median']):>6}  {state}{evidence}")
    lines += _links(v)
    lines += _locals(v)
    lines += _compute(v)
    if v.get("bisect"):
        for step in v["bisect"]:
            halves = " | ".join(",".join(h) for h in step["halves"])
            times = ", ".join(f"{t:.0f}" for t in step["time_us_p50"])
            lines.append(f"# bisection: {halves}: all_reduce p50 {times} us: {step['result']}")
    if v.get("wrong"):
        lines.append(
            f"# WRONG RESULTS: {v['wrong']} element(s) arrived wrong in the exchanges (see the CSV's wrong column)"
        )
    n_links = len(v["flagged_links"])
    lines.append(
        f"# isolate: {len(v['flagged_hosts'])} slow host(s){': ' + ', '.join(v['flagged_hosts']) if v['flagged_hosts'] else ''}; "
        f"{n_links} slow link(s){': ' + ', '.join('-'.join(p) for p in v['flagged_links']) if n_links else ''}; "
        f"{len(v['flagged_ranks'])} slow rank(s){': ' + ', '.join(v['ranks'][str(r)] for r in v['flagged_ranks']) if v['flagged_ranks'] else ''}"
    )
    return "\n".join(lines)


def _confirmation(c: dict[str, Any]) -> str:
    """A confirmation's evidence: the suspect's re-measured pairs and the reference pairs beside them."""
    pairs = ", ".join(f"{a}-{b} {number(bw)}" for a, b, bw in c["pairs"]) or "no healthy partner"
    refs = ", ".join(f"{a}-{b} {number(bw)}" for a, b, bw in c["references"])
    return f"re-measured {pairs} GB/s" + (f" against {refs}" if refs else "")


def _links(v: dict[str, Any]) -> list[str]:
    host = v["host"]
    if not host["link_suspects"]:
        return ["# links: no pair slower than its two hosts reach elsewhere"]
    cut = host["link_bar"]["cut"]
    flagged = {tuple(p) for p in host["flagged_links"]}
    return [
        f"# link {a}-{b}: {ratio:.2f} of what both reach elsewhere (cut {cut:.2f}); "
        f"{_confirmation(host['link_confirmations'][f'{a}-{b}'])}: {'SLOW LINK' if (a, b) in flagged else 'cleared'}"
        for a, b, ratio in host["link_suspects"]
    ]


def _locals(v: dict[str, Any]) -> list[str]:
    local = v.get("local")
    if not local:
        return []
    bar = local["bar"]
    lines = [
        f"# local pairs (GB/s): median rank score {number(bar['median'])}, cut {number(bar['cut'])}; "
        f"suspects: {', '.join(local['suspects']) or 'none'}; flagged: {', '.join(local['flagged']) or 'none'}"
    ]
    lines += [f"# local link {a}-{b}: SLOW LINK" for a, b in local["flagged_links"]]
    return lines


def _compute(v: dict[str, Any]) -> list[str]:
    compute = v["compute"]
    bar = compute["bar"]
    window = f", median of {compute['samples']} x {compute['window_s'] * 1000:.0f} ms" if "window_s" in compute else ""
    lines = [
        f"# compute probe ({number(compute['flops'] / 1e9)} GFLOP matmul, every rank at once{window}): median "
        f"{number(bar['median'])} GFLOP/s, suspect below {number(bar['cut'])}; suspects re-timed beside the healthy rank nearest the median"
    ]
    ref = v["ranks"][str(compute["reference"])]
    for rank in compute["suspects"]:
        name = v["ranks"][str(rank)]
        state = "COMPUTE STRAGGLER" if rank in compute["flagged"] else "cleared"
        beside = ", ".join(
            f"{number(mine)} vs {number(theirs)}" for mine, theirs in compute["beside_gflops"][str(rank)]
        )
        lines.append(f"  {name}: {number(compute['gflops'][name])} GFLOP/s; re-timed beside {ref}: {beside}: {state}")
    return lines


def draw(v: dict[str, Any], out: Path) -> Path:
    """The host x host bandwidth matrix (flagged hosts and links marked) beside the per-host scores
    with the cut drawn; one PNG or SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    hosts = v["hosts"]
    index = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    matrix = np.full((n, n), np.nan)
    for a, b, bw in v["host"]["pairs"]:
        matrix[index[a], index[b]] = matrix[index[b], index[a]] = bw
    fig, (left, right, compute) = plt.subplots(
        1, 3, figsize=(11 + 0.35 * n, 3.6 + 0.2 * n), gridspec_kw={"width_ratios": [1.3, 1, 1]}
    )
    image = left.imshow(matrix, cmap="viridis", vmin=0)
    fig.colorbar(image, ax=left, label="GB/s each way")
    ticks = range(n)
    left.set_xticks(ticks, hosts, rotation=90 if n > 8 else 0)
    left.set_yticks(ticks, hosts)
    for name in v["flagged_hosts"]:
        i = index[name]
        for spine in (left.get_xticklabels()[i], left.get_yticklabels()[i]):
            spine.set_color("red")
            spine.set_fontweight("bold")
        left.add_patch(plt.Rectangle((-0.5, i - 0.5), n, 1, fill=False, edgecolor="red", linewidth=2))
    for a, b in v["host"]["flagged_links"]:
        for i, j in ((index[a], index[b]), (index[b], index[a])):
            left.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="orange", linewidth=2.5))
    if n <= 12:
        for i in range(n):
            for j in range(n):
                if not np.isnan(matrix[i, j]):
                    ink = "black" if matrix[i, j] > 0.6 * np.nanmax(matrix) else "white"  # readable on yellow
                    left.text(j, i, f"{matrix[i, j]:.2g}", ha="center", va="center", color=ink, fontsize=7)
    left.set_title("pair bandwidth\n(red: slow host, orange: slow link)", fontsize=9)
    scores = [v["host"]["scores"].get(h, np.nan) for h in hosts]
    colours = ["red" if h in v["flagged_hosts"] else "tab:blue" for h in hosts]
    right.barh(range(n), scores, color=colours)
    right.set_yticks(range(n), hosts)
    right.invert_yaxis()
    bar = v["host"]["bar"]
    right.axvline(bar["median"], color="grey", linestyle="--", label=f"median {bar['median']:.3g}")
    right.axvline(bar["cut"], color="red", label=f"cut {bar['cut']:.3g}")
    # A narrow panel: a few ticks, written plainly (a default locator put 8 long labels, 0.000285
    # and its neighbours, on top of each other; an offset or an exponent is read past, not read).
    right.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
    right.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: number(x)))
    right.set_xlabel("host score (GB/s)")
    right.legend(fontsize=7, loc="lower right")
    right.set_title(f"host scores\n(below the cut: a suspect; threshold {v['threshold']:.0%})", fontsize=9)
    right.xaxis.set_major_locator(MaxNLocator(nbins=4))  # a few short ticks that never run together
    _compute_panel(compute, v)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _compute_panel(ax: Any, v: dict[str, Any]) -> None:
    """Every rank's matmul rate, slowest first, labelled with its value: a flagged compute
    straggler in red, a suspect the re-timing cleared hatched, beside the median and the cut."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    compute = v["compute"]
    names = {str(rank): name for rank, name in v["ranks"].items()}
    by_name = {name: int(rank) for rank, name in names.items()}
    order = sorted(compute["gflops"], key=lambda name: compute["gflops"][name])
    rates = [compute["gflops"][name] for name in order]
    flagged, suspects = set(compute["flagged"]), set(compute["suspects"])
    colours = ["red" if by_name[name] in flagged else "tab:blue" for name in order]
    bars = ax.barh(range(len(order)), rates, color=colours)
    for bar_, name in zip(bars, order):
        if by_name[name] in suspects - flagged:
            bar_.set_hatch("//")
            bar_.set_edgecolor("white")
    ax.bar_label(bars, labels=[f"{r:.0f}" if r >= 10 else f"{r:.2g}" for r in rates], fontsize=7, padding=2)
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    bar = compute["bar"]
    ax.axvline(bar["median"], color="grey", linestyle="--")
    ax.axvline(bar["cut"], color="red")
    ax.set_xlim(0, max(rates) * 1.25 if rates else 1)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.set_xlabel("matmul GFLOP/s (median of its samples)")
    window = compute.get("window_s")
    ax.set_title(
        "compute, every rank at once\n(red: compute straggler"
        + (f"; samples of {window * 1000:.0f} ms" if window else "")
        + ")",
        fontsize=9,
    )
    handles = [
        Patch(color="red", label="compute straggler"),
        Patch(facecolor="tab:blue", hatch="//", edgecolor="white", label="suspect, cleared"),
        _legend_line("grey", "--", f"median {bar['median']:.0f}"),
        _legend_line("red", "-", f"cut {bar['cut']:.0f}"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)


def _legend_line(colour: str, style: str, label: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, linestyle=style, label=label)

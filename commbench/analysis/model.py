"""A latency-bandwidth (Hockney) model of measured collectives, and its projection to other world sizes.

Each (run, op, variant, phase, dtype, mode, backend, world size, group) measured at 4 or more sizes
is fitted to T(S) = alpha + S / beta: alpha the latency (µs), beta the bandwidth (GB/s). The fit
minimises relative residuals (latencies span orders of magnitude, and a plain least-squares fit
would hear only the largest sizes), weighted by the p50's confidence interval where the CSV has
one (the p50, results/stats.TYPICAL: what a replay reports, so a projection predicts it), and is made robust with Huber's loss by iteratively reweighted least squares, so one
disturbed size cannot pull the line.

A projection turns the fitted collective into per-message link parameters through the textbook cost
model of an algorithm at the measured world size (each op's spec carries its own: OpSpec.cost),
then evaluates the same model at other world sizes: T(p, S) = A(p) a + B(p) S b. It is a model, not a measurement (docs/model.md lists the
formulas, their sources and their limits).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from commbench.errors import UserError
from commbench.ops import spec_of
from commbench.ops.cost import ALGORITHMS
from commbench.results.reader import ok_rows
from commbench.results.schema import LAYOUT_KEY, key_without
from commbench.results.stats import TYPICAL, TYPICAL_HI, TYPICAL_LO, TYPICAL_NAME, robust_sd
from commbench.units import format_size

MIN_SIZES = 4
MIN_R2 = 0.9  # below this the line does not describe the data: no projection from it
HUBER_K = 1.345  # 95% efficiency under normal errors
# A fit's line: the row key without the size, in one run (on its backend).
FIT_KEY = ("run", *key_without("size_bytes", *LAYOUT_KEY), "backend", *LAYOUT_KEY)


@dataclass(frozen=True)
class Fit:
    """T(S) = alpha_us + S / (beta_gbps * 1e3) microseconds, fitted on `sizes` sizes."""

    key: tuple
    sizes: int
    alpha_us: float
    beta_gbps: float
    r2: float
    worst_residual: float  # max |measured - fitted| / measured

    @property
    def half_size_bytes(self) -> float:
        """n_1/2 = alpha x beta: the size at which half the bandwidth is reached."""
        return self.alpha_us * 1e-6 * self.beta_gbps * 1e9

    @property
    def fits(self) -> bool:
        return self.refusal is None

    @property
    def refusal(self) -> str | None:
        """Why the line is refused (not projected, shown as refused), or None when it describes the data."""
        if not self.r2 >= MIN_R2:
            return f"R² {self.r2:.2f} < {MIN_R2}: the line does not describe the data"
        if self.alpha_us < 0:
            return f"negative latency ({self.alpha_us:.3g} µs)"
        if not self.beta_gbps > 0:
            return "no positive bandwidth"
        return None

    def time_us(self, size_bytes: float) -> float:
        return self.alpha_us + size_bytes / (self.beta_gbps * 1e3)

    def as_dict(self) -> dict:
        return {
            **dict(zip(FIT_KEY, self.key)),
            **{k: _finite(v) for k, v in asdict(self).items() if k != "key"},
            "half_size_bytes": _finite(self.half_size_bytes),
        }


def _finite(value: object) -> object:
    """JSON has no infinity: a beta (or n1/2) without a slope is null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def fit_hockney(
    size_bytes: np.ndarray, time_us: np.ndarray, sigma_us: np.ndarray | None = None
) -> tuple[float, float, float, float]:
    """(alpha_us, beta_gbps, r2, worst relative residual) of a robust fit of time = alpha + size / beta.

    sigma_us is each point's uncertainty (half the width of its interval); without it, 5% of the
    time (relative errors). Huber IRLS: points whose standardised residual exceeds k x the MAD scale
    get weight k/|r|.
    """
    s, t = np.asarray(size_bytes, dtype=float), np.asarray(time_us, dtype=float)
    sigma = 0.05 * t
    if sigma_us is not None:
        given = np.asarray(sigma_us, dtype=float)
        # A (near) zero-width interval must not dominate the fit: at least 1% of the time.
        sigma = np.where(np.isfinite(given) & (given > 0), np.maximum(given, 0.01 * t), sigma)
    design = np.column_stack([np.ones_like(s), s])
    robust = np.ones_like(t)
    for _ in range(50):
        w = robust / sigma**2
        coef = np.linalg.lstsq(design * np.sqrt(w)[:, None], t * np.sqrt(w), rcond=None)[0]
        r = (t - design @ coef) / sigma
        scale = robust_sd(r) or 1.0
        updated = np.minimum(1.0, HUBER_K * scale / np.maximum(np.abs(r), 1e-12))
        if np.allclose(updated, robust, atol=1e-6):
            break
        robust = updated
    alpha, slope = coef
    fitted = design @ coef
    # R^2 of log time: every size counts alike, as on the log-log chart (on the raw scale the
    # largest sizes alone would decide it, and it would read 0.99 for almost any line).
    log_t, log_f = np.log(t), np.log(np.maximum(fitted, 1e-12))
    r2 = 1.0 - np.sum((log_t - log_f) ** 2) / max(np.sum((log_t - log_t.mean()) ** 2), 1e-300)
    beta_gbps = 1.0 / (slope * 1e3) if slope > 0 else math.inf
    return float(alpha), float(beta_gbps), float(r2), float(np.max(np.abs(t - fitted) / t))


def fit_frame(frame: pd.DataFrame) -> tuple[list[Fit], list[str]]:
    """Fits for every key with enough sizes, and a line for each key left out and why."""
    from commbench.ops import spec_of

    rows = ok_rows(frame)
    rows = rows[rows["size_bytes"] > 0].copy()
    if "group" not in rows.columns:
        rows["group"] = "world"
    rows["group"] = rows["group"].fillna("world").replace("", "world")
    fits, skipped = [], []
    for key, group in rows.groupby(list(FIT_KEY), sort=True):
        spec = spec_of(key[1])
        if spec is not None and spec.workload_column != "size_bytes":
            why = f"{key[1]}: its workload is {spec.workload_name}, not bytes; no line in S"
            if why not in skipped:  # once per op, not per variant and phase
                skipped.append(why)
            continue
        points = group.groupby("size_bytes").first().reset_index()
        if len(points) < MIN_SIZES:
            skipped.append(
                f"{key[1]}/{key[2]}/{key[3]} n={int(key[7])}: {len(points)} size(s), a fit needs {MIN_SIZES}"
            )
            continue
        lo, hi = points.get(TYPICAL_LO), points.get(TYPICAL_HI)
        sigma = (
            None if lo is None or hi is None else ((pd.to_numeric(hi) - pd.to_numeric(lo)) / 2).to_numpy(dtype=float)
        )
        alpha, beta, r2, worst = fit_hockney(points["size_bytes"].to_numpy(), points[TYPICAL].to_numpy(), sigma)
        fits.append(Fit(tuple(key), len(points), alpha, beta, r2, worst))
    return fits, skipped


@dataclass(frozen=True)
class Projection:
    """The fitted collective at another world size, under one algorithm's cost model."""

    fit: Fit
    algorithm: str
    world_size: int
    alpha_us: float
    beta_gbps: float
    time_us_at_max: float  # at the largest size the fit was made on
    max_size_bytes: int

    def as_dict(self) -> dict:
        return {
            **{k: v for k, v in self.fit.as_dict().items() if k in FIT_KEY},
            "algorithm": self.algorithm,
            "measured_world_size": self.fit.key[7],
            "world_size": self.world_size,
            "alpha_us": self.alpha_us,
            "beta_gbps": self.beta_gbps,
            "max_size_bytes": self.max_size_bytes,
            "time_us_at_max": self.time_us_at_max,
        }


def project(fit: Fit, algorithm: str, world_size: int, max_size_bytes: int) -> Projection | str:
    """The projection, or why there is none (no formula for the op, a fit too poor to extrapolate)."""
    op, measured = fit.key[1], int(fit.key[7])
    spec = spec_of(op)
    coefficients = None if spec is None else spec.cost.of(algorithm)
    if coefficients is None:
        return f"{op}: the {algorithm} model has no formula for it"
    if not fit.fits:
        return f"{op}/{fit.key[2]} n={measured}: the line does not fit (R^2 {fit.r2:.3f} < {MIN_R2}); no projection"
    a0, b0 = coefficients(measured)
    a1, b1 = coefficients(world_size)
    if a0 <= 0 or b0 <= 0:
        return f"{op}/{fit.key[2]}: measured at n={measured}, where the model has no communication to scale from"
    link_alpha, link_time_per_byte = fit.alpha_us / a0, 1.0 / (fit.beta_gbps * 1e3) / b0
    alpha = a1 * link_alpha
    beta = math.inf if b1 == 0 else 1.0 / (b1 * link_time_per_byte * 1e3)
    time = alpha + (0.0 if b1 == 0 else max_size_bytes / (beta * 1e3))
    return Projection(fit, algorithm, world_size, alpha, beta, time, max_size_bytes)


def parse_world_sizes(text: str) -> list[int]:
    values = []
    for item in [v.strip() for v in str(text).split(",") if v.strip()]:
        if not item.isdigit() or int(item) < 2:
            raise UserError(f"--predict-n {item!r} is not a world size: give whole numbers >= 2 such as 8,64,512")
        values.append(int(item))
    if not values:
        raise UserError("--predict-n holds no world size: give whole numbers >= 2 such as 8,64,512")
    return values


def check_algorithm(name: str) -> str:
    if name not in ALGORITHMS:
        raise UserError(f"unknown algorithm {name!r}; valid algorithms: {', '.join(ALGORITHMS)}")
    return name


def format_fits(fits: list[Fit], skipped: list[str]) -> str:
    lines = [
        f"# model: T(S) = alpha + S / beta, a robust (Huber, relative-residual) fit of the {TYPICAL_NAME} times",
        f"# {'op/variant/phase dtype mode':<44} {'backend':>8} {'n':>4} {'sizes':>5} {'alpha(µs)':>10} "
        f"{'beta(GB/s)':>10} {'n1/2':>8} {'R^2':>6} {'worst':>6}",
    ]
    for fit in fits:
        k = dict(zip(FIT_KEY, fit.key))
        what = f"{k['op']}/{k['variant']}/{k['phase']} {k['dtype']} {k['mode']}"
        what += "" if k["group"] == "world" else f" {k['group']}"
        backend, world = k["backend"], k["world_size"]
        what = what if len(what) <= 44 else what[:43] + "~"
        flag = "" if fit.fits else "  does not fit"
        lines.append(
            f"  {what:<44} {backend:>8} {int(world):>4} {fit.sizes:>5} {fit.alpha_us:>10.1f} {_beta(fit.beta_gbps):>10} "
            f"{_half_size(fit.half_size_bytes):>8} {fit.r2:>6.3f} {fit.worst_residual:>6.1%}{flag}"
        )
    lines.extend(f"# not fitted: {why}" for why in skipped)
    return "\n".join(lines)


def _beta(beta_gbps: float) -> str:
    """beta for a table; "-" when the time did not grow with the size (no slope to fit)."""
    return f"{beta_gbps:.3f}" if math.isfinite(beta_gbps) else "-"


def _half_size(half_size_bytes: float) -> str:
    return format_size(int(max(half_size_bytes, 0))) if math.isfinite(half_size_bytes) else "-"


def format_projections(projections: list[Projection], refused: list[str], algorithm: str) -> str:
    lines = [
        f"# projection ({algorithm} cost model; a MODEL, not a measurement): the fit's link parameters at other world sizes",
        f"# {'op/variant/phase dtype':<36} {'fit n':>5} {'n':>6} {'alpha(µs)':>11} {'beta(GB/s)':>10} {'T at S':>16}",
    ]
    for p in projections:
        _, op, variant, phase, dtype, *_ = p.fit.key
        at = f"{p.time_us_at_max:,.0f}µs@{format_size(p.max_size_bytes)}"
        beta = "-" if math.isinf(p.beta_gbps) else f"{p.beta_gbps:.3f}"
        lines.append(
            f"  {op + '/' + variant + '/' + phase + ' ' + dtype:<36} {int(p.fit.key[7]):>5} {p.world_size:>6} "
            f"{p.alpha_us:>11.1f} {beta:>10} {at:>16}"
        )
    lines.extend(f"# not projected: {why}" for why in dict.fromkeys(refused))
    return "\n".join(lines)


def model_panels(fits: list[Fit]) -> list[list[Fit]]:
    """The fits of each (op, phase), in the order model_charts draws their charts: one chart each."""
    by_panel: dict[tuple[str, str], list[Fit]] = {}
    for fit in fits:
        by_panel.setdefault((fit.key[1], fit.key[3]), []).append(fit)
    return [panel for _, panel in sorted(by_panel.items())]


def model_charts(frame: pd.DataFrame, fits: list[Fit]):
    """Per (op, phase): the measured p50s (with their interval where known) and each fitted line,
    each variant in the colour it has on the op's other charts, each run in its own marker."""
    from matplotlib.figure import Figure

    from commbench.analysis.charts.axes import latency_axis, legend_outside, size_axis
    from commbench.analysis.charts.grouping import line_label, run_label_columns
    from commbench.analysis.charts.layout import grid, suptitle, title_margin
    from commbench.analysis.charts.render import Chart
    from commbench.analysis.charts.style import op_palette

    rows = ok_rows(frame)
    charts = []
    # Each panel's rows and each fit's points found by one grouping, not by a filter per fit.
    panels = dict(iter(rows[rows["size_bytes"] > 0].groupby(["op", "phase"], sort=False)))
    for panel in model_panels(fits):
        op, phase = panel[0].key[1], panel[0].key[3]
        fig = Figure(figsize=(8, 5))
        place = grid(8, 5, top=title_margin(1, panel_titles=0.12), right=2.6)  # the legend to the right
        ax = fig.subplots(gridspec_kw=place)
        shown = panels.get((op, phase), rows.iloc[:0])
        points = dict(iter(shown.groupby(list(FIT_KEY), sort=False)))
        palette = op_palette(shown)
        naming = run_label_columns(shown)
        sizes_seen: list[float] = []
        for fit in panel:
            mine = points.get(tuple(fit.key), shown.iloc[:0]).sort_values("size_bytes")
            style = palette.style(mine)
            label = line_label(dict(zip(FIT_KEY, fit.key)), naming)
            ax.plot(
                mine["size_bytes"],
                mine[TYPICAL],
                linestyle="none",
                marker=style["marker"],
                color=style["color"],
                markersize=4,
                label=f"{label}: measured {TYPICAL_NAME}",
            )
            s = np.geomspace(mine["size_bytes"].min(), mine["size_bytes"].max(), 200)
            ax.plot(
                s,
                [fit.time_us(x) for x in s],
                "-" if fit.fits else ":",
                color=style["color"],
                label=_fit_label(fit),
            )
            sizes_seen += list(mine["size_bytes"])
        size_axis(ax, sizes_seen)
        latency_axis(ax)
        ax.set_ylabel(f"time per op (µs, {TYPICAL_NAME})")
        legend_outside(ax)
        suptitle(fig, f"{op} · {phase}: latency-bandwidth model T(S) = α + S / β", 5, place)
        caption = (
            f"{op} ({phase}): measured {TYPICAL_NAME} (points) and the fitted Hockney line per variant; "
            f"dotted lines are refused fits (R² < {MIN_R2}: the line does not describe the data)."
        )
        charts.append(Chart(name=f"{op}-{phase}-model", kind="model", figure=fig, caption=caption))
    return charts


def _fit_label(fit: Fit) -> str:
    """A fitted line's legend entry: its parameters, or why it is refused."""
    if not fit.fits:
        return f"refused fit: {fit.refusal}"
    beta = f"{fit.beta_gbps:.3g} GB/s" if math.isfinite(fit.beta_gbps) else "∞"
    return f"fit: {fit.alpha_us:.3g} µs + S / {beta} (R² {fit.r2:.3f})"

"""`commbench list`: the ops, what S means for each, and which backends can run here."""

from __future__ import annotations

import click

from commbench.backends import BACKENDS
from commbench.ops import specs
from commbench.ops.spec import OpSpec

LATENCY_ONLY = "none (latency only: algbw and busbw are empty)"


@click.command("list")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown"]),
    default="text",
    show_default=True,
    help="markdown: the ops as the table of docs/ops.md, which is generated so.",
)
def list_(fmt: str) -> None:
    """List the ops (variants, what S and the bus factor are for each) and the backends (available or why not).

    algbw = S / time and busbw = algbw x factor(n), in GB/s (1e9 bytes), as nccl-tests defines them:
    busbw makes numbers comparable across world sizes; it is not a hardware reading (docs/ops.md).
    """
    if fmt == "markdown":
        click.echo(ops_table(), nl=False)
        return
    click.echo("ops:")
    for spec in specs():
        click.echo(f"  {spec.name:<24} {spec.summary}")
        click.echo(f"  {'':<24} variants: {', '.join(spec.variants)}")
        factor = spec.bus_factor.text if spec.bus_factor else LATENCY_ONLY
        click.echo(f"  {'':<24} {spec.s_definition}; busbw factor {factor}")
    click.echo("backends:")
    for info in BACKENDS.values():
        reason = info.missing()
        state = "available" if reason is None else f"not available: {reason}"
        click.echo(f"  {info.name:<24} {info.summary}; {state}")


def ops_table() -> str:
    """Every registered op as a markdown table (docs/ops.md holds it; a test keeps the two equal)."""
    lines = [
        "| op | what it measures | variants (default options) | S (`size_bytes`) | factor(n) | options |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_row(spec) for spec in specs()]
    return "\n".join(lines) + "\n"


def _row(spec: OpSpec) -> str:
    cells = (
        f"`{spec.name}`",
        spec.summary,
        ", ".join(f"`{v}`" for v in spec.variants),
        spec.s_definition.removeprefix("S = "),
        spec.bus_factor.text if spec.bus_factor else LATENCY_ONLY,
        ", ".join(f"`{o.flag}`" for o in spec.options),
    )
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

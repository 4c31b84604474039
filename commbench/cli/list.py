"""`commbench list`: the ops, what S means for each, and which backends can run here."""

from __future__ import annotations

import click

from commbench.backends import BACKENDS
from commbench.ops import specs


@click.command("list")
def list_() -> None:
    """List the ops (variants, what S and the bus factor are for each) and the backends (available or why not).

    algbw = S / time and busbw = algbw x factor(n), in GB/s (1e9 bytes), as nccl-tests defines them:
    busbw makes numbers comparable across world sizes; it is not a hardware reading (docs/ops.md).
    """
    click.echo("ops:")
    for spec in specs():
        click.echo(f"  {spec.name:<24} {spec.summary}")
        click.echo(f"  {'':<24} variants: {', '.join(spec.variants)}")
        factor = spec.bus_factor.text if spec.bus_factor else "none (latency only: algbw and busbw are empty)"
        click.echo(f"  {'':<24} {spec.s_definition}; busbw factor {factor}")
    click.echo("backends:")
    for info in BACKENDS.values():
        reason = info.missing()
        state = "available" if reason is None else f"not available: {reason}"
        click.echo(f"  {info.name:<24} {info.summary}; {state}")

"""Each sweep option is stated once, as a SweepConfig field with its flag: the commands' options are
built from those fields, so a default or a choice cannot differ between the CLI and the config."""

from __future__ import annotations

from dataclasses import MISSING, fields

import click

from commbench.cli.isolate import isolate
from commbench.cli.sweep import sweep
from commbench.cli.syncbn import syncbn
from commbench.run.config import SweepConfig

FLAGGED = [f for f in fields(SweepConfig) if "flag" in f.metadata]


def _options(command: click.Command) -> dict[str, click.Option]:
    return {p.name: p for p in command.params if isinstance(p, click.Option) and p.name is not None}


def test_every_flagged_field_is_an_option_of_the_measuring_commands_with_its_default_and_choices() -> None:
    assert {f.name for f in FLAGGED} >= {"warmup", "window", "timeout", "mode", "device", "group", "check"}
    for command in (sweep, syncbn):
        options, given = _options(command), command.make_context(command.name, []).params
        for spec in FLAGGED:
            option, flag = options[spec.name], spec.metadata["flag"]
            assert spec.default is not MISSING and given[spec.name] == spec.default, (command.name, spec.name)
            assert option.opts[0] == "--" + spec.name.replace("_", "-")
            if flag.choices:
                assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == flag.choices
    given = isolate.make_context("isolate", []).params
    for name in ("warmup", "rounds", "min_iters", "max_iters", "time_per_size", "timeout"):
        assert given[name] == next(f.default for f in FLAGGED if f.name == name)

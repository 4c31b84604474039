"""What a hostile case is: the files it is made of, the commands it runs on them, and what commbench
must do with them once issue 44 is fixed (the exit codes that are right, the checks on what is left).

A case is data: the runner (run.py) makes its folder, runs its commands there and judges the outcome
by the case's own checks, the same way for the tests (at CI size) and the bench (at the issue's)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# The groups, in its order.
FILES = "Files destroyed"
MEMORY = "Memory and time"
TRACEBACKS = "Tracebacks"
SILENT = "Wrong, silently"
SECRETS = "Secrets"
GROUPS = (FILES, MEMORY, TRACEBACKS, SILENT, SECRETS)

REFUSED = frozenset({2})  # a wrong input: one line, exit 2
READ = frozenset({0})  # an input to read correctly
EITHER = frozenset({0, 2})  # the issue lets the fix choose: done right, or refused in one line

# Tiny budgets, no chart: a 2-rank Gloo replay of a small trace in seconds.
QUIET = ("--backend", "gloo", "--nproc", "2", "--iters", "2", "--warmup", "1", "--rounds", "1", "--no-plot")
# A sweep of one all_reduce size on 2 Gloo ranks, in seconds.
SWEEP = ("sweep", "--op", "all_reduce", "--sizes", "8", *QUIET, "-o", "out/a.csv")


@dataclass(frozen=True)
class Command:
    """`python -m commbench ARGV` in the case's folder, with env added to the runner's environment."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def commbench(*argv: str, **env: str) -> Command:
    return Command(tuple(argv), env)


def replay(*argv: str) -> Command:
    """`commbench replay ARGV` on 2 Gloo ranks with tiny budgets, no chart; an option in argv wins
    over these (click keeps an option's last value: `--plot` draws the chart)."""
    return Command(("replay", *QUIET, *argv))


@dataclass(frozen=True)
class Interrupt:
    """A signal to the command's process group (as a terminal or a scheduler sends it): after
    after_s seconds, or once its output holds `on_output` `times` times."""

    signum: signal.Signals
    after_s: float | None = None
    on_output: str | None = None
    times: int = 1


class Outcome(Protocol):
    """What a check sees of a finished case (run.py's Result)."""

    folder: Path
    exits: list[int | str]
    output: str
    before: dict[str, str]  # each path under the folder (relative) -> its digest, as made

    def commbench(self, *argv: str) -> tuple[int | str, str]:
        """Run another commbench command in the folder, under the same limits: (exit, output)."""
        ...


# A check names what it found wrong, or returns None when all is right.
Check = Callable[[Outcome], "str | None"]


@dataclass(frozen=True)
class Sizes:
    """The size a case's maker is given: small for the tests, the issue's (or a stated safe one) for the bench."""

    ci: int
    bench: int
    note: str  # what bench means, e.g. "2 GiB inflated (2 MB gzipped, the issue's)"


@dataclass(frozen=True)
class Case:
    """One case of issue 44."""

    id: str
    group: str
    what: str  # one line: the input and what the issue saw
    make: Callable[[Path, int], object]  # writes the case's files into the folder, given the size
    commands: tuple[Command, ...]  # run together (usually one)
    exits: frozenset[int] = (
        REFUSED  # the right exit codes (2 must come as one line); once an interrupt is sent, 128 + its signal
    )
    checks: tuple[Check, ...] = ()
    sizes: Sizes | None = None
    interrupt: Interrupt | None = None
    ranks: bool = False  # starts ranks (a few seconds each) before or instead of being refused
    variant_of: str = ""  # the id of the case of the same shape at another bench size: the tests run that one

    def size(self, bench: bool) -> int:
        return 0 if self.sizes is None else self.sizes.bench if bench else self.sizes.ci


def case(
    id: str, group: str, what: str, make: Callable[[Path, int], object], *commands: Command, **more: object
) -> Case:
    return Case(id, group, what, make, commands, **more)  # type: ignore[arg-type]

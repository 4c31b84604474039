"""Typed op options: what an op reads from the command line, declared once with its type and default.

An `OpOption` names its flag, its help, its kind (how text becomes a value, with the range it
accepts) and its default. The CLI renders it as a click option whose type parses with the kind and
whose help shows the default, so a bad value is a one-line error before any rank starts, and no op
parses strings: an op reads `self.value(OPTION)`, already typed. Values also reach ops from Python
(tests, plugins) and from the JSON a rank receives; `OpOption.value` takes every one of those forms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from commbench.errors import UserError
from commbench.units import format_count, parse_count, parse_tensors


class Kind(Protocol):
    """How an option's text becomes its value (a one-line UserError when it cannot), and back."""

    metavar: str

    def parse(self, flag: str, text: str) -> Any: ...

    def format(self, value: Any) -> str: ...


@dataclass(frozen=True)
class Whole:
    """A whole number >= low; `noun` names what it counts in the error ("a rank", "a channel count")."""

    low: int
    noun: str
    hint: str = ""  # how to give a good one, when more than "a whole number >= low"
    metavar: str = "INT"

    def parse(self, flag: str, text: str) -> int:
        item = text.strip()
        if not item.isdigit() or int(item) < self.low:
            raise UserError(f"{flag} {text!r} is not {self.noun}: give {self.hint or f'a whole number >= {self.low}'}")
        return int(item)

    def format(self, value: Any) -> str:
        return str(value)


@dataclass(frozen=True)
class Number:
    """A finite number >= low; `hint` says what the number means, for the error line."""

    low: float
    hint: str
    metavar: str = "FLOAT"

    def parse(self, flag: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{flag} {text!r} is not a number: give {self.hint}") from None
        if not self.low <= value < math.inf:
            raise UserError(f"{flag} {text!r} must be a finite number >= {self.low:g} ({self.hint})")
        return value

    def format(self, value: Any) -> str:
        return f"{value:g}"


@dataclass(frozen=True)
class Count:
    """An element count with an optional K, M, G (1024 powers) or a power of ten: 4K, 1e7."""

    metavar: str = "COUNT"

    def parse(self, flag: str, text: str) -> int:
        return parse_count(text, flag)

    def format(self, value: Any) -> str:
        return format_count(value)


@dataclass(frozen=True)
class Tensors:
    """A gradient workload: element counts, TENSORS_SYNTAX."""

    metavar: str = "TENSORS"

    def parse(self, flag: str, text: str) -> tuple[int, ...]:
        return parse_tensors(text)

    def format(self, value: Any) -> str:
        return ",".join(format_count(n) for n in value)


@dataclass(frozen=True)
class Listed:
    """A comma-separated list of one kind: duplicates dropped; sorted when order carries no meaning."""

    item: Kind
    sort: bool = False

    @property
    def metavar(self) -> str:
        return f"{self.item.metavar},..."

    def parse(self, flag: str, text: str) -> tuple[Any, ...]:
        items = [part.strip() for part in text.split(",") if part.strip()]
        if not items:
            raise UserError(f"{flag} {text!r} holds no value: give a comma-separated list")
        values = tuple(dict.fromkeys(self.item.parse(flag, item) for item in items))
        return tuple(sorted(values)) if self.sort else values

    def format(self, value: Any) -> str:
        return ",".join(self.item.format(v) for v in value)


@dataclass(frozen=True)
class OpOption:
    """A command-line option an op reads (`--tensors`, `--channels`): declared once, rendered by the CLI.

    Several ops may read one option; they then share one OpOption object, so one flag keeps one
    meaning. `default` is the typed value an op gets when the option is not given; None leaves the
    default to each op that reads it (its help says what they do).
    """

    flag: str  # "--bucket-cap-mb"
    help: str  # what it sets; the CLI appends the default
    kind: Kind
    default: Any = None

    @property
    def key(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def default_text(self) -> str | None:
        """The default as a user would type it (what `--help` shows), or None when each op has its own."""
        return None if self.default is None else self.kind.format(self.default)

    def parse(self, text: str) -> Any:
        """The typed value of text; a one-line UserError naming the flag when it is not one."""
        return self.kind.parse(self.flag, str(text))

    def value(self, given: Any) -> Any:
        """The typed value of what an op was handed: the default when absent, text parsed, a JSON list
        (what a tuple becomes on its way to a rank) as a tuple, a typed value as it is."""
        if given is None or (isinstance(given, str) and not given.strip()):
            return self.default
        if isinstance(given, str):
            return self.parse(given)
        return tuple(given) if isinstance(given, list) else given

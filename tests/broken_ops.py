"""Deliberately broken ops, loaded by the CLI as `--op tests.broken_ops:Name` to prove the check bites."""

from __future__ import annotations

from commbench.harness import CollArgs, complete
from commbench.ops.all_gather import AllGather


class CorruptAllGather(AllGather):
    """A correct all_gather whose last output element is then bumped on every rank."""

    name = "corrupt_all_gather"

    def issue(self, args: CollArgs, phase: str) -> None:
        super().issue(args, phase)
        complete(args)
        out = args.output if args.variant == "flat" else args.output[-1]
        out[-1] += 1

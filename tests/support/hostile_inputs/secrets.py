"""Issue 44, "Secrets": a token in NCCL_API_KEY recorded in clear, and a libpq connection string as
COMMBENCH_HISTORY turned into a file named after it. Right: the value in no output, no file's bytes
and no file's name (the history's included), whatever the run's exit."""

from __future__ import annotations

from tests.support.hostile_inputs.case import READ, REFUSED, SECRETS, SWEEP, Case, Command, case, commbench
from tests.support.hostile_inputs.checks import no_secret
from tests.support.hostile_inputs.fixtures import out

TOKEN = "tok-9f8e7d6c5b4a"
PASSWORD = "hunter2"
LIBPQ = f"host=127.0.0.1 dbname=x password={PASSWORD}"
# Item 4 of the rule, beyond its cases: every name it lists, each on an NCCL_ variable `env` records.
NAMES = ("NCCL_API_KEY", "NCCL_IB_PASSWD", "NCCL_PROXY_PWD", "NCCL_NET_CREDENTIAL", "NCCL_NET_AUTH", "NCCL_X_SECRET")


def _secret(id: str, what: str, command: Command, secret: str, exits: frozenset[int] = READ) -> Case:
    """A case whose secret must be nowhere once command ran (in out/, with its history in results/)."""
    return case(
        id, SECRETS, what, out, command, exits=exits, checks=(no_secret(secret),), ranks=command.argv[0] == "sweep"
    )


CASES = [
    _secret(
        "secret-sweep-api-key",
        "`NCCL_API_KEY=... sweep`: the value in clear in .env.json and the history",
        commbench(*SWEEP, NCCL_API_KEY=TOKEN),
        TOKEN,
    ),
    _secret(
        "secret-env-api-key", "`NCCL_API_KEY=... env`: the value in clear", commbench("env", NCCL_API_KEY=TOKEN), TOKEN
    ),
    _secret(
        "secret-env-names",
        f"`env` with {', '.join(NAMES)} set (the rule's names; only PASSWORD, SECRET, TOKEN were hidden)",
        commbench("env", **dict.fromkeys(NAMES, TOKEN)),
        TOKEN,
    ),
    _secret(
        "secret-libpq-history",
        f"COMMBENCH_HISTORY='{LIBPQ}' sweep: a SQLite file named after it (no server here: refused)",
        commbench(*SWEEP, COMMBENCH_HISTORY=LIBPQ),
        PASSWORD,
        exits=REFUSED,
    ),
]

"""How a sweep reads a transport's errors: a collective that failed (a peer died, a transport
error) and a kind of tensor the transport refuses outright on every rank."""

from __future__ import annotations

import re

from commbench.backends.base import Backend


class CollectiveFailure(Exception):
    """A collective raised (a peer died, a transport error): exit with the op, size and rank.

    refusal: the transport refused the call as it was issued (refusal() matched), so the diagnosis
    calls it a refusal and not a stall; it was not refused on every rank at the case's first call,
    or it would have been an `unavailable` row instead."""

    def __init__(self, message: str, refusal: bool = False) -> None:
        super().__init__(message)
        self.refusal = refusal


# What a transport says when it refuses a kind of tensor outright (Gloo and some collectives on
# CUDA tensors, a dtype a library lacks): raised as the call is issued, on every rank alike.
# c10d's Backend base says "Backend gloo does not support alltoall" for a method a backend lacks.
# A fallback only: what commbench knows a transport lacks is refused before the call (Backend.missing).
_REFUSAL = re.compile(
    r"not supported|unsupported|does not support|doesn't support|only supports|supports only|not implemented",
    re.IGNORECASE,
)


def refusal(exc: BaseException) -> bool:
    """Whether the error is the transport refusing the call (a missing feature), not a failure in flight."""
    return _REFUSAL.search(str(exc)) is not None


def refused_everywhere(backend: Backend, exc: RuntimeError) -> str | None:
    """The transport's refusal, when every rank of the group refused this case at its first call;
    the case then becomes an `unavailable` row instead of failing the sweep."""
    mine = first_sentence(exc) if refusal(exc) else None
    if mine is None:
        return None
    try:  # the largest "not refused" over ranks: 0 when every rank refused
        accepted = backend.reduce_floats([0.0], "max")[0]
    except RuntimeError:  # a peer failed otherwise and left: the original failure is the diagnosis
        return None
    return f"the transport refused it: {mine}" if accepted == 0.0 else None


def first_sentence(exc: BaseException) -> str:
    """The gist of a transport error: gloo prefixes a source location and appends advice."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    text = re.sub(r"^\[[^\]]*\]\s*", "", text)
    return text.split(". ")[0]

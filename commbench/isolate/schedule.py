"""Which hosts meet in which round: the round-robin ("circle") schedule.

Every pair of N hosts meets exactly once in N-1 rounds (N rounds for odd N), and no host is in two
pairs of one round, so each round's N/2 pairs can run at the same time: 64 hosts take 63 rounds of
32 concurrent pairs instead of 2,016 pair runs one after the other. Any prefix of the rounds is a
set of perfect matchings with no pair twice (what the adaptive screen takes), so the full schedule
is one round at a time, never a list of every pair (8,192 hosts have 33 million).
"""

from __future__ import annotations

Pair = tuple[int, int]


def circle_count(n: int) -> int:
    """How many rounds the circle schedule of n hosts has: n-1 for even n, n for odd n (0 below 2)."""
    return 0 if n < 2 else n - 1 + n % 2


def circle_round(n: int, r: int) -> list[Pair]:
    """Round r (0-based) of pairs (i, j), i < j, over hosts 0..n-1.

    Even n: host 0 stays put; in round r the others, L = [1..n-1] rotated left by r, pair 0 with
    L[0] and L[i] with L[-i] for i = 1..(n-2)/2. Odd n: a phantom host n makes n even, and whoever
    meets it sits that round out (a bye), so there are n rounds of (n-1)/2 pairs.
    """
    if not 0 <= r < circle_count(n):
        raise ValueError(f"round {r} of the circle schedule of {n} hosts")
    m = n + (n % 2)  # with the phantom host

    def at(i: int) -> int:  # L[i] of the rotated list, L = [1..m-1]
        return 1 + (r + i) % (m - 1)

    meetings = [(0, at(0))] + [(at(i), at(m - 1 - i)) for i in range(1, (m - 2) // 2 + 1)]
    return [(min(a, b), max(a, b)) for a, b in meetings if max(a, b) < n]


def circle_rounds(n: int) -> list[list[Pair]]:
    """Every round of the circle schedule of n hosts."""
    return [circle_round(n, r) for r in range(circle_count(n))]


def byes(n: int, pairs: list[Pair]) -> list[int]:
    """The hosts that sit out a round of these pairs."""
    busy = {h for pair in pairs for h in pair}
    return [h for h in range(n) if h not in busy]


def pack(pairs: list[Pair]) -> list[list[Pair]]:
    """Pairs in rounds where no host is in two pairs, in order, greedily (the confirmation's re-runs)."""
    rounds: list[list[Pair]] = []
    busy: list[set[int]] = []
    for pair in pairs:
        for i, hosts in enumerate(busy):
            if not hosts & set(pair):
                rounds[i].append(pair)
                hosts.update(pair)
                break
        else:
            rounds.append([pair])
            busy.append(set(pair))
    return rounds

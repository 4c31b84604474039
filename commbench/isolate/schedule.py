"""Which hosts meet in which round: the round-robin ("circle") schedule.

Every pair of N hosts meets exactly once in N-1 rounds (N rounds for odd N), and no host is in two
pairs of one round, so each round's N/2 pairs can run at the same time: 64 hosts take 63 rounds of
32 concurrent pairs instead of 2,016 pair runs one after the other.
"""

from __future__ import annotations

Pair = tuple[int, int]


def circle_rounds(n: int) -> list[list[Pair]]:
    """The rounds of pairs (i, j), i < j, over hosts 0..n-1.

    Even n: host 0 stays put; in round r the others, L = [1..n-1] rotated left by r, pair 0 with
    L[0] and L[i] with L[-i] for i = 1..(n-2)/2. Odd n: a phantom host n makes n even, and whoever
    meets it sits that round out (a bye), so there are n rounds of (n-1)/2 pairs.
    """
    if n < 2:
        return []
    m = n + (n % 2)  # with the phantom host
    others = list(range(1, m))
    rounds: list[list[Pair]] = []
    for r in range(m - 1):
        rotated = others[r:] + others[:r]
        meetings = [(0, rotated[0])] + [(rotated[i], rotated[-i]) for i in range(1, (m - 2) // 2 + 1)]
        rounds.append([(min(a, b), max(a, b)) for a, b in meetings if max(a, b) < n])
    return rounds


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

"""Neighbour gains: a dialog turn is worth to the question what the turn beside it is worth.

A question often names what one turn says ("what does Caroline do to destress?") while the
answer is the next turn ("yoga, and running"), which shares no word with the question and only a
moderate similarity, so on its own it never pays for its tokens (adr/0114). Turns of one
conversation sit next to each other in time: a candidate's gain is raised to that of its nearest
earlier or later turn of the same user when the two are at most ``window`` seconds apart.

That reply is often not among the search's candidates at all: ``adjacent_turns`` picks the turns
beside the best dialog hits from a second, time-based store lookup, so they can be (adr/0122).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Hashable, Sequence
from datetime import datetime

from proxy.context.records import Candidate


def neighbour_gains(
    gains: Sequence[float],
    times: Sequence[datetime],
    groups: Sequence[Hashable | None],
    *,
    window: float,
) -> list[float]:
    """Each gain raised to the larger gain of its time neighbours in its group.

    Neighbours are adjacent items of one group in time order (ties by index), at most ``window``
    seconds apart; an item of group ``None`` has none. Invariants: no gain falls; every result
    is the item's own gain or a neighbour's original gain (no chains: a raised gain is never
    passed on); a negative ``window`` changes nothing.
    """
    out = list(gains)
    if window < 0 or len(gains) < 2:
        return out
    last: dict[Hashable, int] = {}
    # Only grouped items have neighbours (about half of a request's candidates are turns);
    # the sort is stable, so ties still go by index.
    grouped = [i for i, group in enumerate(groups) if group is not None]
    for i in sorted(grouped, key=times.__getitem__):
        group = groups[i]
        j = last.get(group)
        last[group] = i
        if j is None or (times[i] - times[j]).total_seconds() > window:
            continue
        out[i] = max(out[i], gains[j])
        out[j] = max(out[j], gains[i])
    return out


def adjacent_turns(
    seeds: Sequence[Candidate],
    near: Sequence[Candidate],
    have: Collection[str],
    *,
    window: float,
) -> list[Candidate]:
    """The turns just before and just after each seed, taken from ``near``.

    ``near`` holds the seeds' user's dialog turns around them (the store's ``turns_near``), in
    any order; time order (ties by id) decides what is adjacent. A neighbour more than
    ``window`` seconds from its seed, or whose id is in ``have`` (already a candidate), is left
    out; each is returned once, in seed order, the earlier side first (adr/0122).
    """
    line = sorted(near, key=lambda c: (c.record.created_at, c.record.id))
    keys = [(c.record.created_at, c.record.id) for c in line]
    taken = set(have)
    found: list[Candidate] = []
    for seed in seeds:
        key = (seed.record.created_at, seed.record.id)
        at = bisect.bisect_left(keys, key)
        after = at + 1 if at < len(keys) and keys[at] == key else at
        for index in (at - 1, after):
            if not 0 <= index < len(line):
                continue
            turn = line[index]
            apart = abs((turn.record.created_at - seed.record.created_at).total_seconds())
            if turn.record.id not in taken and apart <= window:
                taken.add(turn.record.id)
                found.append(turn)
    return found

"""Neighbour gains: a dialog turn is worth to the question what the turn beside it is worth.

A question often names what one turn says ("what does Caroline do to destress?") while the
answer is the next turn ("yoga, and running"), which shares no word with the question and only a
moderate similarity, so on its own it never pays for its tokens (adr/0114). Turns of one
conversation sit next to each other in time: a candidate's gain is raised to that of its nearest
earlier or later turn of the same user when the two are at most ``window`` seconds apart.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from datetime import datetime


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
    for i in sorted(range(len(gains)), key=times.__getitem__):  # stable: ties by index
        group = groups[i]
        if group is None:
            continue
        j = last.get(group)
        last[group] = i
        if j is None or (times[i] - times[j]).total_seconds() > window:
            continue
        out[i] = max(out[i], gains[j])
        out[j] = max(out[j], gains[i])
    return out

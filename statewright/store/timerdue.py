"""The next due time of a workflow after a timer is scheduled or cancelled on its own.

``next_due_at`` is the earlier of the handler's pending run (if any) and the first pending
timer; the row does not keep the two apart. Adding a timer only ever makes it earlier (the
minimum). Removing one (a cancel, or a replacement by key) may make it later, but only when
the removed timer is provably what ``next_due_at`` stood for; otherwise it is kept, so a
handler's pending run (or retry) is never lost. Keeping it too long costs at most one early
look by a worker, never a lost or doubled firing.
"""

from __future__ import annotations


def _earliest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def next_due(
    current: float | None,
    removed_due: float | None,
    first_timer: float | None,
    *,
    now: float,
    attempts: int,
    parked: str | None,
) -> float | None:
    """The row's new ``next_due_at``.

    Args:
        current: the row's ``next_due_at`` before the change.
        removed_due: the due time of the timer the change removed (None: none was).
        first_timer: the earliest pending timer after the change (None: none is left).
        now: the time of the change.
        attempts, parked: the row's retry counter and parked reason.
    """
    if current is None:
        return first_timer
    keeps_current = (
        removed_due is None  # nothing removed: only ever earlier
        or current < removed_due  # it stood for something earlier than the removed timer
        or current <= now  # due already: a worker looks now and sorts it out
        or (attempts > 0 and parked is None)  # a retry may hide behind the removed timer
    )
    return _earliest(current, first_timer) if keeps_current else first_timer

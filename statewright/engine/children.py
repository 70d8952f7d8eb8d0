"""Child workflows: a parent starts them, each child's end reaches the parent once, and an
ended parent's live children are cancelled.

- **Started once.** A child's id is its parent's id and a key (``order-1.parcel-2``), so a
  handler that runs again after a crash starts nothing twice: the create of an existing id
  returns it. The create is refused, in its transaction, when the parent has ended or the
  handler's lease on it is gone (a worker frozen past its lease starts nothing).
- **Heard once.** A child's terminal transition arms, in its own transaction, a one-shot
  timer on the parent that fires ``child_done`` (or ``child_failed``, or the child type's
  own name for its final state) with ``{"child", "key", "state", "result"}``: the timer is
  consumed by the parent's transition that applies it, so the parent hears of each child
  exactly once, whichever process dies when. It is *kept*: a parent that moves between
  states before it applies it still has it. A state that refuses it fails the parent, as
  any one-shot timer's refused event does: accept the child events wherever children may
  end (a compound state or ``*`` as the source).
- **Joined by the parent's machine.** :func:`gather` records each child's end in the
  context (``children``: key -> ``{"state", "result"}``); :func:`all_done`,
  :func:`any_done` and :func:`n_done` are the guards of the edge that leaves the waiting
  state; :func:`fan_out` is a handler that starts one child per element of a context list,
  at most ``cap`` running at once.
- **No orphans.** A parent that ends has its live children cancelled (the parent type's
  ``children_on_end="abandon"`` leaves them): at once by the process that ended it, and by
  every worker's recovery round for an end whose process died first.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from statewright import ids
from statewright.definition.joins import (
    all_done,
    any_done,
    gather,
    n_done,
)
from statewright.engine.cancel import cancel
from statewright.engine.fanout import fan_out
from statewright.errors import InvalidInput, StatewrightError, StoreError
from statewright.store.protocol import Family
from statewright.types import WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

__all__ = [
    "all_done",
    "any_done",
    "cancel_live_children",
    "cancel_orphans",
    "child_id",
    "ended",
    "fan_out",
    "gather",
    "n_done",
    "settled",
]


def child_id(parent_id: str, key: str) -> str:
    """The id of ``parent_id``'s child ``key``: ``<parent_id>.<key>``."""
    if not ids.valid_id(key) or "." in key:
        raise InvalidInput(
            f"invalid child key {key!r}: 1-200 letters, digits, '_' and '-', starting with "
            "a letter or digit",
            field="key",
        )
    return f"{parent_id}.{key}"


def ended_reason(parent_id: str) -> str:
    """The reason of the cancel an ended parent's child gets: one text whoever sends it (the
    process that ended the parent, or a recovery round), so that its key replays it."""
    return f"parent {parent_id} ended"


# -- an ended parent's live children -------------------------------------------------------


async def cancel_live_children(rt: Runtime, parent: WorkflowRow) -> int:
    """Cancel ``parent``'s live children (it has ended); how many were asked. A child its
    type cannot cancel in its state is left (logged)."""
    asked, after = 0, ""
    while True:
        page = await rt.store.children(parent.id, after=after, limit=100)
        for child in page:
            if child.terminal or (child.cancel is not None and child.lease_owner is not None):
                continue  # ended, or its worker delivers the request it has
            asked += await _cancel_child(rt, child, parent.id)
        if len(page) < 100:
            return asked
        after = page[-1].id


async def cancel_orphans(
    rt: Runtime, limit: int = 100, after: tuple[str, str] | None = None
) -> tuple[int, tuple[str, str] | None]:
    """Cancel live children whose parent has ended (or is gone) and whose parent's type
    cancels them: what an ended parent's process did not get to (a recovery round). One page
    of ``limit`` after ``after``; returns how many were cancelled and where the next round
    goes on (None: from the start again), so that children left running on purpose
    (``children_on_end="abandon"``) cannot hide the others however many there are."""
    if not isinstance(rt.store, Family):
        return 0, None
    asked = 0
    page = await rt.store.orphans(limit, after)
    for child in page:
        assert child.parent is not None
        parent = await rt.store.get_workflow(child.parent)
        if parent is not None and not _cancels_children(rt, parent):
            continue
        asked += await _cancel_child(rt, child, child.parent)
    last = page[-1] if len(page) == limit else None
    return asked, None if last is None or last.parent is None else (last.parent, last.id)


async def _cancel_child(rt: Runtime, child: WorkflowRow, parent_id: str) -> int:
    """Cancel ``child`` of the ended ``parent_id`` (one key and reason whoever asks, so a
    second ask replays the first); 1 if it was cancelled now, 0 if not (logged)."""
    try:
        done = await cancel(
            rt,
            child.id,
            ended_reason(parent_id),
            f"parent {parent_id}",
            "parent-ended",
            if_allowed=True,
        )
    except StatewrightError as exc:
        log.warning("child %s of ended %s not cancelled: %s", child.id, parent_id, exc)
        return 0
    return int(done.applied)


def _cancels_children(rt: Runtime, parent: WorkflowRow) -> bool:
    try:
        wtype = rt.registry.type_of(parent.type, parent.machine_version)
    except StatewrightError:
        return True  # a type this process does not know: the default
    return wtype.children_on_end == "cancel"


def ended(rt: Runtime, row: WorkflowRow) -> None:
    """A workflow has ended: cancel its live children in the background, if its type does
    (a crash before it is done leaves them to :func:`cancel_orphans`)."""
    if not isinstance(rt.store, Family) or not _cancels_children(rt, row):
        return  # a store without the family part has no children to read
    task = asyncio.get_running_loop().create_task(_cascade(rt, row))
    rt.background.add(task)
    task.add_done_callback(rt.background.discard)


async def settled(rt: Runtime) -> None:
    """Wait for the cascades started so far (the engine's close does)."""
    while rt.background:
        await asyncio.gather(*list(rt.background), return_exceptions=True)


async def _cascade(rt: Runtime, row: WorkflowRow) -> None:
    try:
        await cancel_live_children(rt, row)
    except (StoreError, StatewrightError):
        log.exception("cancelling the children of %s failed (recovery will)", row.id)

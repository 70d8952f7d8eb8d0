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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statewright import ids
from statewright.definition.machine import Assign, Guard
from statewright.engine.cancel import cancel
from statewright.engine.workflow_type import FAILED_STATES
from statewright.errors import InvalidInput, StatewrightError, StoreError
from statewright.store.protocol import Family
from statewright.types import ParentLink, WorkflowRow

if TYPE_CHECKING:
    from statewright.engine.runtime import Runtime

log = logging.getLogger(__name__)

GATHERED = "children"
"""The context key :func:`gather` records children's ends under."""


def child_id(parent_id: str, key: str) -> str:
    """The id of ``parent_id``'s child ``key``: ``<parent_id>.<key>``."""
    if not ids.valid_id(key) or "." in key:
        raise InvalidInput(
            f"invalid child key {key!r}: 1-200 letters, digits, '_' and '-', starting with "
            "a letter or digit",
            field="key",
        )
    return f"{parent_id}.{key}"


def parent_link(parent: WorkflowRow, key: str, from_handler: bool) -> ParentLink:
    return ParentLink(parent.id, key, parent.lease if from_handler else None)


# -- the parent's machine ------------------------------------------------------------------


def gather(into: str = GATHERED) -> Assign:
    """An action for the edges on ``child_done``/``child_failed``: records the child's end in
    ``context[into][key]`` as ``{"state", "result"}``."""

    def record(context: Mapping[str, Any], payload: Mapping[str, Any]) -> dict[str, Any]:
        ended = dict(context.get(into) or {})
        ended[str(payload["key"])] = {"state": payload["state"], "result": payload.get("result")}
        return {into: ended}

    return Assign(f"gather_{into}", record)


def _ended_after(context: Mapping[str, Any], payload: Mapping[str, Any], into: str) -> int:
    """How many children have ended once the one ``payload`` reports is counted."""
    ended = context.get(into) or {}
    return len(ended) + (0 if str(payload.get("key")) in ended else 1)


def _expected(context: Mapping[str, Any], over: str | int) -> int:
    if isinstance(over, int):
        return over
    value = context.get(over)
    return len(value) if isinstance(value, Sequence | Mapping) else int(value or 0)


def all_done(over: str | int, into: str = GATHERED) -> Guard:
    """A guard: the child this event reports is the last of ``over`` to end (``over``: a
    context key holding the list the children were started for, or their number)."""
    return Guard(
        f"all_{over}_done",
        lambda c, p: _ended_after(c, p, into) >= _expected(c, over),
    )


def n_done(n: int, into: str = GATHERED, *, succeeded: bool = False) -> Guard:
    """A guard: with this event, ``n`` children have ended (``succeeded``: ended by
    ``child_done``, the failed ones not counted)."""

    def enough(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
        if not succeeded:
            return _ended_after(context, payload, into) >= n
        ended = context.get(into) or {}
        ok = sum(1 for e in ended.values() if e.get("state") not in FAILED_STATES)
        mine = str(payload.get("key")) not in ended and payload.get("state") not in FAILED_STATES
        return ok + int(mine) >= n

    return Guard(f"{n}_done" if not succeeded else f"{n}_succeeded", enough)


def any_done(into: str = GATHERED) -> Guard:
    """A guard: any child's end (the first one reported)."""
    return n_done(1, into)


def fan_out(
    child_type: str,
    over: str,
    *,
    key: Callable[[int, Any], str] = lambda i, item: str(i),
    input: Callable[[Any], Mapping[str, Any]] = lambda item: {"item": item},
    cap: int | None = None,
    into: str = GATHERED,
) -> Callable[[Any], Any]:
    """A handler for the state the parent waits in: starts a child of ``child_type`` for each
    element of ``context[over]`` (keyed ``key(index, element)``, its context
    ``input(element)``), at most ``cap`` running at once, and waits (returns None).

    It runs again on every child's end the state takes as a self-transition (with
    :func:`gather`), starting the next. Children already started are started again as
    no-ops (their ids are derived), so a crash at any point starts none twice; the running
    ones are always the first ``cap`` of those not ended, in list order."""
    if cap is not None and cap < 1:
        raise ValueError("cap must be at least 1")

    async def handler(run: Any) -> None:  # a Run (steps imports this module)
        items = run.context.get(over) or []
        ended = run.context.get(into) or {}
        budget = len(items) if cap is None else cap
        for i, item in enumerate(items):
            if budget <= 0:
                break
            k = key(i, item)
            if k in ended:
                continue
            await run.start_child(child_type, k, input(item))
            budget -= 1
        return None

    handler.__name__ = f"fan_out_{child_type}"
    return handler


# -- an ended parent's live children -------------------------------------------------------


async def cancel_live_children(rt: Runtime, parent: WorkflowRow) -> int:
    """Cancel ``parent``'s live children (it has ended); how many were asked. A child its
    type cannot cancel in its state is left (logged)."""
    asked, after = 0, ""
    while True:
        page = await rt.store.children(parent.id, after=after, limit=100)
        for child in page:
            if child.terminal or child.cancel is not None:
                continue
            try:
                done = await cancel(
                    rt,
                    child.id,
                    f"parent {parent.id} ended in {parent.state}",
                    f"parent {parent.id}",
                    "parent-ended",
                    if_allowed=True,
                )
            except StatewrightError as exc:
                log.warning("child %s of ended %s not cancelled: %s", child.id, parent.id, exc)
                continue
            asked += int(done.applied)
        if len(page) < 100:
            return asked
        after = page[-1].id


async def cancel_orphans(rt: Runtime, limit: int = 100) -> int:
    """Cancel live children whose parent has ended (or is gone) and whose parent's type
    cancels them: what an ended parent's process did not get to (a recovery round)."""
    if not isinstance(rt.store, Family):
        return 0
    asked = 0
    for child in await rt.store.orphans(limit):
        assert child.parent is not None
        parent = await rt.store.get_workflow(child.parent)
        if parent is not None and not _cancels_children(rt, parent):
            continue
        ended = parent or child  # a parent gone: named by the child's link
        try:
            done = await cancel(
                rt,
                child.id,
                f"parent {child.parent} ended",
                f"parent {child.parent}",
                "parent-ended",
                if_allowed=True,
            )
        except StatewrightError as exc:
            log.warning("orphan %s of %s not cancelled: %s", child.id, ended.id, exc)
            continue
        asked += int(done.applied)
    return asked


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

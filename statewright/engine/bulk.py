"""Bulk actions: one operator action (cancel, resume, retry, move, fork) over every workflow a
filter matches, as Temporal's batch operations and Inngest's or Hatchet's bulk cancel/replay.

A dry run counts the matches and samples their ids, and writes nothing. A real run pages
through the matches (the store's keyset listing, ``batch`` at a time) and applies the action
to each workflow through the engine's own command, with the idempotency key
``bulk:<operation_id>:<action>``: running the same operation again (after a kill, say) finds
the key in a workflow's log and counts it ``replayed`` instead of applying it twice. Each
applied action is one logged transition with the actor and ``{"reason": reason}``.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from statewright import ids
from statewright.engine import commands
from statewright.engine import fork as forking
from statewright.engine import operator as operating
from statewright.engine.reads import checked_search
from statewright.engine.runtime import Runtime
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    NotParked,
    StatewrightError,
    StepsWouldRerun,
    StepUnresolved,
    WorkflowBusy,
    WorkflowExists,
    WorkflowFinished,
)
from statewright.types import WorkflowFilter, WorkflowRow

ACTIONS = ("cancel", "resume", "retry", "move", "fork")
"""What a bulk operation may do to each workflow."""

MAX_BATCH = 5000
MAX_SAMPLE = 100
_OPERATION = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


NOT_NOW: tuple[type[StatewrightError], ...] = (
    NotParked,
    IllegalTransition,
    WorkflowFinished,
    WorkflowBusy,
    StepUnresolved,
    StepsWouldRerun,
    WorkflowExists,
)
"""Refusals that mean "not allowed now" for one workflow: counted ``skipped``, not failed."""


@dataclass(frozen=True)
class BulkFilter:
    """Which workflows a bulk action applies to. ``None`` means no constraint."""

    type: str | None = None
    state: str | None = None
    version: int | None = None
    """The machine version the workflows run."""
    entered_before: float | None = None
    """Only workflows that entered their state before this time (older than an age)."""
    entered_after: float | None = None
    parked: bool = False
    """Only workflows parked for an operator."""
    parked_reason: str | None = None
    """Only workflows parked for this reason (e.g. ``step_outcome_unknown``); implies parked."""
    terminal: bool | None = False
    """Live workflows by default; None for all (forking finished ones, say)."""
    tenant: str | None = None
    search: tuple[tuple[str, str], ...] = ()
    """Only workflows with all these search attributes ``(name, value)`` (declared by the
    type, or by some registered type without one: InvalidInput otherwise)."""

    def listing(self, limit: int) -> WorkflowFilter:
        """The store listing of these workflows (version and parked reason are checked on
        each row: they have no index, and the listing reads the rows anyway). With a state,
        whether it is terminal is too: its index (by state) is the one to read, not the one
        of all live workflows."""
        return WorkflowFilter(
            type=self.type,
            state=self.state,
            terminal=self.terminal if self.state is None else None,
            tenant=self.tenant,
            entered_before=self.entered_before,
            entered_after=self.entered_after,
            parked=self.parked or self.parked_reason is not None,
            limit=limit,
            search=self.search,
        )

    def matches(self, row: WorkflowRow) -> bool:
        """Whether ``row`` passes what the listing does not filter."""
        if self.version is not None and row.machine_version != self.version:
            return False
        if self.terminal is not None and row.terminal != self.terminal:
            return False
        return self.parked_reason is None or row.parked == self.parked_reason


@dataclass
class BulkResult:
    """What :func:`bulk` did (or, with ``dry_run``, would do)."""

    operation_id: str
    action: str
    dry_run: bool
    matched: int = 0
    applied: int = 0
    replayed: int = 0
    """Done by an earlier run of the same operation: not applied again."""
    skipped: int = 0
    """Not allowed now (finished, no edge for the cancel, held by a worker, not parked...)."""
    failed: int = 0
    sample: list[str] = field(default_factory=list)
    """Some of the matching workflows' ids."""
    errors: dict[str, str] = field(default_factory=dict)
    """Why each skipped or failed workflow was (``code: message``, up to ``sample`` of them)."""
    entered_before: float | None = None
    """The cutoff the run listed by: the filter's, or the time the run started (workflows
    entering a state later are not its). A re-run of a bulk fork or move without a state
    filter should pass it, so the workflows the first run made or moved are not matched."""


def check_operation_id(operation_id: str | None) -> str:
    """``operation_id``, or a new one; InvalidInput if it is not 1-100 of ``[A-Za-z0-9_.-]``."""
    if operation_id is None:
        return uuid.uuid4().hex
    if not isinstance(operation_id, str) or not _OPERATION.fullmatch(operation_id):
        raise InvalidInput(
            f"invalid operation id {operation_id!r}: 1-100 letters, digits, '_', '.', '-'"
        )
    return operation_id


def _check(action: str, batch: int, sample: int, to_state: str | None) -> None:
    if action not in ACTIONS:
        raise InvalidInput(f"unknown bulk action {action!r} (one of: {', '.join(ACTIONS)})")
    for name, value, top in (("batch", batch, MAX_BATCH), ("sample", sample, MAX_SAMPLE)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise InvalidInput(f"{name} must be an integer in 0..{top}, got {value!r}")
    if batch < 1:
        raise InvalidInput("batch must be at least 1")
    if action == "move" and (not isinstance(to_state, str) or not to_state):
        raise InvalidInput("a bulk move needs the state to move to (to_state)")


def cutoff(entered_before: float | None, older_than: float | None, now: float) -> float | None:
    """A filter's ``entered_before`` from a time and an age (seconds in the state, counted
    back from ``now``), given either, both (the earlier wins) or neither (None): what every
    surface's ``older_than`` and ``entered_before`` mean together."""
    ago = None if older_than is None else now - older_than
    given = [t for t in (entered_before, ago) if t is not None]
    return min(given) if given else None


async def bulk(
    rt: Runtime,
    action: str,
    where: BulkFilter,
    *,
    reason: str,
    actor: str,
    dry_run: bool = False,
    operation_id: str | None = None,
    to_state: str | None = None,
    batch: int = 500,
    sample: int = 10,
) -> BulkResult:
    """Apply ``action`` to every workflow ``where`` matches (see the module docstring).

    ``move`` needs ``to_state``; ``resume`` applies to parked workflows only (others are
    skipped); ``retry`` makes any live workflow due again, asking an unresolved step's
    reconcile hook again (:func:`~statewright.engine.operator.resume` with ``reconcile``);
    ``fork`` forks each at its latest version.

    Raises InvalidInput (no reason, an unknown action, a bad operation id, batch or sample)
    before touching anything; one workflow's refusal is counted, not raised.
    """
    operating.check_reason(reason, f"a bulk {action}")
    _check(action, batch, sample, to_state)
    op = check_operation_id(operation_id)
    if not isinstance(where, BulkFilter):
        raise InvalidInput("the filter must be a BulkFilter")
    if where.search:
        where = replace(where, search=checked_search(rt, where.search, where.type))
    result = BulkResult(op, action, bool(dry_run))
    key = f"bulk:{op}:{action}"
    apply = _action(rt, action, key, reason, actor, to_state)
    # Workflows that enter a state after the operation starts (a moved one, a new one) are
    # not its: the listing stops at its start.
    now = math.nextafter(rt.clock.now(), math.inf)  # one started this instant is matched
    before = now if where.entered_before is None else min(where.entered_before, now)
    result.entered_before = before
    listing = replace(where.listing(batch), entered_before=before)
    after: tuple[float, str] | None = None
    while True:
        page = await rt.store.list_workflows(replace(listing, after=after))
        for row in page:
            if not where.matches(row):
                continue
            result.matched += 1
            if len(result.sample) < sample:
                result.sample.append(row.id)
            if not dry_run:
                await _one(rt, row, key, apply, result, sample)
        if len(page) < batch:
            return result
        last = page[-1]
        after = (last.state_entered_at, last.id)


Apply = Callable[[WorkflowRow], Awaitable[bool]]
"""One workflow's action: True if it applied now, False if it was a replay."""


async def _one(
    rt: Runtime, row: WorkflowRow, key: str, apply: Apply, result: BulkResult, sample: int
) -> None:
    try:
        if await rt.store.transition_by_key(row.id, key) is not None:
            result.replayed += 1
            return
        if await apply(row):
            result.applied += 1
        else:
            result.replayed += 1
    except NOT_NOW as exc:
        result.skipped += 1
        if len(result.errors) < sample:
            result.errors[row.id] = f"{exc.code}: {exc}"
    except StatewrightError as exc:
        result.failed += 1
        if len(result.errors) < sample:
            result.errors[row.id] = f"{exc.code}: {exc}"


def _action(
    rt: Runtime, action: str, key: str, reason: str, actor: str, to_state: str | None
) -> Apply:
    """The function applying ``action`` to one workflow under ``key``."""

    async def cancel(row: WorkflowRow) -> bool:
        done = await commands.cancel(
            rt, row.id, reason=reason, actor=actor, idempotency_key=key, if_allowed=True
        )
        if not done.applied:
            raise done.refusal or IllegalTransition(row.state, "cancel", [], "not allowed now")
        return not done.replayed

    async def resume(row: WorkflowRow) -> bool:
        if action == "resume" and row.parked is None:
            raise NotParked(f"workflow {row.id!r} is not parked: nothing to resume")
        await operating.resume(
            rt,
            row.id,
            actor=actor,
            reason=reason,
            idempotency_key=key,
            reconcile=action == "retry",
        )
        return True

    async def move(row: WorkflowRow) -> bool:
        await operating.move_to(
            rt, row.id, str(to_state), actor=actor, reason=reason, idempotency_key=key
        )
        return True

    async def fork(row: WorkflowRow) -> bool:
        if await rt.store.get_workflow(ids.fork_id(row.id, row.version)) is not None:
            return False
        await forking.fork(rt, row.id, actor=actor, reason=reason, version=row.version)
        return True

    return {"cancel": cancel, "resume": resume, "retry": resume, "move": move, "fork": fork}[
        action
    ]

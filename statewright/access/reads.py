"""What one caller may read: workflows of its tenant, under the ids it knows them by, with
what their types redact hidden from callers who do not see secrets (see
:mod:`statewright.redaction`). :class:`~statewright.access.Access` is these reads plus the
commands (:mod:`statewright.access.core`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from statewright import ids
from statewright.access.principal import ADMIN, OPERATOR, Principal, not_found, public_error
from statewright.definition.machine import Machine
from statewright.engine import llm_usage, reads
from statewright.engine import parked as parking
from statewright.engine.children import child_id
from statewright.engine.core import Engine, Stuck
from statewright.engine.failures import PARKED_UNKNOWN
from statewright.engine.search import text as search_text
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import Forbidden, StatewrightError, UnknownWorkflowType
from statewright.observability.alerts import Alert, AlertThresholds, evaluate_alerts
from statewright.redaction import NO_REDACTION, Redactor
from statewright.store.protocol import Family
from statewright.types import (
    StepRecord,
    StuckKey,
    TimerRecord,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)
from statewright.views import (
    CHILDREN_COUNTED,
    ChildCounts,
    Summary,
    child_view,
    summary_of,
    transition_view,
    workflow_view,
)


class Reads:
    """The engine's reads as one caller may make them (see the module docstring).

    ``sees_secrets``: whether the caller sees what the workflow types ``redact`` (see
    :mod:`statewright.redaction`); by default operators and admins do, nobody else. The MCP
    server passes False: agents never do. Summaries are redacted for everyone.
    """

    def __init__(
        self, engine: Engine, principal: Principal, *, sees_secrets: bool | None = None
    ) -> None:
        self.engine = engine
        """The engine, for wiring (a surface builds an Access from it); every use goes
        through this caller's methods."""
        self.runtime = engine.runtime
        self.principal = principal
        if sees_secrets is None:
            sees_secrets = bool(principal.roles & {OPERATOR, ADMIN})
        self.sees_secrets = sees_secrets

    # -- what the engine knows of types and time ------------------------------------------

    @property
    def types(self) -> list[WorkflowType]:
        """The latest registered version of each type (any caller may read them)."""
        return self.runtime.registry.types

    def type_of(self, name: str, version: int | None = None) -> WorkflowType:
        """A type's latest version, or the one asked; raises UnknownWorkflowType."""
        return self.runtime.registry.type_of(name, version)

    def now(self) -> float:
        """The engine's clock."""
        return self.runtime.clock.now()

    def is_stuck(self, row: WorkflowRow) -> bool:
        """Whether ``row`` (as this caller read it) counts as stuck now."""
        return reads.is_stuck(self.runtime, row)

    async def alerts(self, thresholds: AlertThresholds) -> list[Alert]:
        """The alert rules that fire for the caller's tenant's workflows."""
        return await evaluate_alerts(self.engine, thresholds, tenant=self.principal.scope)

    async def get(self, workflow_id: str) -> WorkflowRow:
        """The workflow the caller knows as ``workflow_id`` (its id within the caller's tenant
        when the caller is bound to one: see :mod:`statewright.ids`)."""
        scope = self.principal.scope
        if scope is None:
            return await reads.get(self.runtime, workflow_id)
        if not ids.valid_id(workflow_id):
            raise not_found(workflow_id)
        store = self.runtime.store
        store_id = ids.qualify(scope, workflow_id)
        row = await store.get_workflow(store_id)
        if row is None and store_id != workflow_id:
            # One of this tenant's started before ids were scoped: kept under its bare id.
            row = await store.get_workflow(workflow_id)
        if row is None or not self.principal.sees(row):
            raise not_found(workflow_id)
        self.runtime.transitions.rows.put(row)
        return row

    def public_id(self, store_id: str) -> str:
        """The id this caller knows a workflow by."""
        return ids.local(store_id, self.principal.scope)

    def public_text(self, text: str) -> str:
        """A message (an error's, a workflow's last error) naming workflows by the ids this
        caller knows them by (see :func:`statewright.ids.localize`)."""
        return ids.localize(text, self.principal.scope)

    def public_error(self, exc: StatewrightError) -> dict[str, Any]:
        """``exc.to_dict()`` as this caller may read it: its message and details name
        workflows by the caller's ids, never by the tenant-qualified store id (unless the
        caller gave one: ``exc.as_given``)."""
        return public_error(exc, self.principal)

    def view(self, row: WorkflowRow) -> dict[str, Any]:
        """The workflow as this caller sees it: its id, the events it may fire now, its
        summary, redacted for this caller."""
        view = workflow_view(
            row, self.allowed_for(row), summary=self.summary(row), redactor=self.redactor(row)
        )
        view["id"] = self.public_id(row.id)
        if row.parent is not None:
            view["parent"] = self.public_id(row.parent)
        if view["last_error"] is not None:
            view["last_error"] = self.public_text(view["last_error"])
        view["version_registered"] = self.known_machine(row) is not None
        view["search_attributes"] = self.search_view(row)
        return view

    def search_view(self, row: WorkflowRow) -> dict[str, str]:
        """``row``'s search attributes as its type declares them, from its context (they are
        derived from it), as this caller may see them; none when its version is not
        registered here."""
        try:
            names = self.type_of(row.type, row.machine_version).search_attributes
        except UnknownWorkflowType:
            return {}
        if not names:
            return {}
        shown = self.redactor(row).mapping({n: row.context.get(n) for n in names})
        return {n: t for n, v in (shown or {}).items() if (t := search_text(v)) is not None}

    def operator_actions(self, row: WorkflowRow, unresolved: bool | None = None) -> list[str]:
        """The operator actions this caller may take on ``row`` now, in the order the dashboard
        shows them: ``resume`` (re-run its state's handler) and ``move`` (admin only) while
        it is not finished and its machine version is registered, ``fork`` always. Empty for
        callers without the operator or admin role. The actions check the same rules again.

        A workflow parked because a step's outcome is unknown offers ``resolve_step`` instead
        of ``resume`` (which would park it again), unless ``unresolved`` (whether its ledger
        still has such a step, when it was read) is False."""
        if not self.principal.roles & {OPERATOR, ADMIN}:
            return []
        live = not row.terminal and self.known_machine(row) is not None
        actions = []
        if live:
            unknown = row.parked == PARKED_UNKNOWN and unresolved is not False
            actions.append("resolve_step" if unknown else "resume")
        actions.append("fork")
        if live and ADMIN in self.principal.roles:
            actions.append("move")
        return actions

    # -- redaction (see statewright.redaction) ------------------------------------------------

    def redact_paths(self, row: WorkflowRow) -> tuple[str, ...]:
        """What ``row``'s type redacts (for a type this engine does not know: what any of its
        types redacts)."""
        try:
            return self.type_of(row.type, row.machine_version).redact
        except UnknownWorkflowType:
            return tuple(dict.fromkeys(p for t in self.types for p in t.redact))

    def redactor(self, row: WorkflowRow, *sources: Any) -> Redactor:
        """What this caller must not see of ``row``, learnt from its context and ``sources``
        (more values read with it); shows everything to a caller who :attr:`sees_secrets`."""
        if self.sees_secrets:
            return NO_REDACTION
        return self.secret_redactor(row, *sources)

    def secret_redactor(self, row: WorkflowRow, *sources: Any) -> Redactor:
        """:meth:`redactor` whoever the caller is (for summaries)."""
        paths = self.redact_paths(row)
        return Redactor(paths, row.context, *sources) if paths else NO_REDACTION

    def summary(self, row: WorkflowRow) -> Summary:
        """``row``'s summary (the type's hook, else the default), always redacted."""
        try:
            hook = self.type_of(row.type, row.machine_version).summary
        except UnknownWorkflowType:
            hook = None
        return summary_of(row.type, row.context, hook, self.secret_redactor(row))

    def context(self, row: WorkflowRow) -> dict[str, Any]:
        """``row``'s full context as this caller may see it."""
        return self.redactor(row).mapping(row.context) or {}

    def transition_view(self, rec: TransitionRecord) -> dict[str, Any]:
        view = transition_view(rec)
        view["workflow_id"] = self.public_id(rec.workflow_id)
        # The engine's actors name workflows by store id: a child's start is by ``workflow
        # <parent>``, a parent hears a child's end from ``timer for child <child>``.
        view["actor"] = self.public_text(rec.actor)
        return view

    def machine_of(self, row: WorkflowRow) -> Machine:
        return self.type_of(row.type, row.machine_version).machine

    def known_machine(self, row: WorkflowRow) -> Machine | None:
        """``row``'s machine, or None when its type or version is not registered here (an old
        version after an upgrade, a type this process does not load): reads still show the
        workflow, as one nothing can be fired on until its version is registered again."""
        try:
            return self.machine_of(row)
        except UnknownWorkflowType:
            return None

    def allowed_for(self, row: WorkflowRow) -> list[str]:
        """The events that could fire now and that this caller may fire (none for a workflow
        whose version is not registered)."""
        machine = self.known_machine(row)
        if machine is None:
            return []
        return [
            e
            for e in machine.allowed_events(row.state, row.context)
            if self.principal.may_fire(machine.events[e])
        ]

    async def history(
        self,
        workflow_id: str,
        after_version: int = 0,
        limit: int | None = None,
        *,
        row: WorkflowRow | None = None,
        redact: bool = True,
    ) -> list[TransitionRecord]:
        """The workflow's log in version order: after ``after_version``, at most ``limit``.
        ``row``: the workflow as this caller already read it (a page read in chunks reads
        it once). ``redact=False``: as stored, for a view that redacts what it shows itself
        (with :meth:`redactor`, learning from more than this page)."""
        row = await self._seen(workflow_id, row)
        records = await self.runtime.store.history(row.id, after_version, limit)
        if not redact or self.sees_secrets or not self.redact_paths(row):
            return records
        red = self.redactor(
            row, *(r.payload for r in records), *(r.context_patch for r in records)
        )
        return [_redacted_transition(r, red) for r in records]

    async def steps(
        self,
        workflow_id: str,
        after: tuple[float, str] | None = None,
        limit: int | None = None,
        *,
        row: WorkflowRow | None = None,
        redact: bool = True,
    ) -> list[StepRecord]:
        """The workflow's steps in ``(started_at, key)`` order, after ``after`` (a keyset);
        ``row`` and ``redact`` as for :meth:`history`."""
        row = await self._seen(workflow_id, row)
        records = await self.runtime.store.steps(row.id, after, limit)
        if not redact or self.sees_secrets or not self.redact_paths(row):
            return records
        red = self.redactor(row, *(s.result for s in records))
        return [
            dataclasses.replace(s, result=red.value(s.result), error=red.opt_text(s.error))
            for s in records
        ]

    async def children(
        self,
        workflow_id: str,
        after: str | None = None,
        limit: int = 100,
        *,
        row: WorkflowRow | None = None,
    ) -> list[WorkflowRow]:
        """The workflow's children (:mod:`statewright.engine.children`) in id order, which is
        their keys' order: after the child of key ``after``, at most ``limit``. ``row`` as
        for :meth:`history`. Show them with :meth:`child_view` (by the ids this caller knows
        them by); nothing in it is redacted. Empty over a store without children
        (:class:`~statewright.store.protocol.Family`)."""
        row = await self._seen(workflow_id, row)
        store = self.runtime.store
        if not isinstance(store, Family) or not row.has_children:
            return []  # (marked as it starts its first child: no read for the others)
        start = "" if after is None else child_id(row.id, after)
        found = await store.children(row.id, after=start, limit=limit)
        # A child is in its parent's tenant: a check that costs nothing, never a leak.
        return [c for c in found if self.principal.sees(c)]

    def child_view(self, child: WorkflowRow) -> dict[str, Any]:
        """One child's line (:func:`statewright.views.child_view`) for this caller."""
        return child_view(child, self.public_id)

    async def child_counts(self, row: WorkflowRow) -> ChildCounts | None:
        """How many children ``row`` (as this caller read it) has and how many ended, from
        one read of at most :data:`~statewright.views.CHILDREN_COUNTED` of them (``more``
        when there are others), none for a workflow that never started one; None over a
        store without children."""
        if not isinstance(self.runtime.store, Family):
            return None
        if not row.has_children:
            return ChildCounts.of([])  # no read: it never started a child
        found = await self.children(self.public_id(row.id), limit=CHILDREN_COUNTED + 1, row=row)
        return ChildCounts.of(found[:CHILDREN_COUNTED], more=len(found) > CHILDREN_COUNTED)

    async def usage(self, row: WorkflowRow) -> dict[str, Any] | None:
        """``row``'s token usage, ``{"total", "by_state", "by_model"}`` (see
        :func:`statewright.engine.llm_usage.report`), or None when it made no model call: one
        read of its model steps, which the database filters (nothing to decode for a
        workflow without agents). Numbers and names only: nothing to redact."""
        return llm_usage.report(await llm_usage.model_records(self.runtime.store, row.id))

    async def conversation(
        self, workflow_id: str, *, row: WorkflowRow | None = None
    ) -> list[dict[str, Any]]:
        """The neutral messages of the workflow's agents' model calls, in order, each with
        the step, agent, state and visit it came from (:func:`statewright.engine.llm_usage.
        conversation`); redacted like step results for a caller who does not see secrets
        (what the type redacts is masked inside the messages' texts)."""
        row = await self._seen(workflow_id, row)
        records = await llm_usage.model_records(self.runtime.store, row.id)
        messages = llm_usage.conversation(records)
        if self.sees_secrets or not self.redact_paths(row) or not messages:
            return messages
        red = self.redactor(row, *(r.result for r in records))
        return [red.value(m) for m in messages]

    async def _seen(self, workflow_id: str, row: WorkflowRow | None) -> WorkflowRow:
        if row is None:
            return await self.get(workflow_id)
        if not self.principal.sees(row):
            raise not_found(workflow_id)
        return row

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        """The caller's tenant's workflows (or the asked one's, for a caller seeing all)."""
        scoped = dataclasses.replace(where, tenant=self._tenant_filter(where.tenant))
        return await reads.list_workflows(self.runtime, scoped)

    async def stuck(self, *, after: StuckKey | None = None, limit: int = 100) -> list[Stuck]:
        """A page of the caller's tenant's stuck workflows (see :meth:`Engine.stuck`)."""
        return await reads.stuck(
            self.runtime, tenant=self.principal.scope, after=after, limit=limit
        )

    async def transitions_since(self, seq: int, limit: int = 500) -> list[TransitionRecord]:
        """The log of the caller's tenant after ``seq``, redacted for this caller."""
        store = self.runtime.store
        records = await store.transitions_since(seq, limit, tenant=self.principal.scope)
        if self.sees_secrets or not any(t.redact for t in self.types) or not records:
            return records
        # Each workflow's type says what to redact and its context what to mask: one read per
        # workflow of the page (the log does not carry the type).
        learn: dict[str, list[Any]] = {}
        for rec in records:
            learn.setdefault(rec.workflow_id, []).extend((rec.payload, rec.context_patch))
        redactors: dict[str, Redactor] = {}
        for workflow_id, values in learn.items():
            row = await store.get_workflow(workflow_id)
            if row is None:  # (gone) what any of the types redacts
                paths = tuple(dict.fromkeys(p for t in self.types for p in t.redact))
                redactors[workflow_id] = Redactor(paths, *values)
            else:
                redactors[workflow_id] = self.redactor(row, *values)
        return [_redacted_transition(r, redactors[r.workflow_id]) for r in records]

    async def unresolved_steps(self, row: WorkflowRow) -> list[str] | None:
        """Of a workflow parked because a step's outcome is unknown: the steps to resolve
        (their names, in the order they started); None for any other workflow."""
        if row.parked != PARKED_UNKNOWN or row.terminal:
            return None
        return (await parking.unresolved_steps(self.runtime.store, [row])).get(row.id, [])

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
        row: WorkflowRow | None = None,
    ) -> list[TimerRecord]:
        """A workflow's pending timers by ``(due_at, id)``, earliest first (any reader of its
        tenant): after ``after``, at most ``limit``; ``row`` as for :meth:`history`."""
        row = await self._seen(workflow_id, row)
        return await self.runtime.store.timers(row.id, after=after, limit=limit)

    # -- the caller's tenant ---------------------------------------------------------------

    def _tenant_filter(self, asked: str | None) -> str | None:
        mine = self.principal.scope
        if mine is None:
            return asked
        if asked not in (None, mine):
            raise Forbidden(f"{self.principal.actor!r} may only see tenant {mine!r}")
        return mine


def _redacted_transition(rec: TransitionRecord, red: Redactor) -> TransitionRecord:
    if not red.active:
        return rec
    return dataclasses.replace(
        rec, payload=red.mapping(rec.payload) or {}, context_patch=red.mapping(rec.context_patch)
    )

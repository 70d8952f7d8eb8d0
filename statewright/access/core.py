""":class:`Access`: the engine as one caller may use it, its reads
(:mod:`statewright.access.reads`) and its commands.

Each command is the engine's own (its arguments, docstring and errors are those of the
function in :mod:`statewright.engine.commands`, :mod:`~statewright.engine.operator`...),
named here once with the rule it needs (:mod:`statewright.access.guard`): adding a command
to the surfaces is one line here and one per surface that shows it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from statewright import ids
from statewright.access.guard import (
    FORK_ERRORS,
    REFUSALS,
    approval_event,
    cancel_event,
    command,
    fires,
    role,
    writer,
)
from statewright.access.principal import ADMIN, DEFAULT_TENANT, OPERATOR
from statewright.access.reads import Reads
from statewright.engine import bulk as bulking
from statewright.engine import commands
from statewright.engine import fork as forking
from statewright.engine import operator as operating
from statewright.engine import timers as timer_ops
from statewright.engine.commands import Started, id_for_key
from statewright.errors import Forbidden, IllegalTransition, WorkflowPruned
from statewright.types import WorkflowRow

OPERATORS = (OPERATOR, ADMIN)
"""The roles that may take operator actions."""


class Access(Reads):
    """The engine as one caller may use it (see :mod:`statewright.access`).

    Every command on a workflow reads it as this caller knows it, checks the caller's roles
    (the role it needs, or the roles of the event it fires), runs as the caller (the actor of
    the transitions it makes), and words its refusals for the caller; a caller never gives
    ``actor`` (nor ``row``).
    """

    # -- commands (statewright.engine.commands) ---------------------------------------------

    send = command(commands.send, fires("event"), errors=REFUSALS, withheld=("context",))
    decide = command(commands.decide, fires(approval_event), errors=REFUSALS)
    cancel = command(commands.cancel, fires(cancel_event), errors=REFUSALS)
    post_input = command(commands.post_input, writer("post inputs"))

    # -- operator actions (statewright.engine.operator, fork, timers) ---------------------

    resolve_step = command(operating.resolve_step, role("resolve steps", *OPERATORS))
    resume = command(operating.resume, role("resume workflows", *OPERATORS))
    patch_context = command(
        operating.patch_context, role("patch a workflow's context", *OPERATORS)
    )
    move_to = command(operating.move_to, role("move workflows by hand", ADMIN))
    fork = command(
        forking.fork, role("fork workflows", *OPERATORS), errors=FORK_ERRORS, new_ids=("new_id",)
    )
    schedule = command(
        timer_ops.schedule, role("schedule timers", *OPERATORS), fires("event", "schedule")
    )
    cancel_timer = command(timer_ops.cancel_or_raise, role("cancel timers", *OPERATORS))

    # -- bulk actions (statewright.engine.bulk) ----------------------------------------------

    async def bulk(
        self,
        action: str,
        where: bulking.BulkFilter,
        *,
        reason: str,
        dry_run: bool = False,
        operation_id: str | None = None,
        to_state: str | None = None,
        batch: int = 500,
        sample: int = 10,
    ) -> bulking.BulkResult:
        """An operator action over every workflow ``where`` matches, in this caller's tenant
        only, as this caller (see :func:`statewright.engine.bulk.bulk`). Operators and
        admins only (a bulk move: admins, as :meth:`move_to`), even for a dry run."""
        if action == "move":
            self.principal.check_role("move workflows by hand", ADMIN)
        else:
            self.principal.check_role(f"take bulk actions ({action})", *OPERATORS)
        scope = self.principal.scope
        if scope is not None:
            where = replace(where, tenant=scope)
        done = await bulking.bulk(
            self.runtime,
            action,
            where,
            reason=reason,
            actor=self.principal.actor,
            dry_run=dry_run,
            operation_id=operation_id,
            to_state=to_state,
            batch=batch,
            sample=sample,
        )
        done.sample = [self.public_id(i) for i in done.sample]
        done.errors = {self.public_id(i): self.public_text(e) for i, e in done.errors.items()}
        return done

    # -- a new workflow, in the caller's tenant ---------------------------------------------

    async def start(
        self,
        workflow_type: str,
        input: Mapping[str, Any] | None = None,
        *,
        workflow_id: str | None = None,
        tenant: str | None = None,
        idempotency_key: str | None = None,
    ) -> Started:
        """Start a workflow in the caller's tenant (see :func:`statewright.engine.commands.
        start`: ``.row`` and ``.created``). An id of the forms the system makes (a
        schedule's tick, a fork's default) is refused (:func:`statewright.ids.check_new_id`)."""
        tenant = self.check_start(workflow_type, tenant)
        if workflow_id is not None:
            ids.check_new_id(workflow_id)
        if tenant != DEFAULT_TENANT:
            workflow_id = await self._store_id_for_new(tenant, workflow_id, idempotency_key)
        try:
            return await commands.start(
                self.runtime,
                workflow_type,
                input,
                workflow_id=workflow_id,
                actor=self.principal.actor,
                tenant=tenant,
                idempotency_key=idempotency_key,
            )
        except WorkflowPruned as exc:  # named by the id this caller knows
            raise WorkflowPruned(self.public_id(exc.workflow_id), exc.idempotency_key) from None

    def check_start(self, workflow_type: str, tenant: str | None) -> str:
        """Whether this caller may start workflows of ``workflow_type`` in ``tenant`` (None:
        its own): the tenant it would start them in, or Forbidden. What a schedule this caller
        declares starts, it must be able to start itself."""
        self.principal.check_writer(f"start {workflow_type!r} workflows")
        mine = self.principal.scope
        if mine is None:
            return tenant or DEFAULT_TENANT
        if tenant not in (None, mine):
            raise Forbidden(f"{self.principal.actor!r} may only start workflows in {mine!r}")
        return mine

    async def _store_id_for_new(self, tenant: str, given: str | None, key: str | None) -> str:
        """The store id a start in ``tenant`` (not the default) creates, or finds."""
        if given is None and key is None:
            return ids.qualify(tenant, uuid.uuid4().hex)
        bare = ids.check_id(given) if given is not None else id_for_key(tenant, str(key))
        kept = await self.runtime.store.get_workflow(bare)
        if kept is not None and kept.tenant == tenant:
            # This tenant's, kept under its bare id (started through the Python API, or
            # before ids were scoped): the start is a retry of that one.
            return bare
        return ids.qualify(tenant, bare)

    # -- the rules the commands apply --------------------------------------------------------

    def check_event(self, row: WorkflowRow, event: str, verb: str = "fire") -> None:
        """Forbidden unless this caller's roles may ``verb`` ``event`` on ``row``."""
        # Read-only callers first: even an event the machine does not know is a write attempt
        # (and would be logged as a rejected transition).
        self.principal.check_writer(f"{verb} {event!r}")
        machine = self.machine_of(row)
        declared = machine.events.get(event)
        if declared is None:
            return  # the engine reports the unknown event as an illegal transition
        if not self.principal.may_fire(declared):
            needed = ["approver", *declared.roles] if declared.approval else list(declared.roles)
            raise Forbidden(
                f"{self.principal.actor!r} may not {verb} {event!r} "
                f"(needs one of the roles: {', '.join(dict.fromkeys(needed)) or 'any writer'})",
                event=event,
                state=row.state,
                workflow_id=self.public_id(row.id),
                allowed=self.allowed_for(row),
            )

    def refusal(self, row: WorkflowRow, exc: IllegalTransition) -> IllegalTransition:
        """The refusal as this caller may see it: only the events it may fire are named as
        allowed (like the ``allowed_events`` of a read), under the id it knows."""
        events = self.machine_of(row).events
        mine = [e for e in exc.allowed if e in events and self.principal.may_fire(events[e])]
        workflow_id = None if exc.workflow_id is None else self.public_id(exc.workflow_id)
        return IllegalTransition(exc.state, exc.event, mine, exc.reason, workflow_id)

"""Who may do what: API tokens, roles per event, tenant scoping.

The surfaces (HTTP, MCP) authenticate a caller into a :class:`Principal` and then use the
engine only through :class:`Access`, which

- hides other tenants' workflows (reading one is ``workflow_not_found``, so ids do not leak),
- lets a caller fire only the events its roles may fire (the machine declares them per event;
  approval events need the ``approver`` role or a role the event names), and
- records the caller as the actor of every transition it causes.

Roles are the machine's own strings (``agent``, ``system``, ``operator``...) plus some with a
fixed meaning: ``admin`` may fire every event that is not an approval, ``approver`` may fire
approval events, ``viewer`` alone may only read, ``operator`` may resolve steps and resume
parked workflows, and ``ops`` may read ``/metrics`` when the service runs with
``--metrics-auth`` (and otherwise only read, like ``viewer``: a scraper's token must not
start workflows or post inputs).

Workflow ids are scoped per tenant (:mod:`statewright.ids`): a caller bound to a tenant names
its workflows by their ids in that tenant, and sees them so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from statewright import ids
from statewright.definition.machine import Event, Machine
from statewright.engine import parked as parking
from statewright.engine import timers as timer_ops
from statewright.engine.core import Engine, Stuck, id_for_key
from statewright.engine.failures import PARKED_UNKNOWN
from statewright.engine.transitions import Dispatched
from statewright.engine.workflow_type import Applied, NotApplied
from statewright.errors import (
    Forbidden,
    IllegalTransition,
    InvalidInput,
    StatewrightError,
    StepsWouldRerun,
    StepUnresolved,
    Unauthorized,
    UnknownWorkflowType,
    WorkflowBusy,
    WorkflowNotFound,
    WorkflowPruned,
)
from statewright.redaction import NO_REDACTION, Redactor
from statewright.store.protocol import fork_source_busy
from statewright.types import (
    InboxItem,
    StepRecord,
    StuckKey,
    TimerRecord,
    TransitionRecord,
    WorkflowFilter,
    WorkflowRow,
)
from statewright.views import Summary, summary_of, transition_view, workflow_view

ADMIN = "admin"
APPROVER = "approver"
OPERATOR = "operator"
"""May resolve steps whose outcome is unknown and resume parked workflows (admin may too)."""
VIEWER = "viewer"
OPS = "ops"
"""May read ``/metrics`` (with ``--metrics-auth``); otherwise read-only, like viewer."""
READ_ONLY_ROLES = frozenset({VIEWER, OPS})
"""Roles that only read: a caller with no other role writes nothing."""
ALL_TENANTS = "*"
"""A token whose tenant is ``*`` sees every tenant (operators, the local open mode)."""
DEFAULT_TENANT = ids.DEFAULT_TENANT


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    actor: str
    roles: frozenset[str]
    tenant: str = DEFAULT_TENANT

    @property
    def read_only(self) -> bool:
        return self.roles <= READ_ONLY_ROLES

    def sees(self, row: WorkflowRow) -> bool:
        return self.tenant in (ALL_TENANTS, row.tenant)

    def may_fire(self, event: Event) -> bool:
        if self.read_only:
            return False
        named = bool(self.roles & set(event.roles))
        if event.approval:
            return APPROVER in self.roles or named
        return not event.roles or named or ADMIN in self.roles

    @property
    def scope(self) -> str | None:
        """The tenant filter for listings (None: every tenant)."""
        return None if self.tenant == ALL_TENANTS else self.tenant


LOCAL = Principal("local", frozenset({ADMIN, APPROVER}), ALL_TENANTS)
"""The caller of the HTTP API and dashboard in open mode (no tokens configured; the service
then only listens locally): the person at this machine."""
AGENT = "agent"
LOCAL_AGENT = Principal("local-agent", frozenset({AGENT}), DEFAULT_TENANT)
"""The caller of MCP without credentials (stdio without ``--tokens``, ``/mcp`` in open mode):
the model on the other end, so the ``agent`` role only (no approval, no admin) in the
default tenant, where the workflows started on this machine without a tenant live. More only
when granted explicitly (a token, or ``statewright mcp --role``)."""


@dataclass(frozen=True)
class TokenEntry:
    sha256: str
    principal: Principal


@dataclass
class TokenRegistry:
    """API tokens mapped to principals. Only SHA-256 digests of the tokens are kept.

    The file (JSON or YAML) lists ``tokens``, each with ``token`` (or ``sha256``, its hex
    digest, so the file need not hold secrets), ``actor``, ``roles`` and ``tenant``::

        tokens:
          - {token: s3cret-agent, actor: agent-7, roles: [agent], tenant: acme}
          - {sha256: 9f86d0..., actor: alice, roles: [approver, operator], tenant: acme}
    """

    entries: dict[str, Principal] = field(default_factory=dict)

    @classmethod
    def from_data(cls, data: Any, source: str = "tokens") -> TokenRegistry:
        items = data.get("tokens") if isinstance(data, Mapping) else data
        if not isinstance(items, list):
            raise InvalidInput(f"{source}: expected a list of tokens under 'tokens'")
        registry = cls()
        for i, item in enumerate(items):
            registry.add_entry(_entry(item, f"{source}: token #{i + 1}"))
        return registry

    @classmethod
    def from_file(cls, path: str | Path) -> TokenRegistry:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot read tokens file {str(p)!r}: {exc.strerror}") from exc
        try:
            data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise InvalidInput(f"tokens file {str(p)!r} is not valid JSON/YAML: {exc}") from exc
        return cls.from_data(data, str(p))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TokenRegistry | None:
        """From ``STATEWRIGHT_TOKENS_FILE``; None when it is not set (open mode)."""
        env = os.environ if environ is None else environ
        path = env.get("STATEWRIGHT_TOKENS_FILE")
        return cls.from_file(path) if path else None

    def add(
        self, token: str, actor: str, roles: Iterable[str], tenant: str = DEFAULT_TENANT
    ) -> None:
        self.add_entry(TokenEntry(digest(token), Principal(actor, frozenset(roles), tenant)))

    def add_entry(self, entry: TokenEntry) -> None:
        self.entries[entry.sha256] = entry.principal

    def authenticate(self, token: str | None) -> Principal:
        if not token:
            raise Unauthorized("an API token is required (Authorization: Bearer <token>)")
        wanted = digest(token)
        # Compare every digest in constant time rather than a dict lookup on attacker input.
        found = None
        for known, principal in self.entries.items():
            if hmac.compare_digest(known, wanted):
                found = principal
        if found is None:
            raise Unauthorized("unknown API token")
        return found


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _entry(item: Any, where: str) -> TokenEntry:
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where}: expected a mapping")
    token, sha = item.get("token"), item.get("sha256")
    if (token is None) == (sha is None):
        raise InvalidInput(f"{where}: give exactly one of 'token' and 'sha256'")
    if token is not None and (not isinstance(token, str) or len(token) < 8):
        raise InvalidInput(f"{where}: 'token' must be a string of at least 8 characters")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
        raise InvalidInput(f"{where}: 'sha256' must be a 64-character hex digest")
    actor, roles = item.get("actor"), item.get("roles", [])
    tenant = item.get("tenant", DEFAULT_TENANT)
    if not isinstance(actor, str) or not actor.strip():
        raise InvalidInput(f"{where}: 'actor' must be a non-empty string")
    if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
        raise InvalidInput(f"{where}: 'roles' must be a list of role names")
    if tenant != ALL_TENANTS and not ids.valid_id(tenant):
        raise InvalidInput(f"{where}: 'tenant' must be '*' or a tenant name ({ids.RULE})")
    principal = Principal(actor, frozenset(roles), tenant)
    return TokenEntry(digest(token) if token is not None else str(sha).lower(), principal)


class Access:
    """The engine as one caller may use it (see the module docstring).

    ``sees_secrets``: whether the caller sees what the workflow types ``redact`` (see
    :mod:`statewright.redaction`); by default operators and admins do, nobody else. The MCP
    server passes False: agents never do. Summaries are redacted for everyone.
    """

    def __init__(
        self, engine: Engine, principal: Principal, *, sees_secrets: bool | None = None
    ) -> None:
        self.engine = engine
        self.principal = principal
        if sees_secrets is None:
            sees_secrets = bool(principal.roles & {OPERATOR, ADMIN})
        self.sees_secrets = sees_secrets

    # -- reads -------------------------------------------------------------------------------

    async def get(self, workflow_id: str) -> WorkflowRow:
        """The workflow the caller knows as ``workflow_id`` (its id within the caller's tenant
        when the caller is bound to one: see :mod:`statewright.ids`)."""
        scope = self.principal.scope
        if scope is None:
            return await self.engine.get(workflow_id)
        if not ids.valid_id(workflow_id):
            raise _not_found(workflow_id)
        store = self.engine.store
        store_id = ids.qualify(scope, workflow_id)
        row = await store.get_workflow(store_id)
        if row is None and store_id != workflow_id:
            # One of this tenant's started before ids were scoped: kept under its bare id.
            row = await store.get_workflow(workflow_id)
        if row is None or not self.principal.sees(row):
            raise _not_found(workflow_id)
        self.engine.transitions.rows.put(row)
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
        if view["last_error"] is not None:
            view["last_error"] = self.public_text(view["last_error"])
        view["version_registered"] = self.known_machine(row) is not None
        return view

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
            return self.engine.type_of(row.type, row.machine_version).redact
        except UnknownWorkflowType:
            return tuple(dict.fromkeys(p for t in self.engine.types for p in t.redact))

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
            hook = self.engine.type_of(row.type, row.machine_version).summary
        except UnknownWorkflowType:
            hook = None
        return summary_of(row.type, row.context, hook, self.secret_redactor(row))

    def context(self, row: WorkflowRow) -> dict[str, Any]:
        """``row``'s full context as this caller may see it."""
        return self.redactor(row).mapping(row.context) or {}

    def transition_view(self, rec: TransitionRecord) -> dict[str, Any]:
        view = transition_view(rec)
        view["workflow_id"] = self.public_id(rec.workflow_id)
        return view

    def machine_of(self, row: WorkflowRow) -> Machine:
        return self.engine.type_of(row.type, row.machine_version).machine

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
    ) -> list[TransitionRecord]:
        """The workflow's log in version order: after ``after_version``, at most ``limit``.
        ``row``: the workflow as this caller already read it (a page read in chunks reads
        it once)."""
        row = await self._seen(workflow_id, row)
        records = await self.engine.store.history(row.id, after_version, limit)
        if self.sees_secrets or not self.redact_paths(row):
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
    ) -> list[StepRecord]:
        """The workflow's steps in ``(started_at, key)`` order, after ``after`` (a keyset)."""
        row = await self._seen(workflow_id, row)
        records = await self.engine.store.steps(row.id, after, limit)
        if self.sees_secrets or not self.redact_paths(row):
            return records
        red = self.redactor(row, *(s.result for s in records))
        return [
            dataclasses.replace(s, result=red.value(s.result), error=red.opt_text(s.error))
            for s in records
        ]

    async def _seen(self, workflow_id: str, row: WorkflowRow | None) -> WorkflowRow:
        if row is None:
            return await self.get(workflow_id)
        if not self.principal.sees(row):
            raise _not_found(workflow_id)
        return row

    async def list_workflows(self, where: WorkflowFilter) -> list[WorkflowRow]:
        """The caller's tenant's workflows (or the asked one's, for a caller seeing all)."""
        scoped = dataclasses.replace(where, tenant=self._tenant_filter(where.tenant))
        return await self.engine.list_workflows(scoped)

    async def stuck(self, *, after: StuckKey | None = None, limit: int = 100) -> list[Stuck]:
        """A page of the caller's tenant's stuck workflows (see :meth:`Engine.stuck`)."""
        return await self.engine.stuck(tenant=self.principal.scope, after=after, limit=limit)

    async def transitions_since(self, seq: int, limit: int = 500) -> list[TransitionRecord]:
        """The log of the caller's tenant after ``seq``, redacted for this caller."""
        store = self.engine.store
        records = await store.transitions_since(seq, limit, tenant=self.principal.scope)
        if self.sees_secrets or not any(t.redact for t in self.engine.types) or not records:
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
                paths = tuple(dict.fromkeys(p for t in self.engine.types for p in t.redact))
                redactors[workflow_id] = Redactor(paths, *values)
            else:
                redactors[workflow_id] = self.redactor(row, *values)
        return [_redacted_transition(r, redactors[r.workflow_id]) for r in records]

    # -- writes ------------------------------------------------------------------------------

    async def start(
        self,
        workflow_type: str,
        input: Mapping[str, Any] | None = None,
        *,
        workflow_id: str | None = None,
        tenant: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """Start a workflow in the caller's tenant; returns ``(row, created)``. An id of the
        forms the system makes (a schedule's tick, a fork's default) is refused
        (:func:`statewright.ids.check_new_id`)."""
        tenant = self.check_start(workflow_type, tenant)
        if workflow_id is not None:
            ids.check_new_id(workflow_id)
        if tenant != DEFAULT_TENANT:
            workflow_id = await self._store_id_for_new(tenant, workflow_id, idempotency_key)
        try:
            return await self.engine.create(
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
        self._writer(f"start {workflow_type!r} workflows")
        return self._tenant_for_new(tenant)

    async def _store_id_for_new(self, tenant: str, given: str | None, key: str | None) -> str:
        """The store id a start in ``tenant`` (not the default) creates, or finds."""
        if given is None and key is None:
            return ids.qualify(tenant, uuid.uuid4().hex)
        bare = ids.check_id(given) if given is not None else id_for_key(tenant, str(key))
        kept = await self.engine.store.get_workflow(bare)
        if kept is not None and kept.tenant == tenant:
            # This tenant's, kept under its bare id (started through the Python API, or
            # before ids were scoped): the start is a retry of that one.
            return bare
        return ids.qualify(tenant, bare)

    async def send(
        self,
        workflow_id: str,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        if_allowed: bool = False,
    ) -> WorkflowRow:
        sent = await self.dispatch(
            workflow_id,
            event,
            payload,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
            if_allowed=if_allowed,
        )
        return sent.row

    async def dispatch(
        self,
        workflow_id: str,
        event: str,
        payload: Mapping[str, Any] | None = None,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        if_allowed: bool = False,
    ) -> Dispatched:
        """:meth:`send`, telling also whether it was an idempotent retry (``replayed``) and,
        with ``if_allowed``, whether it was applied (see :meth:`Engine.send`); the roles
        still apply: an event the caller may not fire is Forbidden whatever the state."""
        row = await self.get(workflow_id)
        self._check_event(row, event)
        try:
            sent = await self.engine.dispatch(
                row.id,
                event,
                payload,
                actor=self.principal.actor,
                expected_version=expected_version,
                idempotency_key=idempotency_key,
                row=row,
                if_allowed=if_allowed,
            )
        except IllegalTransition as exc:
            raise self._refusal(row, exc) from None
        if sent.refusal is not None:
            sent = dataclasses.replace(sent, refusal=self._refusal(sent.row, sent.refusal))
        return sent

    async def decide(
        self,
        workflow_id: str,
        approve: bool,
        *,
        approver: str | None = None,
        comment: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Approve or deny: fire the type's approval or denial event.

        ``approver`` names the person when a service relays the decision; it defaults to the
        caller. The caller stays the transition's actor either way.
        """
        decided = await self.decide_ex(
            workflow_id,
            approve,
            approver=approver,
            comment=comment,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        )
        return decided.row

    async def decide_ex(
        self,
        workflow_id: str,
        approve: bool,
        *,
        approver: str | None = None,
        comment: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> Dispatched:
        """:meth:`decide`, telling also whether it was an idempotent retry."""
        row = await self.get(workflow_id)
        wtype = self.engine.type_of(row.type, row.machine_version)
        event = wtype.approve_event if approve else wtype.deny_event
        self._check_event(row, event)
        # The row is read once here (for the tenant and the event); firing plans on it, and
        # the compare-and-swap on its version keeps the decision on what was read.
        try:
            return await self.engine.decide_ex(
                row.id,
                approve,
                approver=approver or self.principal.actor,
                comment=comment,
                actor=self.principal.actor,
                expected_version=expected_version,
                idempotency_key=idempotency_key,
                row=row,
            )
        except IllegalTransition as exc:
            raise self._refusal(row, exc) from None

    async def cancel(
        self, workflow_id: str, reason: str, *, idempotency_key: str | None = None
    ) -> WorkflowRow:
        cancelled = await self.cancel_ex(workflow_id, reason, idempotency_key=idempotency_key)
        return cancelled.row

    async def cancel_ex(
        self,
        workflow_id: str,
        reason: str,
        *,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        if_allowed: bool = False,
    ) -> Dispatched:
        """:meth:`cancel`, telling also whether it was an idempotent retry, and with
        ``if_allowed`` whether it was applied (see :meth:`Engine.cancel_ex`)."""
        row = await self.get(workflow_id)
        event = self.engine.type_of(row.type, row.machine_version).cancel_event
        if event is None:
            raise InvalidInput(f"workflows of type {row.type!r} cannot be cancelled")
        self._check_event(row, event)
        try:
            cancelled = await self.engine.cancel_ex(
                row.id,
                reason=reason,
                actor=self.principal.actor,
                idempotency_key=idempotency_key,
                expected_version=expected_version,
                if_allowed=if_allowed,
            )
        except IllegalTransition as exc:
            raise self._refusal(row, exc) from None
        if cancelled.refusal is not None:
            refusal = self._refusal(cancelled.row, cancelled.refusal)
            cancelled = dataclasses.replace(cancelled, refusal=refusal)
        return cancelled

    # -- operator actions --------------------------------------------------------------------

    async def resolve_step(
        self, workflow_id: str, step: str, verdict: Applied | NotApplied, *, reason: str
    ) -> StepRecord:
        """An operator's answer for a step whose outcome is unknown (roles operator/admin)."""
        row = await self.get(workflow_id)  # another tenant's does not exist for this caller
        self._operator("resolve steps")
        return await self.engine.resolve_step(
            row.id, step, verdict, actor=self.principal.actor, reason=reason
        )

    async def resume(
        self, workflow_id: str, *, reason: str, reconcile: bool = False
    ) -> WorkflowRow:
        """Make a parked workflow run its state's handler again (roles operator/admin); see
        :meth:`Engine.resume` (refused while a step's outcome is unknown, unless
        ``reconcile``)."""
        row = await self.get(workflow_id)
        self._operator("resume workflows")
        return await self.engine.resume(
            row.id, actor=self.principal.actor, reason=reason, reconcile=reconcile
        )

    async def unresolved_steps(self, row: WorkflowRow) -> list[str] | None:
        """Of a workflow parked because a step's outcome is unknown: the steps to resolve
        (their names, in the order they started); None for any other workflow."""
        if row.parked != PARKED_UNKNOWN or row.terminal:
            return None
        return (await parking.unresolved_steps(self.engine.store, [row])).get(row.id, [])

    async def schedule(
        self,
        workflow_id: str,
        event: str,
        *,
        after: float | None = None,
        at: float | None = None,
        payload: Mapping[str, Any] | None = None,
        key: str | None = None,
        keep: bool = False,
    ) -> TimerRecord:
        """Arm a durable timer on a workflow (roles operator/admin, and only for an event the
        caller may fire now: a timer fires it later on the caller's behalf); see
        :meth:`Engine.schedule`. The transition it makes names the caller
        (``timer for <actor>``)."""
        row = await self.get(workflow_id)
        self._operator("schedule timers")
        self._check_event(row, event, "schedule")
        return await self.engine.schedule(
            row.id,
            event,
            after=after,
            at=at,
            payload=payload,
            key=key,
            keep=keep,
            actor=self.principal.actor,
        )

    async def cancel_timer(self, workflow_id: str, key: str) -> None:
        """Delete a workflow's pending timer by its key (roles operator/admin); raises
        TimerNotFound when there is none."""
        row = await self.get(workflow_id)
        self._operator("cancel timers")
        await timer_ops.cancel_or_raise(
            self.engine.runtime, row.id, key, actor=self.principal.actor
        )

    async def timers(
        self,
        workflow_id: str,
        *,
        after: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[TimerRecord]:
        """A workflow's pending timers by ``(due_at, id)``, earliest first (any reader of its
        tenant): after ``after``, at most ``limit``."""
        row = await self.get(workflow_id)
        return await self.engine.store.timers(row.id, after=after, limit=limit)

    async def fork(
        self,
        workflow_id: str,
        *,
        reason: str,
        version: int | None = None,
        new_id: str | None = None,
        rerun_steps: bool = False,
    ) -> WorkflowRow:
        """Start a new workflow, in the same tenant, from a past version of one (roles
        operator/admin); see :meth:`Engine.fork` (``rerun_steps``: forking from a version
        after which steps were done runs them again; refused unless this is True)."""
        row = await self.get(workflow_id)
        self._operator("fork workflows")
        store_id = (
            None
            if new_id is None
            else ids.qualify(row.tenant, ids.check_new_id(ids.check_id(new_id)))
        )
        try:
            return await self.engine.fork(
                row.id,
                actor=self.principal.actor,
                reason=reason,
                version=version,
                new_id=store_id,
                rerun_steps=rerun_steps,
            )
        except StepUnresolved as exc:  # named by the id this caller knows
            raise StepUnresolved(
                self.public_id(exc.workflow_id), exc.steps, action="fork"
            ) from None
        except StepsWouldRerun as exc:
            public = self.public_id(exc.workflow_id)
            raise StepsWouldRerun(public, exc.version, exc.steps) from None
        except WorkflowBusy:
            raise WorkflowBusy(fork_source_busy(workflow_id)) from None

    async def move_to(
        self,
        workflow_id: str,
        state: str,
        *,
        reason: str,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Move a workflow to a named state outside the machine's edges, one logged ``$move``
        transition (role admin only: it can skip any rule the machine states)."""
        row = await self.get(workflow_id)
        if ADMIN not in self.principal.roles:
            raise Forbidden(
                f"{self.principal.actor!r} may not move workflows by hand (needs the admin role)"
            )
        return await self.engine.move_to(
            row.id,
            state,
            actor=self.principal.actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        )

    async def patch_context(
        self,
        workflow_id: str,
        patch: Mapping[str, Any],
        *,
        reason: str,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WorkflowRow:
        """Set context keys by hand, one logged ``$patch_context`` transition (roles
        operator/admin; an event's data reaches the context through its ``assign``)."""
        row = await self.get(workflow_id)
        self._operator("patch a workflow's context")
        return await self.engine.patch_context(
            row.id,
            patch,
            actor=self.principal.actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
        )

    async def post_input(
        self,
        workflow_id: str,
        name: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> int:
        item, _ = await self.put_input(workflow_id, name, payload, idempotency_key=idempotency_key)
        return item.id

    async def put_input(
        self,
        workflow_id: str,
        name: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> tuple[InboxItem, bool]:
        """Post an input (any writer of the tenant may); ``(item, created)``, ``created``
        False for an idempotent retry."""
        row = await self.get(workflow_id)
        self._writer("post inputs")
        return await self.engine.put_input(
            row.id, name, payload, idempotency_key=idempotency_key, row=row
        )

    # -- checks ------------------------------------------------------------------------------

    def _check_event(self, row: WorkflowRow, event: str, verb: str = "fire") -> None:
        # Read-only callers first: even an event the machine does not know is a write attempt
        # (and would be logged as a rejected transition).
        self._writer(f"{verb} {event!r}")
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

    def _refusal(self, row: WorkflowRow, exc: IllegalTransition) -> IllegalTransition:
        """The refusal as this caller may see it: only the events it may fire are named as
        allowed (like the ``allowed_events`` of a read), under the id it knows."""
        events = self.machine_of(row).events
        mine = [e for e in exc.allowed if e in events and self.principal.may_fire(events[e])]
        workflow_id = None if exc.workflow_id is None else self.public_id(exc.workflow_id)
        return IllegalTransition(exc.state, exc.event, mine, exc.reason, workflow_id)

    def _operator(self, what: str) -> None:
        if not self.principal.roles & {OPERATOR, ADMIN}:
            raise Forbidden(
                f"{self.principal.actor!r} may not {what} (needs the operator or admin role)"
            )

    def _writer(self, what: str) -> None:
        if self.principal.read_only:
            raise Forbidden(f"{self.principal.actor!r} is read-only and may not {what}")

    def _tenant_filter(self, asked: str | None) -> str | None:
        mine = self.principal.scope
        if mine is None:
            return asked
        if asked not in (None, mine):
            raise Forbidden(f"{self.principal.actor!r} may only see tenant {mine!r}")
        return mine

    def _tenant_for_new(self, asked: str | None) -> str:
        mine = self.principal.scope
        if mine is None:
            return asked or DEFAULT_TENANT
        if asked not in (None, mine):
            raise Forbidden(f"{self.principal.actor!r} may only start workflows in {mine!r}")
        return mine


def public_error(exc: StatewrightError, principal: Principal) -> dict[str, Any]:
    """:meth:`Access.public_error` (for a surface that has the caller, not an Access)."""
    body = exc.to_dict()
    if exc.as_given:
        return body
    localized: dict[str, Any] = ids.localize_value(body, principal.scope)
    return localized


def _not_found(workflow_id: str) -> WorkflowNotFound:
    """Not found, naming the id as the caller gave it (even one that looks like a store id:
    for this caller it names nothing)."""
    exc = WorkflowNotFound(workflow_id)
    exc.as_given = True
    return exc


def _redacted_transition(rec: TransitionRecord, red: Redactor) -> TransitionRecord:
    if not red.active:
        return rec
    return dataclasses.replace(
        rec, payload=red.mapping(rec.payload) or {}, context_patch=red.mapping(rec.context_patch)
    )

"""The MCP ``bulk_action`` tool: one operator action over every workflow a filter matches.

Offered only to a caller with the operator or admin role (the default stdio caller is the
local agent: it never sees it), and ``move`` only to an admin, as over HTTP. ``dry_run``
defaults to true: a model counts and samples first, and must ask for the real run
explicitly, with the ``operation_id`` the dry run answered, so that a retry of the real run
(after a timeout, a lost connection) applies nothing twice. Every call goes through
:meth:`statewright.access.Access.bulk` (:mod:`statewright.engine.bulk`): the roles, the tenant
scope, the idempotency key per workflow and the log entries with actor and reason are the
same as on the other surfaces; this module only reads the tool's arguments.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from statewright.access import Access, Principal
from statewright.engine.bulk import MAX_BATCH, MAX_SAMPLE, BulkFilter, cutoff
from statewright.engine.core import MAX_REASON
from statewright.engine.search import from_mapping
from statewright.engine.workflow_type import WorkflowType
from statewright.errors import InvalidInput
from statewright.mcp_server import arguments

TOOL = "bulk_action"
_FILTER = (
    "type",
    "state",
    "version",
    "older_than",
    "entered_before",
    "parked",
    "parked_reason",
    "search",
    "terminal",
)
MAX_AGE = 1e9


def offered(principal: Principal) -> bool:
    """Whether ``principal`` gets the tool: operators and admins only."""
    return bool(principal.bulk_actions())


def tool(wtypes: list[WorkflowType], principal: Principal) -> types.Tool:
    """The tool as ``principal`` (an operator or admin) sees it."""
    actions = list(principal.bulk_actions())
    admin = "move" in actions
    where: dict[str, Any] = {
        "type": {
            "type": "string",
            "enum": [t.name for t in wtypes],
            "description": "Only workflows of this type.",
        },
        "state": {"type": "string", "minLength": 1, "maxLength": 200},
        "version": {"type": "integer", "minimum": 1, "description": "Only this machine version."},
        "older_than": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_AGE,
            "description": "Only workflows in their state for longer than this (seconds).",
        },
        "entered_before": {
            "type": "number",
            "description": "Only workflows that entered their state before this time (Unix "
            "seconds). For a fork or a move, pass the dry run's entered_before, so that calling "
            "again does not fork the forks or match what was moved.",
        },
        "parked": {
            "type": "boolean",
            "default": False,
            "description": "Only workflows parked for an operator.",
        },
        "parked_reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "Only workflows parked for this reason (e.g. step_outcome_unknown).",
        },
        "terminal": {
            "type": ["boolean", "null"],
            "default": False,
            "description": "false (the default): live workflows only; true: finished ones "
            "only (to fork them, say); null: both.",
        },
    }
    declared = sorted({a for t in wtypes for a in t.search_attributes})
    if (search := arguments.search_property(declared)) is not None:
        where["search"] = search
    props: dict[str, Any] = {
        "action": {
            "type": "string",
            "enum": actions,
            "description": "cancel; resume (parked ones: run the state's handler again); retry "
            "(any live one: due again, an unresolved step's reconcile hook asked again); fork"
            + ("; move (to to_state)" if admin else ""),
        },
        "filter": {
            "type": "object",
            "properties": where,
            "additionalProperties": False,
            "description": "Which workflows (live ones unless terminal says otherwise, in your "
            "tenant): every field narrows.",
        },
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_REASON,
            "description": "Why: written in each workflow's log with your name.",
        },
        "dry_run": {
            "type": "boolean",
            "default": True,
            "description": "true (the default): count the matches and sample their ids, change "
            "nothing. false: apply the action, once you have checked the dry run.",
        },
        "operation_id": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_.\-]{1,100}$",
            "description": "Names the operation (a dry run answers a new one when none is "
            "given). Pass the dry run's operation_id to the real run, and the same one again "
            "to retry or resume it: each workflow is acted on once.",
        },
        "sample": {"type": "integer", "minimum": 0, "maximum": MAX_SAMPLE, "default": 10},
        "batch": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH, "default": 500},
    }
    if admin:
        props["to_state"] = {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "description": "For move: the state to move the workflows to.",
        }
    return types.Tool(
        name=TOOL,
        title="Bulk action (operators)",
        description=(
            "Cancel, resume, retry or fork every workflow a filter matches"
            + (" (admins: or move them)" if admin else "")
            + ". Only a dry run unless dry_run is false: it answers how many match, a sample "
            "of their ids and an operation_id. Check it, then call again with dry_run false "
            "and that operation_id to apply. The answer counts applied, replayed (done by an "
            "earlier call of the same operation_id: not again), skipped (not allowed now) and "
            "failed, with why for some."
        ),
        input_schema={
            "type": "object",
            "properties": props,
            "required": ["action", "reason"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )


async def call(access: Access, args: Mapping[str, Any]) -> dict[str, Any]:
    """Run the tool for ``access``'s caller: the arguments checked, then
    :meth:`Access.bulk` (which checks the role again)."""
    arguments.only(
        args,
        "action",
        "filter",
        "reason",
        "dry_run",
        "operation_id",
        "to_state",
        "sample",
        "batch",
    )
    dry_run = args.get("dry_run", True)
    if not isinstance(dry_run, bool):
        raise InvalidInput("'dry_run' must be true or false")
    action = arguments.text(args, "action")
    done = await access.bulk(
        action,
        _filter(access, args.get("filter")),
        reason=arguments.text(args, "reason"),
        dry_run=dry_run,
        operation_id=arguments.opt_text(args, "operation_id"),
        to_state=arguments.opt_text(args, "to_state"),
        batch=arguments.integer(args, "batch", 1, MAX_BATCH) or 500,
        sample=_sample(args),
    )
    body = dataclasses.asdict(done)
    if done.dry_run:
        body["done"] = (
            f"dry run: {done.matched} workflow(s) match, nothing was changed; to apply, call "
            f"again with dry_run false and operation_id {done.operation_id!r}"
        )
    else:
        body["done"] = (
            f"{action}: {done.applied} applied, {done.replayed} already done by this "
            f"operation, {done.skipped} skipped, {done.failed} failed"
        )
    return body


def _sample(args: Mapping[str, Any]) -> int:
    value = arguments.integer(args, "sample", 0, MAX_SAMPLE)
    return 10 if value is None else value


def _filter(access: Access, raw: Any) -> BulkFilter:
    """The tool's ``filter`` object as a :class:`BulkFilter` (``older_than``: an age now)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("'filter' must be a JSON object")
    extra = sorted(set(raw) - set(_FILTER))
    if extra:
        names = ", ".join(map(repr, extra))
        raise InvalidInput(f"unknown filter field(s) {names}; expected: {', '.join(_FILTER)}")
    terminal = raw.get("terminal", False)
    if terminal is not None and not isinstance(terminal, bool):
        raise InvalidInput("'terminal' must be true, false or null")
    parked = raw.get("parked", False)
    if not isinstance(parked, bool):
        raise InvalidInput("'parked' must be true or false")
    age = raw.get("older_than")
    if age is not None and not (_number(age) and 0 <= age <= MAX_AGE):
        raise InvalidInput(f"'older_than' must be a number of seconds from 0 to {MAX_AGE:g}")
    before = raw.get("entered_before")
    if before is not None and not _number(before):
        raise InvalidInput("'entered_before' must be a time (Unix seconds)")
    return BulkFilter(
        type=arguments.opt_text(raw, "type"),
        state=arguments.opt_text(raw, "state"),
        version=arguments.integer(raw, "version", 1, 2**62),
        entered_before=cutoff(before, age, access.now()),
        parked=parked,
        parked_reason=arguments.opt_text(raw, "parked_reason"),
        search=from_mapping(raw.get("search")),
        terminal=terminal,
    )


def _number(value: Any) -> bool:
    """Whether ``value`` is a finite JSON number (not a boolean)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)

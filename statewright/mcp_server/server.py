"""The MCP server: the SDK's low-level :class:`mcp.server.Server` over :class:`Access`.

The low-level server (not ``MCPServer``'s decorated functions) because the tool list is built
per caller: it depends on the caller's roles (which events it may fire), and over HTTP every
request may come with another token. Every call goes through :class:`Access`, so tenant
scoping, roles and the actor recorded in the log are the same as over HTTP and the CLI.

A refused call (illegal in the current state, stale ``expected_version``, a role that may not
fire the event, a payload that breaks the event's schema, an unknown workflow) is a tool result
with ``isError`` and a JSON body ``{"error": {code, message, workflow_id, state, version,
allowed_actions, hint, ...}}``; the engine refuses before writing, so nothing changed. The one
exception is ``outcome_unknown`` (the store connection broke after the write left): its hint
says to call again with the same ``idempotency_key``, which every writing tool takes; a retry
of a call already applied does nothing and says ``"replayed": true``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from statewright import jsonvalue, paging
from statewright._version import __version__
from statewright.access import LOCAL_AGENT, Access, Principal, waits
from statewright.definition.formats.document import to_dict
from statewright.definition.render.mermaid import to_mermaid
from statewright.engine.core import Engine
from statewright.engine.search import from_mapping
from statewright.engine.transitions import Dispatched
from statewright.errors import (
    IllegalTransition,
    InvalidInput,
    StatewrightError,
    UnknownState,
    UnknownWorkflowType,
    WorkflowNotFound,
)
from statewright.mcp_server import arguments, bulk, conversation, refusals
from statewright.mcp_server import catalogue as cat
from statewright.mcp_server.catalogue import Catalogue, EventTool, build_catalogue
from statewright.mcp_server.state import automatic, brief, state_view
from statewright.redaction import Redactor
from statewright.types import WorkflowFilter, WorkflowRow

log = logging.getLogger("statewright.mcp")

Context = ServerRequestContext[Any, Any]
PrincipalOf = Callable[[Context], Principal]
"""How a request's caller is found: fixed for stdio, from the bearer token over HTTP."""

SCHEME = "statewright://"
DIAGRAM_MIME = "text/vnd.mermaid"

INSTRUCTIONS = """\
statewright runs durable workflows as explicit state machines. You move a workflow only by
calling the tools for its events; saying that something happened changes nothing.

1. get_workflow_state(workflow_id) first: it shows the state, allowed_actions (the tools you
   may call now), what the workflow waits for, the steps already done and their results.
2. Call only a tool listed in allowed_actions. Pass expected_version (the version you read)
   to be refused, rather than acting on a stale view, if the workflow moved meanwhile.
3. While workers run automatic steps, call wait_for_state: it reports progress and returns
   the new state.
A refused call returns an error naming the current state and the allowed actions, and
changes nothing. Approvals are never yours to give unless you hold the approver role.
Give every call that writes an idempotency_key; if it fails with outcome_unknown (or times
out), call it again with the same key: it is never done twice.
"""


def create_server(
    engine: Engine,
    principal: Principal | PrincipalOf = LOCAL_AGENT,
    *,
    poll_interval: float = 0.2,
) -> Server[Any]:
    """The MCP server over ``engine`` (which the caller opens and closes).

    Args:
        principal: the caller (stdio: one per process), or a function finding it in each
            request's context (HTTP: from its bearer token). By default the local agent:
            the ``agent`` role only, never an approver.
        poll_interval: how often ``wait_for_state`` looks at the workflow.
    """
    handlers = _Handlers(engine, principal, poll_interval)
    return Server(
        "statewright",
        version=__version__,
        title="statewright workflows",
        description="Durable workflows as explicit state machines.",
        instructions=INSTRUCTIONS,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_resource_templates,
        on_read_resource=handlers.read_resource,
    )


class _Handlers:
    def __init__(
        self, engine: Engine, principal: Principal | PrincipalOf, poll_interval: float
    ) -> None:
        self.engine = engine
        self.principal_of: PrincipalOf = (
            (lambda _ctx: principal) if isinstance(principal, Principal) else principal
        )
        self.poll_interval = poll_interval
        self._catalogues: dict[Principal, Catalogue] = {}

    def access(self, principal: Principal) -> Access:
        """The engine as ``principal`` uses it; agents never see what the types redact,
        whatever their roles."""
        return Access(self.engine, principal, sees_secrets=False)

    def catalogue(self, principal: Principal) -> Catalogue:
        # Types are registered before serving and never change after: one build per caller.
        found = self._catalogues.get(principal)
        if found is None:
            access = self.access(principal)
            found = self._catalogues[principal] = build_catalogue(access, principal)
        return found

    # -- tools -------------------------------------------------------------------------------

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.catalogue(self.principal_of(ctx)).tools())

    async def call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        principal = self.principal_of(ctx)
        access = self.access(principal)
        catalogue = self.catalogue(principal)
        args = dict(params.arguments or {})
        try:
            body = await self._call(ctx, access, catalogue, params.name, args)
        except StatewrightError as exc:
            error = await refusals.error_body(access, catalogue, exc, args.get("workflow_id"))
            return _result({"error": error}, is_error=True)
        except Exception:
            log.exception("MCP tool %r failed", params.name, extra={"action": "mcp_tool_failed"})
            error = {"code": "internal_error", "message": "the tool failed unexpectedly"}
            return _result({"error": error}, is_error=True)
        return _result(body)

    async def _call(
        self,
        ctx: Context,
        access: Access,
        catalogue: Catalogue,
        name: str,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        if name == cat.GET_STATE:
            arguments.only(args, "workflow_id")
            row = await access.get(arguments.text(args, "workflow_id"))
            return await state_view(access, catalogue, row)
        if name == cat.LIST:
            return await self._list(access, catalogue, args)
        if name == cat.START and any(t.name == cat.START for t in catalogue.fixed):
            return await self._start(access, catalogue, args)
        if name == cat.WAIT:
            return await self._wait(ctx, access, catalogue, args)
        if name == cat.POST_INPUT and any(t.name == cat.POST_INPUT for t in catalogue.fixed):
            return await self._post_input(access, catalogue, args)
        if name == bulk.TOOL and any(t.name == bulk.TOOL for t in catalogue.fixed):
            return await bulk.call(access, args)
        spec = catalogue.events.get(name)
        if spec is None:
            raise refusals.unknown_tool(access, name)
        return await self._fire(access, catalogue, spec, args)

    async def _list(
        self, access: Access, catalogue: Catalogue, args: dict[str, Any]
    ) -> dict[str, Any]:
        arguments.only(args, "type", "state", "terminal", "limit", "offset", "cursor", "search")
        terminal = args.get("terminal")
        if terminal is not None and not isinstance(terminal, bool):
            raise InvalidInput("'terminal' must be true or false")
        limit = arguments.integer(args, "limit", 1, cat.MAX_LIST) or 20
        offset = arguments.integer(args, "offset", 0, cat.MAX_OFFSET) or 0
        cursor = arguments.opt_text(args, "cursor")
        rows = await access.list_workflows(
            WorkflowFilter(
                type=arguments.opt_text(args, "type"),
                state=arguments.opt_text(args, "state"),
                terminal=terminal,
                limit=limit + 1,  # one more: is there a next page?
                offset=offset,
                after=None if cursor is None else paging.workflow_after(cursor),
                search=from_mapping(args.get("search")),
            )
        )
        page = rows[:limit]
        return {
            "workflows": [brief(access, catalogue, r) for r in page],
            "count": len(page),
            "limit": limit,
            "offset": offset,
            "next_cursor": paging.workflow_cursor(page[-1]) if len(rows) > limit else None,
        }

    async def _start(
        self, access: Access, catalogue: Catalogue, args: dict[str, Any]
    ) -> dict[str, Any]:
        arguments.only(args, "type", "input", "id", "idempotency_key")
        data = args.get("input", {})
        if not isinstance(data, Mapping):
            raise InvalidInput("'input' must be a JSON object")
        key = arguments.idempotency_key(args)
        started = await access.start(
            arguments.text(args, "type"),
            data,
            workflow_id=arguments.opt_text(args, "id"),
            idempotency_key=key,
        )
        replayed = key is not None and not started.created
        return {
            "created": started.created,
            "replayed": replayed,
            **await state_view(access, catalogue, started.row),
        }

    async def _post_input(
        self, access: Access, catalogue: Catalogue, args: dict[str, Any]
    ) -> dict[str, Any]:
        arguments.only(args, "workflow_id", "name", "payload", "idempotency_key")
        workflow_id = arguments.text(args, "workflow_id")
        name = arguments.text(args, "name")
        payload = args.get("payload")
        if not isinstance(payload, Mapping):
            raise InvalidInput("'payload' must be a JSON object")
        posted = await access.post_input(
            workflow_id, name, payload, idempotency_key=arguments.idempotency_key(args)
        )
        item, created = posted.item, posted.created
        if created:
            done = f"input {name!r} #{item.id} posted"
        else:
            done = (
                f"input {name!r} #{item.id} was already posted with this idempotency_key: "
                "nothing was posted again"
            )
        view = await state_view(access, catalogue, await access.get(workflow_id))
        return {"done": done, "input_id": item.id, "replayed": not created, **view}

    async def _wait(
        self, ctx: Context, access: Access, catalogue: Catalogue, args: dict[str, Any]
    ) -> dict[str, Any]:
        arguments.only(args, "workflow_id", "states", "after_version", "timeout")
        workflow_id = arguments.text(args, "workflow_id")
        states = args.get("states")
        if states is not None and (
            not isinstance(states, list) or not all(isinstance(s, str) for s in states)
        ):
            raise InvalidInput("'states' must be a list of state names")
        after_version = arguments.integer(args, "after_version", 0, 2**62)
        timeout = args.get("timeout", cat.DEFAULT_WAIT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidInput("'timeout' must be a number of seconds")
        if not 0 <= timeout <= cat.MAX_WAIT:
            raise InvalidInput(f"'timeout' must be between 0 and {cat.MAX_WAIT:g} seconds")
        seen: tuple[Any, ...] | None = None
        reports = 0

        async def report(row: WorkflowRow) -> None:
            nonlocal seen, reports
            key = (row.version, jsonvalue.dumps(row.progress, sort_keys=True))
            if key != seen:
                seen = key
                reports += 1
                # A no-op unless the client asked for progress (sent a progressToken).
                message = _progress_message(row, access.redactor(row))
                await ctx.session.report_progress(reports, None, message)

        async def settled(row: WorkflowRow) -> bool:
            return not await automatic(access, row)

        try:
            waited = await waits.wait(
                access,
                workflow_id,
                timeout=float(timeout),
                states=states,
                after_version=after_version,
                until=settled,  # without states or after_version: once nothing runs by itself
                seen=report,
                poll=self.poll_interval,
                max_poll=self.poll_interval,
            )
        except UnknownState as exc:  # an argument of this tool (HTTP: a 404 of the query)
            raise InvalidInput(exc.message) from None
        view = await state_view(access, catalogue, waited.row)
        return {**waited.fields(), **view}

    async def _fire(
        self, access: Access, catalogue: Catalogue, spec: EventTool, args: dict[str, Any]
    ) -> dict[str, Any]:
        if spec.kind == "decide":
            arguments.only(args, "workflow_id", "comment", "expected_version", "idempotency_key")
        else:  # send and cancel
            arguments.only(
                args, "workflow_id", "payload", "expected_version", "idempotency_key", "if_allowed"
            )
        if_allowed = args.get("if_allowed", False)
        if not isinstance(if_allowed, bool):
            raise InvalidInput("'if_allowed' must be true or false")
        workflow_id = arguments.text(args, "workflow_id")
        expected = arguments.integer(args, "expected_version", 1, 2**62)
        key = arguments.idempotency_key(args)
        before = await access.get(workflow_id)
        if before.type != spec.machine:
            raise InvalidInput(
                f"{spec.name} acts on {spec.machine} workflows; "
                f"{workflow_id!r} is a {before.type} workflow",
                workflow_id=workflow_id,
            )
        if spec.kind == "decide":
            comment = arguments.opt_text(args, "comment")
            decided = await access.decide(
                workflow_id,
                spec.approve,
                comment=comment,
                expected_version=expected,
                idempotency_key=key,
            )
            after, replayed = decided.row, decided.replayed
        else:
            payload = args.get("payload", {})
            if not isinstance(payload, Mapping):
                raise InvalidInput("'payload' must be a JSON object", event=spec.event)
            if spec.kind == "cancel":
                sent = await _cancel(
                    access, workflow_id, before, spec, payload, expected, key, if_allowed
                )
            else:
                sent = await access.send(
                    workflow_id,
                    spec.event,
                    payload,
                    expected_version=expected,
                    idempotency_key=key,
                    if_allowed=if_allowed,
                )
            if not sent.applied:
                return await _not_applied(access, catalogue, spec, sent.row, sent.refusal)
            after, replayed = sent.row, sent.replayed
        view = await state_view(access, catalogue, after)
        if replayed:
            done = (
                f"{spec.event}: already done with this idempotency_key; nothing was done "
                f"again (the workflow is now in {after.state!r})"
            )
        elif after.version == before.version and after.cancel_requested is not None:
            done = f"cancel requested: the running {before.state!r} step is being stopped"
        else:
            done = f"{spec.event}: {before.state} -> {after.state}"
        return {"done": done, "applied": True, "replayed": replayed, **view}

    # -- resources ---------------------------------------------------------------------------

    async def list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        access = self.access(self.principal_of(ctx))  # only callers who may connect may read
        resources: list[types.Resource] = []
        for wtype in sorted(access.types, key=lambda t: t.name):
            m = wtype.machine
            resources.append(
                types.Resource(
                    uri=f"{SCHEME}machines/{m.name}/definition",
                    name=f"{m.name}-definition",
                    title=f"{m.name} definition (v{m.version})",
                    description=f"{m.description} States, events (with roles and payload "
                    "schemas) and transitions, as JSON.".strip(),
                    mime_type="application/json",
                )
            )
            resources.append(
                types.Resource(
                    uri=f"{SCHEME}machines/{m.name}/diagram",
                    name=f"{m.name}-diagram",
                    title=f"{m.name} diagram (v{m.version})",
                    description=f"The {m.name} machine as a Mermaid state diagram.",
                    mime_type=DIAGRAM_MIME,
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        self.principal_of(ctx)
        template = types.ResourceTemplate(
            uri_template=SCHEME + "workflows/{workflow_id}/diagram",
            name="workflow-diagram",
            title="A workflow's diagram",
            description="The workflow's machine as a Mermaid diagram, its current state marked.",
            mime_type=DIAGRAM_MIME,
        )
        return types.ListResourceTemplatesResult(
            resource_templates=[template, conversation.TEMPLATE]
        )

    async def read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        access = self.access(self.principal_of(ctx))
        uri = str(params.uri)
        parts = uri.removeprefix(SCHEME).split("/") if uri.startswith(SCHEME) else []
        try:
            if len(parts) == 3 and parts[0] == "machines" and parts[2] == "definition":
                machine = access.type_of(parts[1]).machine
                text, mime = json.dumps(to_dict(machine), indent=2), "application/json"
            elif len(parts) == 3 and parts[0] == "machines" and parts[2] == "diagram":
                text, mime = to_mermaid(access.type_of(parts[1]).machine), DIAGRAM_MIME
            elif len(parts) == 3 and parts[0] == "workflows" and parts[2] == "diagram":
                row = await access.get(parts[1])
                text, mime = to_mermaid(access.machine_of(row), row.state), DIAGRAM_MIME
            elif len(parts) == 3 and parts[0] == "workflows" and parts[2] == "conversation":
                text, mime = await conversation.read(access, parts[1]), "application/json"
            else:
                raise _no_resource(uri)
        except (UnknownWorkflowType, WorkflowNotFound) as exc:
            raise _no_resource(uri, access.public_error(exc)["message"]) from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )


RESOURCE_NOT_FOUND = -32002
"""The MCP error code for a resource that does not exist."""


def _no_resource(uri: str, why: str | None = None) -> MCPError:
    return MCPError(RESOURCE_NOT_FOUND, why or f"no resource {uri!r}", {"uri": uri})


def _result(body: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body, indent=1, default=str))],
        structured_content=body,
        is_error=is_error,
    )


async def _cancel(
    access: Access,
    workflow_id: str,
    row: WorkflowRow,
    spec: EventTool,
    payload: Mapping[str, Any],
    expected: int | None,
    key: str | None,
    if_allowed: bool,
) -> Dispatched:
    """Cancel through the engine, so a running step hears of it and can save partial results
    (``replayed``: this retried a cancel already made with ``key``; ``applied`` False: not
    allowed now, with ``if_allowed``). ``workflow_id``: as the caller gave it (``access``
    takes the caller's ids, not the store's ``row.id``, which for a tenant's workflow is
    ``tenant:id``)."""
    access.machine_of(row).events[spec.event].validate_payload(payload)
    reason = payload.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        reason = f"cancelled by {access.principal.actor}"
    return await access.cancel(
        workflow_id,
        reason=reason,
        idempotency_key=key,
        expected_version=expected,
        if_allowed=if_allowed,
    )


async def _not_applied(
    access: Access,
    catalogue: Catalogue,
    spec: EventTool,
    row: WorkflowRow,
    refusal: IllegalTransition | None,
) -> dict[str, Any]:
    """The result of an ``if_allowed`` call its state did not allow: no error, nothing done."""
    reason = None if refusal is None else refusal.reason
    why = f" ({reason})" if reason else ""
    return {
        "done": f"{spec.event}: not applied, {row.state!r} does not allow it now{why}; "
        "nothing was changed",
        "applied": False,
        "reason": reason,
        "replayed": False,
        **await state_view(access, catalogue, row),
    }


def _progress_message(row: WorkflowRow, red: Redactor) -> str:
    text = f"{row.state} (version {row.version})"
    progress = red.mapping(row.progress)
    if progress:
        rest = dict(progress)
        done, of, message = rest.pop("done", None), rest.pop("of", None), rest.pop("message", None)
        parts = []
        if done is not None:
            parts.append(f"{done}/{of}" if of is not None else str(done))
        if message is not None:
            parts.append(str(message))
        if rest:
            parts.append(json.dumps(rest, sort_keys=True, default=str))
        text += ": " + " ".join(parts)
    return text

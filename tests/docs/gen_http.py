"""Writes docs/reference/http.md: each route's method, path, roles, parameters, body fields
and error codes (from the app's OpenAPI document and :data:`ROLES`), and the examples of
:data:`SECTIONS` with the responses the real app gives them (see ``http_examples.py``).

Run ``python -m tests.docs.gen_http`` after changing a route; ``test_http_reference.py``
fails while the page misses a route or an example's answer changes shape.
"""

from __future__ import annotations

import asyncio
import html
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.docs.http_examples import SHOWN, Example, cut, send, service
from tests.docs.pages import REFERENCE


@dataclass(frozen=True)
class Call:
    who: str | None
    method: str
    target: str
    body: Any = None
    note: str = ""
    headers: tuple[tuple[str, str], ...] = ()


ANY = "Any caller with a token (read-only roles included)."
WRITER = "Any caller that may write (a role other than `viewer` and `ops`)."
OPERATORS = "`operator` or `admin`."
NONE = "None: no token needed (for probes and scrapers)."

ORDER = {"sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}

# route -> (roles, [calls]), in page order
SECTIONS: dict[str, tuple[str, list[Call]]] = {
    "GET /v1/me": (ANY, [Call("operator", "GET", "/v1/me")]),
    "GET /v1/types": (ANY, [Call("viewer", "GET", "/v1/types")]),
    "GET /v1/types/{name}": (
        ANY,
        [Call("viewer", "GET", "/v1/types/refund_approval")],
    ),
    "GET /v1/types/{name}/diagram": (
        ANY,
        [Call("viewer", "GET", "/v1/types/refund_approval/diagram")],
    ),
    "POST /v1/workflows": (
        WRITER + " A type's `input_schema` is checked first.",
        [
            Call(
                "agent",
                "POST",
                "/v1/workflows",
                {"type": "order_fulfilment", "id": "order-1001", "input": ORDER},
                "An order: the worker then runs its handlers (reserve, authorize, capture, "
                "fulfil) until it waits in `fulfillment_triggered` for the warehouse's `ship`.",
            ),
            Call(
                "agent",
                "POST",
                "/v1/workflows",
                {
                    "type": "order_fulfilment",
                    "id": "order-1004",
                    "input": {"sku": "DESK-1", "quantity": 1},
                },
                "An order without its amount: a handler fails on it (`KeyError`, a fatal "
                "error) and the workflow parks for an operator (see `GET /v1/stuck`).",
            ),
            Call(
                "agent",
                "POST",
                "/v1/workflows",
                {
                    "type": "refund_approval",
                    "id": "refund-1",
                    "input": {
                        "order_id": "order-1001",
                        "amount_cents": 45000,
                        "customer": "ann@example.com",
                    },
                },
                "A refund over the automatic limit: it waits in `awaiting_approval`.",
            ),
            Call(
                "agent",
                "POST",
                "/v1/workflows",
                {"type": "agent_task", "id": "task-1", "input": {"goal": "triage ticket 42"}},
                "With an `Idempotency-Key`, a retry of the same request answers 200 with "
                "`Idempotent-Replayed: true` and starts nothing.",
                (("Idempotency-Key", "start-task-1"),),
            ),
        ],
    ),
    "GET /v1/workflows": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows?type=order_fulfilment&terminal=false&limit=1")],
    ),
    "GET /v1/workflows/{workflow_id}": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows/order-1001")],
    ),
    "GET /v1/workflows/{workflow_id}/context": (
        ANY + " The keys the type redacts are left out unless the caller is `operator` or "
        "`admin`.",
        [Call("viewer", "GET", "/v1/workflows/order-1001/context")],
    ),
    "PATCH /v1/workflows/{workflow_id}/context": (
        OPERATORS,
        [
            Call(
                "operator",
                "PATCH",
                "/v1/workflows/order-1001/context",
                {"patch": {"gift_wrap": True}, "reason": "the customer asked by phone"},
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/events": (
        "A role the event names in its `roles` (any writer for an event without roles; "
        "`admin` may fire any). An approval event needs `approver`.",
        [
            Call(
                "system",
                "POST",
                "/v1/workflows/order-1001/events",
                {"event": "ship", "payload": {"tracking_number": "1Z999AA10123456784"}},
                "",
                (("Idempotency-Key", "ship-order-1001"),),
            ),
            Call(
                "system",
                "POST",
                "/v1/workflows/order-1001/events?if_allowed=true",
                {"event": "ship", "payload": {"tracking_number": "1Z999AA10123456784"}},
                "With `if_allowed=true`, an event the state does not allow now is not an "
                "error: 200, `applied: false`, and why.",
            ),
            Call(
                "system",
                "POST",
                "/v1/workflows/order-1001/events",
                {"event": "capture_payment", "payload": {"charge_id": "ch_1"}},
                "Without it, the same kind of refusal is a 409 `illegal_transition` naming the "
                "state and the events allowed there.",
            ),
        ],
    ),
    "GET /v1/workflows/{workflow_id}/history": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows/order-1001/history?limit=2")],
    ),
    "GET /v1/workflows/{workflow_id}/steps": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows/order-1001/steps?limit=1")],
    ),
    "POST /v1/workflows/{workflow_id}/cancel": (
        "A role that may fire the type's cancel event.",
        [
            Call(
                "operator",
                "POST",
                "/v1/workflows/task-1/cancel",
                {"reason": "the ticket was closed by the customer"},
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/inputs": (
        WRITER,
        [
            Call(
                "agent",
                "POST",
                "/v1/workflows/refund-1/inputs",
                {"name": "receipt", "payload": {"url": "https://example.com/r/1.pdf"}},
            )
        ],
    ),
    "POST /v1/approvals": (
        "`approver` (or a role the approval event names).",
        [
            Call(
                "operator",
                "POST",
                "/v1/approvals",
                {"workflow_id": "refund-1", "decision": "approve", "comment": "a loyal customer"},
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/steps/{step}/resolve": (
        OPERATORS,
        [
            Call(
                "operator",
                "POST",
                "/v1/workflows/order-1001/steps/reserve/resolve",
                {"verdict": "not_applied", "reason": "the warehouse has no reservation"},
                "A step that is done is refused (409 `step_done`); for a step whose outcome is "
                "unknown, `applied` takes the `result` the external system holds.",
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/resume": (
        OPERATORS,
        [
            Call(
                "operator",
                "POST",
                "/v1/workflows/order-1004/resume",
                {"reason": "the amount is in the context now"},
                "Its handler runs again (here it parks again: nothing fixed the cause).",
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/timers": (
        OPERATORS + " And a role that may fire the timer's event (it fires on the caller's "
        "behalf).",
        [
            Call(
                "admin",
                "POST",
                "/v1/workflows/order-1001/timers",
                {"event": "deliver", "after": 86400, "key": "deliver-check"},
            )
        ],
    ),
    "GET /v1/workflows/{workflow_id}/timers": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows/order-1001/timers")],
    ),
    "DELETE /v1/workflows/{workflow_id}/timers/{key}": (
        OPERATORS,
        [Call("operator", "DELETE", "/v1/workflows/order-1001/timers/deliver-check")],
    ),
    "POST /v1/workflows/{workflow_id}/fork": (
        OPERATORS,
        [
            Call(
                "operator",
                "POST",
                "/v1/workflows/order-1001/fork",
                {"reason": "try the shipping again", "version": 5, "id": "order-1001-retry"},
            )
        ],
    ),
    "POST /v1/workflows/{workflow_id}/move": (
        "`admin`.",
        [
            Call(
                "admin",
                "POST",
                "/v1/workflows/order-1001-retry/move",
                {"state": "cancelled", "reason": "a duplicate of order-1001"},
            )
        ],
    ),
    "GET /v1/stuck": (ANY, [Call("viewer", "GET", "/v1/stuck")]),
    "GET /v1/transitions": (ANY, [Call("viewer", "GET", "/v1/transitions?after=0&limit=2")]),
    "GET /v1/workflows/{workflow_id}/children": (
        ANY,
        [Call("viewer", "GET", "/v1/workflows/order-1001/children")],
    ),
    "GET /v1/workflows/{workflow_id}/conversation": (
        ANY + " Redacted like step results for callers without `operator` or `admin`.",
        [Call("viewer", "GET", "/v1/workflows/order-1001/conversation")],
    ),
    "POST /v1/schedules": (
        OPERATORS,
        [
            Call(
                "operator",
                "POST",
                "/v1/schedules",
                {
                    "id": "nightly-triage",
                    "type": "agent_task",
                    "cron": "0 1 * * *",
                    "timezone": "Europe/Paris",
                    "input": {"goal": "triage the night's tickets"},
                },
            )
        ],
    ),
    "GET /v1/schedules": (ANY, [Call("viewer", "GET", "/v1/schedules")]),
    "GET /v1/schedules/{schedule_id}": (
        ANY,
        [Call("viewer", "GET", "/v1/schedules/nightly-triage")],
    ),
    "POST /v1/schedules/{schedule_id}/pause": (
        OPERATORS,
        [Call("operator", "POST", "/v1/schedules/nightly-triage/pause")],
    ),
    "POST /v1/schedules/{schedule_id}/resume": (
        OPERATORS,
        [Call("operator", "POST", "/v1/schedules/nightly-triage/resume")],
    ),
    "DELETE /v1/schedules/{schedule_id}": (
        OPERATORS,
        [Call("operator", "DELETE", "/v1/schedules/nightly-triage")],
    ),
    "POST /v1/subscriptions": (
        OPERATORS + " With a token that sees every tenant.",
        [
            Call(
                "admin",
                "POST",
                "/v1/subscriptions",
                {
                    "name": "orders-webhook",
                    "url": "https://example.com/hooks/orders",
                    "filter": {"types": ["order_fulfilment"], "terminal": True},
                },
            )
        ],
    ),
    "GET /v1/subscriptions": (
        OPERATORS + " With a token that sees every tenant.",
        [Call("admin", "GET", "/v1/subscriptions")],
    ),
    "GET /v1/subscriptions/{name}": (
        OPERATORS + " With a token that sees every tenant.",
        [Call("admin", "GET", "/v1/subscriptions/orders-webhook")],
    ),
    "POST /v1/subscriptions/{name}/pause": (
        OPERATORS + " With a token that sees every tenant.",
        [Call("admin", "POST", "/v1/subscriptions/orders-webhook/pause")],
    ),
    "POST /v1/subscriptions/{name}/resume": (
        OPERATORS + " With a token that sees every tenant.",
        [Call("admin", "POST", "/v1/subscriptions/orders-webhook/resume")],
    ),
    "DELETE /v1/subscriptions/{name}": (
        OPERATORS + " With a token that sees every tenant.",
        [Call("admin", "DELETE", "/v1/subscriptions/orders-webhook")],
    ),
    "POST /v1/bulk": (
        OPERATORS + " (`move`: `admin`). In the caller's tenant only.",
        [
            Call(
                "operator",
                "POST",
                "/v1/bulk",
                {
                    "action": "cancel",
                    "filter": {"type": "order_fulfilment", "state": "payment_authorized"},
                    "reason": "the gateway declined a batch",
                    "dry_run": True,
                },
            )
        ],
    ),
    "GET /livez": (NONE, [Call(None, "GET", "/livez")]),
    "GET /ready": (NONE, [Call(None, "GET", "/ready")]),
    "GET /health": (NONE, [Call(None, "GET", "/health")]),
    "GET /health/workflows": (NONE, [Call(None, "GET", "/health/workflows")]),
    "GET /metrics": (
        "None by default; `ops` or `admin` when the service runs with `--metrics-auth`.",
        [Call(None, "GET", "/metrics")],
    ),
    "GET /v1/alerts": (ANY, [Call("viewer", "GET", "/v1/alerts")]),
    "GET /v1/stream": (
        ANY + " The token may also come as `?access_token=` (a browser's `EventSource` "
        "cannot send a header).",
        [Call("viewer", "GET", "/v1/stream?after=0&limit=1")],
    ),
}

GROUPS = [
    ("The caller", ("/v1/me",)),
    ("Types", ("/v1/types",)),
    ("Workflows", ("/v1/workflows", "/v1/approvals")),
    ("Reads across workflows", ("/v1/stuck", "/v1/transitions", "/v1/stream", "/v1/alerts")),
    ("Schedules", ("/v1/schedules",)),
    ("Subscriptions", ("/v1/subscriptions",)),
    ("Bulk actions", ("/v1/bulk",)),
    ("Health and metrics", ("/livez", "/ready", "/health", "/metrics")),
]

HEADER = """# HTTP API

`statewright serve` serves this API (and the dashboard at `/ui`, MCP at `/mcp`). Every
route under `/v1` takes the caller's API token as `Authorization: Bearer <token>`: its
roles decide what it may do, its actor is recorded on every transition, and its tenant
scopes what it sees (a token of tenant `*` sees every tenant). Without a tokens file the
service is in open mode (every caller is a local admin and approver) and listens on
localhost only. The OpenAPI document of the running service is at `/openapi.json`, with
interactive pages at `/docs` and `/redoc`.

Every error is JSON, `{"error": {"code": ..., "message": ...}}` (with more fields for some
codes, e.g. the state and the allowed events of an `illegal_transition`), with a status
derived from its stable code (see [Error codes](#error-codes)). A refused request changes
nothing. Every `POST` that writes takes an `Idempotency-Key` header: a retry with the same
key applies nothing twice and answers 200 with `Idempotent-Replayed: true`.

The examples below run, in this order, in the test suite against a real service (the example
apps `order_fulfilment` and `refund_approval` and the built-in `agent_task`, a worker
running until nothing is due after each request), with these tokens:

| Token | Actor | Roles | Tenant |
| --- | --- | --- | --- |
{tokens}

<!-- The examples' convention (tests/docs/test_http_reference.py runs them): a request is a
```http block (METHOD /path?query, header lines, a blank line and a JSON body), followed by
its response: a ```json block whose title is the status (```json title="201"), or a
```text block (title="200") for a body that is not JSON. The test compares each response's
status and shape (the keys of every object) with the page's; values are not compared, and a
list of more than {shown} items is shown cut to its first {shown_less}. Write
new examples with `python -m tests.docs.gen_http`, which runs them and writes the answers. -->
"""

OTHER = """## Other endpoints

| Path | What |
| --- | --- |
| `/ui` | The dashboard (static files; it calls the API above with the token you give it). |
| `/mcp` | The MCP server over streamable HTTP (see [MCP](mcp.md)). |
| `/openapi.json` | The OpenAPI document of this API. |
| `/docs`, `/redoc` | Interactive API pages built from it. |
| `/` | Redirects to the dashboard. |
"""


def _cell(text: str) -> str:
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(kinds)
    if "$ref" in schema:
        return "object"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    return str(kind)


def _params(op: dict[str, Any]) -> list[str]:
    params = op.get("parameters", [])
    if not params:
        return []
    rows = ["| Parameter | In | Type | Meaning |", "| --- | --- | --- | --- |"]
    for p in params:
        schema = p.get("schema", {})
        text = p.get("description", "") or schema.get("description", "")
        if "default" in schema:
            text += f" Default `{json.dumps(schema['default'])}`."
        rows.append(f"| `{p['name']}` | {p['in']} | {_type(schema)} | {_cell(text)} |")
    return [*rows, ""]


def _fields(schema: dict[str, Any], comps: dict[str, Any], title: str) -> list[str]:
    if "$ref" in schema:
        schema = comps[schema["$ref"].rsplit("/", 1)[-1]]
    if "oneOf" in schema and not schema.get("properties"):  # (variants of the whole body)
        out: list[str] = []
        for variant in schema["oneOf"]:
            name = (
                variant["$ref"].rsplit("/", 1)[-1]
                if "$ref" in variant
                else variant.get("title", "")
            )
            out += _fields(variant, comps, f"Body fields ({name})")
        return out
    props = schema.get("properties", {})
    if not props:
        return []
    required = set(schema.get("required", ()))
    rows = [f"{title}:", "", "| Field | Type | Required | Meaning |", "| --- | --- | --- | --- |"]
    for name, prop in props.items():
        text = prop.get("description", "")
        if "default" in prop and prop["default"] not in (None, {}, [], False):
            text += f" Default `{json.dumps(prop['default'])}`."
        req = "yes" if name in required else ""
        rows.append(f"| `{name}` | {_type(prop)} | {req} | {_cell(text)} |")
        rows += _nested(name, prop, comps)
    return [*rows, ""]


def _object(schema: dict[str, Any], comps: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema a field holds (through a ``$ref`` or a nullable ``anyOf``)."""
    for option in [schema, *schema.get("anyOf", ())]:
        if "$ref" in option:
            option = comps[option["$ref"].rsplit("/", 1)[-1]]
        if option.get("properties"):
            found: dict[str, Any] = option
            return found
    return None


def _nested(name: str, prop: dict[str, Any], comps: dict[str, Any]) -> list[str]:
    """Rows for the fields of an object-valued field (``filter.type``...)."""
    inner = _object(prop, comps)
    if inner is None:
        return []
    required = set(inner.get("required", ()))
    return [
        f"| `{name}.{sub}` | {_type(sp)} | {'yes' if sub in required else ''} | "
        f"{_cell(sp.get('description', ''))} |"
        for sub, sp in inner["properties"].items()
    ]


def _errors(op: dict[str, Any]) -> list[str]:
    rows = [
        f"- `{status}`: {_cell(r.get('description', ''))}"
        for status, r in sorted(op.get("responses", {}).items())
        if not status.startswith("2")
    ]
    return ["Errors:", "", *rows, ""] if rows else []


def _request(call: Call) -> tuple[Example, str]:
    headers: dict[str, str] = {}
    if call.who is not None:
        headers["Authorization"] = f"Bearer {call.who}-token"
    headers.update(call.headers)
    if call.body is not None:
        headers["Content-Type"] = "application/json"
    lines = [f"{call.method} {call.target}", *(f"{k}: {v}" for k, v in headers.items())]
    text = "\n".join(lines)
    if call.body is not None:
        text += "\n\n" + json.dumps(call.body, indent=2)
    example = Example(call.method, call.target, headers, call.body, 0, "", None)
    return example, text


def _response(response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        body = json.dumps(cut(response.json()), indent=2)
        return f'```json title="{response.status_code}"\n{body}\n```'
    lines = response.text.splitlines()
    if len(lines) > 20:
        lines = [*lines[:20], "..."]
    return f'```text title="{response.status_code}"\n' + "\n".join(lines) + "\n```"


async def render(tmp: Path) -> str:
    from statewright.http.errors import STATUS as status_of  # (the page's error table)

    rows = "\n".join(
        f"| `{token}` | {actor} | {', '.join(roles)} | `{tenant}` |"
        for token, (actor, roles, tenant) in _tokens().items()
    )
    header = HEADER.replace("{tokens}", rows).replace("{shown}", str(SHOWN + 1))
    out = [header.replace("{shown_less}", str(SHOWN))]
    async with service(tmp) as (client, engine):
        spec = client._transport.app.openapi()  # type: ignore[attr-defined]
        comps = spec["components"]["schemas"]
        done: set[str] = set()
        for group, prefixes in GROUPS:
            out += [f"## {group}", ""]
            for key, (roles, calls) in SECTIONS.items():
                method, path = key.split(" ", 1)
                if not path.startswith(prefixes) or key in done:
                    continue
                done.add(key)
                op = spec["paths"][path][method.lower()]
                out += [f"### `{key}`", "", f"**{_cell(op.get('summary', ''))}**", ""]
                if op.get("description"):
                    out += [html.escape(op["description"].strip(), quote=False), ""]
                out += [f"Roles: {roles}", ""]
                out += _params(op)
                body = op.get("requestBody", {}).get("content", {}).get("application/json")
                if body:
                    out += _fields(body["schema"], comps, "Body fields")
                for call in calls:
                    example, text = _request(call)
                    response = await send(client, engine, example)
                    if call.note:
                        out += [call.note, ""]
                    out += ["```http", text, "```", "", _response(response), ""]
                out += _errors(op)
        missing = set(SECTIONS) - done
        assert not missing, missing
    out.append(OTHER)
    codes = ["## Error codes", "", "| Code | Status |", "| --- | --- |"]
    codes += [f"| `{code}` | {status} |" for code, status in sorted(status_of.items())]
    out += codes
    return "\n".join(out).rstrip() + "\n"


def _tokens() -> dict[str, tuple[str, list[str], str]]:
    from tests.docs.http_examples import TOKENS

    return TOKENS


if __name__ == "__main__":
    text = asyncio.run(render(Path(tempfile.mkdtemp())))
    (REFERENCE / "http.md").write_text(text, encoding="utf-8")

"""Writes docs/reference/mcp.md from what a real MCP client lists (``mcp_catalogue.py``).

Run ``python -m tests.docs.gen_mcp`` after changing a tool or resource;
``test_mcp_reference.py`` fails while the page misses one.
"""

from __future__ import annotations

import asyncio
import html
import json
import tempfile
from pathlib import Path
from typing import Any

from statewright.mcp_server.catalogue import SEP
from tests.docs.mcp_catalogue import CALLERS, Catalogue, catalogue
from tests.docs.pages import REFERENCE


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _type(name: str, schema: dict[str, Any]) -> str:
    if "enum" in schema:
        if name == "type":
            return "one of the registered types"
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(name, schema.get('items', {}))}"
    return str(kind)


def arguments(schema: dict[str, Any], generic: bool = False) -> list[str]:
    required = set(schema.get("required", ()))
    rows = ["| Argument | Type | Required | Meaning |", "| --- | --- | --- | --- |"]
    for name, prop in schema.get("properties", {}).items():
        text = prop.get("description", "")
        if "default" in prop:
            text += f" Default `{json.dumps(prop['default'])}`."
        if generic and name == "workflow_id":
            text = "The workflow (of the tool's type) to act on."
        if generic and name == "payload":
            text = (
                "The event's payload: the tool's schema is the event's `payload_schema` "
                "(an event without one takes `{}` or nothing)."
            )
        req = "yes" if name in required else ""
        if generic and name == "payload":
            req = "when the event's schema requires fields"
        rows.append(f"| `{name}` | {_type(name, prop)} | {req} | {_cell(text)} |")
        inner = set(prop.get("required", ()))
        for sub, sp in prop.get("properties", {}).items():  # an object's own fields
            if generic and name == "payload":
                break  # (the event's own schema: the example's, not every event's)
            sub_text = sp.get("description", "")
            mark = "yes" if sub in inner else ""
            rows.append(f"| `{name}.{sub}` | {_type(sub, sp)} | {mark} | {_cell(sub_text)} |")
    return rows


WHO = {
    frozenset(CALLERS): "every caller",
    frozenset({"agent", "boss", "ops"}): "callers that may write (not the read-only `viewer`)",
    frozenset({"boss", "ops"}): "callers with the `operator` or `admin` role",
}
"""Which callers (of mcp_catalogue.CALLERS) list a tool -> who the page says gets it."""

HEADER = """# MCP

`statewright mcp` serves the [Model Context Protocol](https://modelcontextprotocol.io) over
stdio (a client such as Claude Desktop spawns it), and `statewright serve` serves it over
streamable HTTP at `/mcp` (the caller's API token as `Authorization: Bearer`). Both go
through the same access layer as the HTTP API: tenant scoping, roles, and the actor recorded
on every transition.

```text
statewright --db sw.db --app app.py mcp --tokens tokens.yaml  # STATEWRIGHT_TOKEN: the caller
statewright --db sw.db --app app.py mcp --role approver       # no tokens: an agent, + roles
```

Without `--tokens`, the caller (the model) has the `agent` role only, in the default tenant:
it gets no approval tool; `--role` adds roles (printed as a warning at start-up). See
[`statewright mcp`](cli.md#statewright-mcp) for every option.

A refused call (illegal in the current state, a stale `expected_version`, a role that may
not fire the event, a payload that breaks the event's schema, an unknown workflow) is a tool
result with `isError` and a JSON body `{"error": {"code", "message", "workflow_id", "state",
"version", "allowed_actions", "hint", ...}}`: nothing changed. The exception is
`outcome_unknown` (the store connection broke after the write left): call again with the
same `idempotency_key`, which every writing tool takes; a retry of a call already applied
does nothing and says `"replayed": true`.

The tool list depends on the caller's roles, and is fixed for a caller (it does not change
with a workflow's state): a few fixed tools, and one tool per event its roles may fire.
Whether an event is legal now is checked on every call: `get_workflow_state` lists the tools
legal now as `allowed_actions`.

When a loaded type declares [search attributes](../guides/search.md), `list_workflows` and
`bulk_action`'s `filter` also take `search`, an object of attribute name to value (a string,
integer or boolean; all must match, at most 8), whose schema lists the declared names; the
server below loads none, so the tables do not show it.

This page is generated from what a real MCP client lists (`python -m tests.docs.gen_mcp`);
`tests/docs/test_mcp_reference.py` fails when a tool, an argument or a resource is missing.

## Fixed tools
"""

EVENTS = """## Event tools

One tool per event of each registered type that the caller's roles may fire (the event's
`roles` in the [definition](definition-format.md#events); an event without roles: any role
that may write), named `<type>__<event>`, e.g. `order_fulfilment__ship`. Its description is
the event's, with the states it fires from and to. A read-only caller (the `viewer` role)
gets none.

An approval event (`approval: true` in the definition: `approval_granted`,
`approval_denied`) is offered to approvers only and takes a `comment` instead of a
`payload`; the caller is recorded as the approver.
"""

RESOURCES = """## Resources

Each registered type has two resources, listed by `resources/list`:

| URI | Content |
| --- | --- |
| `statewright://machines/{type}/definition` | The machine's definition, as JSON (the \
[definition format](definition-format.md)). |
| `statewright://machines/{type}/diagram` | The machine as a Mermaid state diagram \
(`text/vnd.mermaid`). |

And resource templates (`resources/templates/list`), read for one workflow:
"""


def render(c: Catalogue) -> str:
    out = [HEADER]
    fixed = sorted(n for n in c.tools if SEP not in n)
    for name in fixed:
        who = WHO.get(frozenset(c.seen_by[name]), "")
        assert who, f"{name}: listed for {sorted(c.seen_by[name])}: say who in gen_mcp.WHO"
        text = c.descriptions[name].strip()
        if "Types:" in text:  # (the registered types, one a line: the app's, not the tool's)
            text = (
                text[: text.index("Types:")]
                + "Types: the registered ones, with their descriptions."
            )
        out += [f"### `{name}`", "", html.escape(text, quote=False), ""]
        out += [f"Listed for {who}.", ""]
        out += arguments(c.tools[name])
        out.append("")
    out.append(EVENTS)
    events = [n for n in c.tools if SEP in n]
    plain = next(
        n
        for n in events
        if "payload" in c.tools[n]["properties"] and "if_allowed" in c.tools[n]["properties"]
    )
    approval = next(n for n in events if "comment" in c.tools[n]["properties"])
    out += ["Arguments of an event tool:", "", *arguments(c.tools[plain], generic=True), ""]
    out += ["Arguments of an approval event's tool:", ""]
    out += [*arguments(c.tools[approval], generic=True), ""]
    out.append(RESOURCES)
    templates = ["| URI template | Content |", "| --- | --- |"]
    for t, text in sorted(c.templates.items()):
        templates.append(f"| `{t}` | {_cell(text)} |")
    out += templates
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    found = asyncio.run(catalogue(Path(tempfile.mkdtemp())))
    (REFERENCE / "mcp.md").write_text(render(found), encoding="utf-8")

"""The examples of docs/reference/http.md: the service they run against, how the page writes
them, and how a response is compared with the page's.

The page's convention (also said in its source): a request is a ```` ```http ```` block
(``METHOD /path?query``, then header lines, then a blank line and a JSON body, if any),
followed by its response: a ```` ```json title="201" ```` block (the status as the title)
or, for a body that is not JSON, a ```` ```text title="200" ```` block. The examples run in
page order against one service (the example apps order_fulfilment and refund_approval, and
the built-in agent_task, on a fresh SQLite store, with the tokens of :data:`TOKENS`) and a
worker runs until nothing is due after each one, as ``statewright serve --worker`` would.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from statewright import Engine, ManualClock, SQLiteStore, Worker
from statewright.access import TokenRegistry
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TOKENS = {
    # token: (actor, roles, tenant)
    "viewer-token": ("auditor", ["viewer"], "default"),
    "agent-token": ("agent-7", ["agent"], "default"),
    "system-token": ("billing-service", ["system"], "default"),
    "operator-token": ("alice", ["operator", "approver"], "default"),
    "admin-token": ("root", ["admin", "approver"], "*"),
}
START = 1_800_000_000.0
SHOWN = 2
"""A list of more than SHOWN + 1 items is shown cut to its first SHOWN on the page."""


@dataclass
class Example:
    """One request of the page, and the response the page shows for it."""

    method: str
    target: str
    headers: dict[str, str]
    body: Any
    status: int
    kind: str
    """``json`` or ``text``."""
    response: Any


@asynccontextmanager
async def service(tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Engine]]:
    """The app the examples run against, on a fresh store, and its engine."""
    sys.path.insert(0, str(EXAMPLES))
    from order_fulfilment import order_type
    from refund_approval import refund_type

    registry = TokenRegistry()
    for token, (actor, roles, tenant) in TOKENS.items():
        registry.add(token, actor, roles, tenant)
    clock = ManualClock(START)
    engine = Engine(
        SQLiteStore(tmp / "docs-http.db"),
        [agent_task_type(), order_type(), refund_type()],
        clock=clock,
    )
    async with engine:
        app = create_app(engine, registry, manage_engine=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8000") as c:
            yield c, engine


async def send(client: httpx.AsyncClient, engine: Engine, ex: Example) -> httpx.Response:
    """Send one example's request, then run a worker until nothing is due."""
    content = None if ex.body is None else json.dumps(ex.body).encode()
    response = await client.request(ex.method, ex.target, headers=ex.headers, content=content)
    await Worker(engine).run_until_idle()
    return response


_BLOCK = re.compile(
    r"^```http[ \t]*\n(?P<request>.*?)^```\s*\n+"
    r"```(?P<kind>json|text)\s+title=\"(?P<status>\d{3})\"[^\n]*\n(?P<response>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def parse(page: str) -> list[Example]:
    """Every request of the page with its response, in page order."""
    found = []
    for m in _BLOCK.finditer(page):
        head, _, body = m.group("request").partition("\n\n")
        first, *lines = head.strip().splitlines()
        method, target = first.split(" ", 1)
        headers = dict(line.split(": ", 1) for line in lines)
        kind = m.group("kind")
        text = m.group("response")
        found.append(
            Example(
                method,
                target.strip(),
                headers,
                json.loads(body) if body.strip() else None,
                int(m.group("status")),
                kind,
                json.loads(text) if kind == "json" else text,
            )
        )
    return found


def cut(value: Any) -> Any:
    """A response as the page shows it: long lists cut to their first :data:`SHOWN` items."""
    if isinstance(value, dict):
        return {k: cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [cut(v) for v in (value[:SHOWN] if len(value) > SHOWN + 1 else value)]
    return value


def shape_problems(expected: Any, actual: Any, where: str = "$") -> list[str]:
    """Where ``actual`` differs from ``expected`` in shape: the keys of every object and
    whether a value is an object, a list or a scalar (scalar values vary: ids, times; and a
    null is as good as anything). Lists are compared element by element, as far as the page
    shows them."""
    if expected is None or actual is None:
        return []
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: an object on the page, {type(actual).__name__} in the answer"]
        problems = []
        if set(expected) != set(actual):
            problems.append(
                f"{where}: keys only on the page {sorted(set(expected) - set(actual))}, "
                f"only in the answer {sorted(set(actual) - set(expected))}"
            )
        for key in set(expected) & set(actual):
            problems += shape_problems(expected[key], actual[key], f"{where}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: a list on the page, {type(actual).__name__} in the answer"]
        # The page may cut a long list to its first items (SHOWN); an empty one stays empty.
        if len(expected) > len(actual) or (not expected and actual):
            return [f"{where}: {len(expected)} items on the page, {len(actual)} in the answer"]
        problems = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            problems += shape_problems(e, a, f"{where}[{i}]")
        return problems
    if isinstance(actual, dict | list):
        return [f"{where}: a scalar on the page, {type(actual).__name__} in the answer"]
    return []

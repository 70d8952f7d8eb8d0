"""docs/reference/http.md: every route of the app is on the page, with an example, and every
example, run in page order against the real app, answers with the page's status and shape
(the convention: ``tests/docs/http_examples.py``; regenerate with
``python -m tests.docs.gen_http``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute

from tests.docs.http_examples import parse, send, service, shape_problems
from tests.docs.pages import code_spans, page

PAGE = page("http.md")


def _sections() -> dict[str, str]:
    parts = re.split(r"^### `([^`]+)`\s*$", PAGE, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


async def test_every_route_of_the_app_is_on_the_page_with_an_example(tmp_path: Path) -> None:
    sections = _sections()
    spans = code_spans(PAGE)
    missing: list[str] = []
    async with service(tmp_path) as (client, _):
        routes = client._transport.app.routes  # type: ignore[attr-defined]
    documented = 0
    for route in routes:
        path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        if isinstance(route, APIRoute) and route.include_in_schema:
            for method in sorted(route.methods or ()):
                key = f"{method} {path}"
                if key not in sections:
                    missing.append(key)
                elif "```http" not in sections[key]:
                    missing.append(f"{key} (no example)")
                documented += 1
        elif path not in spans and not any(path in s.split(", ") for s in spans):
            missing.append(path)  # the dashboard, MCP, the OpenAPI pages: named on the page
    assert documented > 40
    assert missing == [], f"not in docs/reference/http.md: {missing}"
    known = {f"{m} {r.path}" for r in routes if isinstance(r, APIRoute) for m in r.methods or ()}
    known = {re.sub(r"\{(\w+):\w+\}", r"{\1}", k) for k in known}
    assert set(sections) - known == set()


def _fields(schema: dict[str, Any], components: dict[str, Any]) -> set[str]:
    """The fields of a request body's schema (every variant of a ``oneOf``), and those of an
    object-valued field as ``field.sub``."""
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    found = set()
    for name, prop in schema.get("properties", {}).items():
        found.add(name)
        for option in [prop, *prop.get("anyOf", ())]:  # an object's own fields: name.field
            if "$ref" in option:
                option = components[option["$ref"].rsplit("/", 1)[-1]]
            found |= {f"{name}.{sub}" for sub in option.get("properties", {})}
    for variant in schema.get("oneOf", ()):
        found |= _fields(variant, components)
    return found


async def test_every_parameter_and_body_field_is_on_the_page(tmp_path: Path) -> None:
    sections = _sections()
    async with service(tmp_path) as (client, _):
        spec = client._transport.app.openapi()  # type: ignore[attr-defined]
    missing: list[str] = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            key = f"{method.upper()} {path}"
            spans = code_spans(sections.get(key, ""))
            names = {p["name"] for p in op.get("parameters", ())}
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                names |= _fields(body["schema"], spec["components"]["schemas"])
            missing += [f"{key}: {n}" for n in sorted(names - spans)]
    assert missing == [], f"not in docs/reference/http.md: {missing}"


async def test_each_example_answers_as_the_page_shows(tmp_path: Path) -> None:
    examples = parse(PAGE)
    assert len(examples) >= len(_sections())
    problems: list[str] = []
    async with service(tmp_path) as (client, engine):
        for ex in examples:
            response = await send(client, engine, ex)
            where = f"{ex.method} {ex.target}"
            if response.status_code != ex.status:
                problems.append(f"{where}: {response.status_code}, the page says {ex.status}")
                continue
            is_json = response.headers.get("content-type", "").startswith("application/json")
            if is_json != (ex.kind == "json"):
                problems.append(f"{where}: {response.headers.get('content-type')} ({ex.kind})")
            elif is_json:
                problems += [f"{where}: {p}" for p in shape_problems(ex.response, response.json())]
    assert problems == []

"""docs/reference/definition-format.md: its examples are valid definition files, and it
names every key the loader accepts (a new key without docs fails here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statewright.cli.loading import TYPE_OPTIONS
from statewright.cli.main import app
from statewright.definition.formats import load_path, machine_schema
from tests.docs.pages import blocks, code_spans, page

PAGE = page("definition-format.md")


def _keys(schema: dict[str, Any], defs: dict[str, Any], seen: set[str]) -> set[str]:
    """Every property name of a schema, through its ``$ref``s, items and alternatives (not
    into free-form objects such as a ``payload_schema``, which have no ``properties``)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            return set()
        seen.add(name)
        return _keys(defs[name], defs, seen)
    found: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        found.add(key)
        found |= _keys(sub, defs, seen)
    for part in ("items", "additionalProperties"):
        if isinstance(schema.get(part), dict):
            found |= _keys(schema[part], defs, seen)
    for part in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(part) or ():
            found |= _keys(sub, defs, seen)
    return found


def accepted_keys() -> set[str]:
    schema = machine_schema()
    return _keys(schema, schema["$defs"], set()) | set(TYPE_OPTIONS)


def test_every_key_the_loader_accepts_is_on_the_page() -> None:
    keys = accepted_keys()
    assert {"name", "states", "after", "every", "spawn", "guard", "roles", "budgets"} <= keys
    missing = sorted(keys - code_spans(PAGE))
    assert missing == [], f"keys not documented in definition-format.md: {missing}"


EXAMPLES = blocks(PAGE, "yaml", "json")


def test_the_page_has_a_full_yaml_and_a_json_example() -> None:
    languages = [lang for lang, _ in EXAMPLES]
    assert "yaml" in languages and "json" in languages
    full = next(body for lang, body in EXAMPLES if lang == "yaml")
    # the full example uses every key, so the reader sees each in place
    missing = sorted(k for k in accepted_keys() if f"{k}:" not in full)
    assert missing == []


@pytest.mark.parametrize(
    ("index", "language"), [(i, lang) for i, (lang, _) in enumerate(EXAMPLES)]
)
def test_statewright_check_accepts_each_example(index: int, language: str, tmp_path: Path) -> None:
    path = tmp_path / f"example{index}.{language}"
    path.write_text(EXAMPLES[index][1], encoding="utf-8")
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    # the machine alone, the type's options beside it accepted and left out (as the page says)
    assert load_path(path).states

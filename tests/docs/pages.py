"""Reading the reference pages (``docs/reference/``) for their tests: fenced blocks, and
which names a page mentions in code spans."""

from __future__ import annotations

import html
import re
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"

_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`([^`\n]+)`")
_HTML_CODE = re.compile(r"<code>([^<\n]+)</code>")


def page(name: str) -> str:
    """The markdown source of ``docs/reference/<name>``."""
    return (REFERENCE / name).read_text(encoding="utf-8")


def blocks(text: str, *languages: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block, in page order, of the given languages
    (all when none is given)."""
    return [
        (m.group(1), m.group(2))
        for m in _FENCE.finditer(text)
        if not languages or m.group(1) in languages
    ]


def code_spans(text: str) -> set[str]:
    """The text of every inline code span outside fenced blocks: `` `x` `` and
    ``<code>x</code>`` (which a table cell uses for a text holding ``|``) -> ``x``."""
    prose = _FENCE.sub("", text)
    return set(_CODE.findall(prose)) | {html.unescape(s) for s in _HTML_CODE.findall(prose)}

"""Named SQL queries loaded from package data (``sql/<dialect>/queries.sql``).

Each query starts with ``-- name: <name>`` and a one-line ``-- purpose`` comment, so SQL stays
plain, greppable text per dialect.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_LITERAL = re.compile(r"('(?:[^']|'')*')")
_SPACE = re.compile(r"\s+")
_COMMENT = re.compile(r"('(?:[^']|'')*')|--[^\n]*")
"""A string literal (kept) or a comment to the end of its line (dropped)."""
_AROUND = re.compile(r" ?([,()=<>]) ?")


def compact(sql: str) -> str:
    """``sql`` with its comments dropped and its whitespace collapsed outside string literals:
    runs become one space, and none is kept next to ``, ( ) = < >``. The same statement,
    shorter: psycopg caches a query's placeholder conversion only up to 4096 bytes (see
    test_queries). A comment at the end of a line goes first: on one line, it would hide
    everything after it."""
    parts = _LITERAL.split(_COMMENT.sub(lambda m: m.group(1) or "", sql))
    for i in range(0, len(parts), 2):  # the even parts are outside literals
        parts[i] = _AROUND.sub(r"\1", _SPACE.sub(" ", parts[i]))
    return "".join(parts).strip()


@cache
def load_queries(dialect: str) -> dict[str, str]:
    """All named queries of a dialect."""
    text = resources.files("statewright.store").joinpath(f"sql/{dialect}/queries.sql").read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        # Comment lines and indentation go, and the whitespace is collapsed: the text sent is
        # shorter (psycopg caches the conversion of a query's placeholders only up to 4096
        # bytes; see test_queries).
        lines = [ln.strip() for ln in body.strip().splitlines()]
        queries[name] = compact("\n".join(ln for ln in lines if ln and not ln.startswith("--")))
    return queries


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """``(number, name, sql)`` for every migration of a dialect, in order."""
    folder = resources.files("statewright.store").joinpath(f"sql/{dialect}/migrations")
    out = []
    for entry in folder.iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text()))
    return sorted(out)


def schema(dialect: str) -> str:
    """The whole schema as the migrations leave it (``sql/<dialect>/schema.sql``)."""
    return resources.files("statewright.store").joinpath(f"sql/{dialect}/schema.sql").read_text()

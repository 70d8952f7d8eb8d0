"""Opaque page cursors for the surfaces (HTTP, MCP).

A cursor is the listing's sort key of the last item of a page, as base64url of a JSON array:
opaque to clients (they pass it back as they got it), checked strictly when it comes back
(a malformed one is :class:`~statewright.errors.InvalidCursor`, an InvalidInput, never a
store error), and
harmless when forged: it only says where a page starts, every filter (the caller's tenant
included) still applies.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from statewright import ids
from statewright.errors import InvalidCursor
from statewright.types import StuckKey, WorkflowRow

MAX_CURSOR = 2000
"""Characters a cursor may have (the keys it holds are a few hundred at most)."""
_TEXT_MAX = 500


def encode(*key: str | float) -> str:
    """The cursor for a page that ends at ``key``."""
    text = json.dumps(list(key), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str, shape: str) -> tuple[Any, ...]:
    """The key a cursor holds; ``shape`` gives its parts: ``s`` a string, ``f`` a number."""
    problem = InvalidCursor(
        "invalid cursor: pass next_cursor exactly as a previous page returned it",
        field="cursor",
    )
    if not isinstance(cursor, str) or not 0 < len(cursor) <= MAX_CURSOR:
        raise problem
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise problem from None
    if not isinstance(key, list) or len(key) != len(shape):
        raise problem
    out: list[Any] = []
    for kind, value in zip(shape, key, strict=True):
        if kind == "s":
            if not isinstance(value, str) or len(value) > _TEXT_MAX or "\x00" in value:
                raise problem
            try:
                value.encode("utf-8")  # no lone surrogates
            except UnicodeEncodeError:
                raise problem from None
            out.append(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise problem
            try:
                number = float(value)
            except OverflowError:
                raise problem from None
            if not math.isfinite(number):
                raise problem
            out.append(number)
    return tuple(out)


def workflow_cursor(row: WorkflowRow) -> str:
    """Where a listing continues after ``row``: its ``(state_entered_at, id)``."""
    return encode(row.state_entered_at, row.id)


def workflow_after(cursor: str) -> tuple[float, str]:
    at, wid = decode(cursor, "fs")
    return float(at), str(wid)


def stuck_cursor(key: StuckKey) -> str:
    return encode(*key)


def stuck_after(cursor: str) -> StuckKey:
    type_, state, at, wid = decode(cursor, "ssfs")
    return str(type_), str(state), float(at), str(wid)


def step_cursor(started_at: float, key: str) -> str:
    return encode(started_at, key)


def step_after(cursor: str) -> tuple[float, str]:
    at, key = decode(cursor, "fs")
    return float(at), str(key)


def timer_cursor(due_at: float, timer_id: int) -> str:
    """Where a listing of a workflow's timers continues: after ``(due_at, id)``."""
    return encode(due_at, timer_id)


def timer_after(cursor: str) -> tuple[float, int]:
    at, timer_id = decode(cursor, "ff")
    if not float(timer_id).is_integer() or not 0 <= timer_id <= 2**53:
        raise InvalidCursor(
            "invalid cursor: pass next_cursor exactly as a previous page returned it",
            field="cursor",
        )
    return float(at), int(timer_id)


def child_cursor(key: str) -> str:
    """Where a listing of a workflow's children continues: after the child of this key (a
    child's id is its parent's and its key, so key order is id order; the key, unlike the
    id, is the same for every caller whatever the tenant)."""
    return encode(key)


def child_after(cursor: str) -> str:
    (key,) = decode(cursor, "s")
    if not ids.valid_id(key) or "." in str(key):
        raise InvalidCursor(
            "invalid cursor: pass next_cursor exactly as a previous page returned it",
            field="cursor",
        )
    return str(key)


def schedule_cursor(schedule_id: str) -> str:
    """Where a listing of schedules continues: after this (store) id."""
    return encode(schedule_id)


def schedule_after(cursor: str) -> str:
    (schedule_id,) = decode(cursor, "s")
    return str(schedule_id)

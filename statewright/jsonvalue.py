"""JSON values as statewright takes, stores and serves them.

Two promises live here:

- **An input policy** (:class:`Limits`): every JSON value a caller hands in (a start input,
  an event payload, a context patch, an inbox payload, a step result, a progress report) is
  checked for nesting depth and encoded size *before anything is stored*, on every surface,
  and refused with a typed error naming the limit (:class:`ValueTooDeep`,
  :class:`ValueTooLarge`).
- **Reads never fail on stored data**: :func:`dumps` and :func:`loads` do not depend on
  Python's recursion limit. The C encoder and decoder of :mod:`json` recurse once per nesting
  level and raise ``RecursionError`` near 1,000 levels; pydantic's serialiser stops at 255.
  A store written before the policy existed (or by an engine configured with looser limits)
  may hold deeper values, and a log is append-only: they must stay readable by every read
  route. So the fast C paths are tried first and, only when they give up on depth, an
  iterative encoder/decoder written here takes over (no maintained library offers one: orjson
  and pydantic-core stop at 255 levels; the stdlib pieces used below, ``scanstring``,
  ``encode_basestring`` and the number grammar, are those the C paths use).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from statewright.errors import InvalidInput, ValueTooDeep, ValueTooLarge

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class Limits:
    """What the engine accepts as one JSON value (see the module docstring).

    Args:
        max_depth: containers nested in one another, at most (``{}`` is 1, ``{"a": []}`` 2);
            None for no limit (reads stay safe either way).
        max_bytes: bytes of the value's compact UTF-8 JSON encoding, at most; None for none.
    """

    max_depth: int | None = DEFAULT_MAX_DEPTH
    max_bytes: int | None = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InvalidInput(f"Limits.{name} must be a positive integer or None")

    def check(self, value: Any, what: str) -> str:
        """The value's compact JSON text, once it is within the limits and is JSON at all;
        :class:`ValueTooDeep`, :class:`ValueTooLarge` or :class:`InvalidInput` otherwise.

        ``what`` names the value in the error (``"input"``, ``"payload of 'approve'"``).
        """
        if type(value) is dict and not value and (self.max_bytes is None or self.max_bytes > 1):
            return "{}"  # an event's usual payload: nothing to walk (and 1 level deep)
        if self.max_depth is not None:
            found = depth(value, self.max_depth + 1)
            if found > self.max_depth:
                raise ValueTooDeep(
                    f"the {what} nests deeper than {self.max_depth} levels (max_depth)",
                    limit="max_depth",
                    max=self.max_depth,
                    value=what,
                )
        try:
            text = dumps(value, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"the {what} is not JSON-serialisable: {exc}") from None
        if self.max_bytes is not None and len(text) * 4 > self.max_bytes:
            # Characters are at most 4 UTF-8 bytes: only long texts need encoding to count.
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_bytes:
                raise ValueTooLarge(
                    f"the {what} is {size} bytes of JSON, more than {self.max_bytes} (max_bytes)",
                    limit="max_bytes",
                    max=self.max_bytes,
                    size=size,
                    value=what,
                )
        return text


NO_LIMITS = Limits(max_depth=None, max_bytes=None)


def depth(value: Any, stop: int | None = None) -> int:
    """How many containers nest in ``value`` (0 for a scalar), without recursion; counting
    stops once ``stop`` is reached."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if stop is not None and deepest >= stop:
                return deepest
        stack.extend((child, level) for child in children)
    return deepest


# -- serialising ----------------------------------------------------------------------------


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    allow_nan: bool = True,
) -> str:
    """Compact JSON text (as ``json.dumps(..., separators=(",", ":"))``) at any depth."""
    try:
        return _encoder(sort_keys, ensure_ascii, allow_nan).encode(value)
    except RecursionError:
        return _dumps_deep(value, sort_keys, ensure_ascii, allow_nan)


@functools.cache
def _encoder(sort_keys: bool, ensure_ascii: bool, allow_nan: bool) -> json.JSONEncoder:
    """The encoder ``json.dumps`` would build for these options, built once: ``json.dumps``
    makes a new one on every call with options other than its defaults (three times per
    state in a worker). An encoder keeps no state between calls."""
    return json.JSONEncoder(
        separators=(",", ":"),
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
        allow_nan=allow_nan,
    )


class _Text(str):
    """Already-encoded punctuation on the encoder's stack (never a value)."""

    __slots__ = ()


def _float(value: float, allow_nan: bool) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        if not allow_nan:
            raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    return float.__repr__(value)


def _key(key: Any, allow_nan: bool) -> str:
    # What json.dumps does with non-string keys.
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return _float(key, allow_nan)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _dumps_deep(value: Any, sort_keys: bool, ensure_ascii: bool, allow_nan: bool) -> str:
    encode: Callable[[str], str] = encode_basestring_ascii if ensure_ascii else encode_basestring
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, str):
            out.append(encode(item))
        elif item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, int):
            out.append(int.__repr__(item))
        elif isinstance(item, float):
            out.append(_float(item, allow_nan))
        elif isinstance(item, dict):
            if not item:
                out.append("{}")
                continue
            pairs = [(_key(k, allow_nan), v) for k, v in item.items()]
            if sort_keys:
                pairs.sort(key=lambda kv: kv[0])
            parts: list[Any] = []
            for i, (k, v) in enumerate(pairs):
                parts.append(_Text(("{" if i == 0 else ",") + encode(k) + ":"))
                parts.append(v)
            parts.append(_Text("}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list | tuple):
            if not item:
                out.append("[]")
                continue
            parts = []
            for i, v in enumerate(item):
                parts.append(_Text("[" if i == 0 else ","))
                parts.append(v)
            parts.append(_Text("]"))
            stack.extend(reversed(parts))
        else:
            raise TypeError(f"Object of type {type(item).__name__} is not JSON serializable")
    return "".join(out)


# -- parsing --------------------------------------------------------------------------------


def loads(text: str | bytes) -> Any:
    """``json.loads`` at any depth."""
    try:
        return json.loads(text)
    except RecursionError:
        return _loads_deep(text.decode("utf-8") if isinstance(text, bytes) else text)


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?")
_CONSTANTS: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}


def _ws(s: str, i: int) -> int:
    match = _WS.match(s, i)
    return match.end() if match else i


def _scalar(s: str, i: int) -> tuple[Any, int]:
    if s.startswith('"', i):
        text, end = scanstring(s, i + 1)
        return text, end
    number = _NUMBER.match(s, i)
    if number:
        whole, frac, exp = number.groups()
        if frac or exp:
            return float(whole + (frac or "") + (exp or "")), number.end()
        return int(whole), number.end()
    for word, constant in _CONSTANTS.items():
        if s.startswith(word, i):
            return constant, i + len(word)
    raise json.JSONDecodeError("Expecting value", s, i)


def _key_at(s: str, i: int) -> tuple[str, int]:
    """A member's key and the index of its value."""
    if not s.startswith('"', i):
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, i)
    key, i = scanstring(s, i + 1)
    i = _ws(s, i)
    if not s.startswith(":", i):
        raise json.JSONDecodeError("Expecting ':' delimiter", s, i)
    return key, _ws(s, i + 1)


def _loads_deep(s: str) -> Any:
    """An iterative JSON parser: the open containers are an explicit stack."""
    containers: list[Any] = []
    keys: list[str | None] = []
    i = _ws(s, 0)
    while True:
        # A value starts at i: open a container, or read a scalar (or an empty container).
        if s.startswith("{", i):
            i = _ws(s, i + 1)
            if s.startswith("}", i):
                value: Any = {}
                i += 1
            else:
                key, i = _key_at(s, i)
                containers.append({})
                keys.append(key)
                continue
        elif s.startswith("[", i):
            i = _ws(s, i + 1)
            if s.startswith("]", i):
                value = []
                i += 1
            else:
                containers.append([])
                keys.append(None)
                continue
        else:
            value, i = _scalar(s, i)
        # Put the finished value into its container; close containers as they end.
        while True:
            if not containers:
                i = _ws(s, i)
                if i != len(s):
                    raise json.JSONDecodeError("Extra data", s, i)
                return value
            top = containers[-1]
            if isinstance(top, list):
                top.append(value)
            else:
                top[keys[-1]] = value
            i = _ws(s, i)
            if s.startswith(",", i):
                i = _ws(s, i + 1)
                if isinstance(top, dict):
                    keys[-1], i = _key_at(s, i)
                break
            closer = "]" if isinstance(top, list) else "}"
            if not s.startswith(closer, i):
                raise json.JSONDecodeError(f"Expecting ',' delimiter or {closer!r}", s, i)
            i += 1
            value = containers.pop()
            keys.pop()

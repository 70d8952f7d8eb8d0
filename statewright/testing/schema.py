"""Hypothesis strategies for JSON values that satisfy an event's ``payload_schema``.

``hypothesis-jsonschema`` would be the natural choice, but its latest release (0.23.1) fails
on current hypothesis (it calls an internal API since removed), so this is a small generator
of its own for the JSON Schema subset payload schemas use: ``type`` (one or a list),
``properties``/``required``/``additionalProperties``, ``enum``, ``const``, string
``minLength``/``maxLength``/``pattern``, number ``minimum``/``maximum`` (and the exclusive
ones)/``multipleOf``, array ``items``/``minItems``/``maxItems``/``uniqueItems`` (not
enforced while drawing), ``anyOf``/``oneOf``/``allOf`` (the first branch's shape, checked)
and local ``$ref``. Every value drawn is checked against the whole schema with the
``jsonschema`` validator and discarded if it does not fit, so an approximation costs only
discarded draws, never an invalid payload. Optional properties are drawn sometimes, extra
properties never.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["from_schema", "json_values"]

_MAX_ITEMS = 3
_MAX_TEXT = 12
_ANY = ("null", "boolean", "integer", "number", "string", "array", "object")


def json_values(max_leaves: int = 5) -> st.SearchStrategy[Any]:
    """Any small JSON value."""
    scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=_MAX_TEXT)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=_MAX_ITEMS)
            | st.dictionaries(st.text(max_size=8), inner, max_size=_MAX_ITEMS)
        ),
        max_leaves=max_leaves,
    )


def from_schema(schema: Mapping[str, Any] | bool | None) -> st.SearchStrategy[Any]:
    """Values that satisfy ``schema`` (None or True: any value; False: none)."""
    if schema is None or schema is True:
        return json_values()
    if schema is False:
        return st.nothing()
    from jsonschema import Draft202012Validator

    from statewright.definition.data import plain

    root = plain(schema)
    validator = Draft202012Validator(root)
    return _Gen(root).strategy(root).filter(validator.is_valid)


class _Gen:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.depth = 0

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        node: Any = self.root
        for part in ref[1:].split("/"):
            if part:
                node = node[part.replace("~1", "/").replace("~0", "~")]
        merged = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        return merged

    def strategy(self, schema: Any) -> st.SearchStrategy[Any]:
        if schema is True or schema is None:
            return json_values()
        if schema is False:
            return st.nothing()
        if not isinstance(schema, Mapping):
            return json_values()
        self.depth += 1
        try:
            if self.depth > 8:  # a recursive $ref: stop expanding
                return st.none()
            return self._strategy(self.resolve(schema))
        finally:
            self.depth -= 1

    def _strategy(self, schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(list(schema["enum"]))
        for combinator in ("anyOf", "oneOf"):
            branches = schema.get(combinator)
            if isinstance(branches, list) and branches:
                base = {k: v for k, v in schema.items() if k != combinator}
                return st.one_of([self.strategy({**base, **b}) for b in branches])
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, Mapping):
                    merged = _merge(merged, self.resolve(part))
            return self._strategy(merged)
        types = schema.get("type")
        if isinstance(types, str):
            types = [types]
        if not types:
            types = [t for t in _ANY if _hints(schema, t)] or list(_ANY)
        return st.one_of([self._typed(t, schema) for t in types])

    def _typed(self, kind: str, schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind in ("integer", "number"):
            return _numbers(kind, schema)
        if kind == "string":
            return _strings(schema)
        if kind == "array":
            items = schema.get("items", True)
            low = int(schema.get("minItems", 0))
            high = int(schema.get("maxItems", max(low, _MAX_ITEMS)))
            return st.lists(self.strategy(items), min_size=low, max_size=max(low, high))
        if kind == "object":
            return self._object(schema)
        return st.nothing()

    def _object(self, schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        props: Mapping[str, Any] = schema.get("properties", {})
        required = [p for p in schema.get("required", []) if isinstance(p, str)]
        must = {p: self.strategy(props.get(p, True)) for p in required}
        may = {p: self.strategy(s) for p, s in props.items() if p not in must}
        return st.fixed_dictionaries(must, optional=may)


def _hints(schema: Mapping[str, Any], kind: str) -> bool:
    """Whether an untyped schema's keywords suggest ``kind``."""
    keys = set(schema)
    return {
        "object": bool(keys & {"properties", "required", "additionalProperties"}),
        "array": bool(keys & {"items", "minItems", "maxItems"}),
        "string": bool(keys & {"minLength", "maxLength", "pattern", "format"}),
        "number": bool(keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    }.get(kind, False)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


def _numbers(kind: str, schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    low = schema.get("minimum")
    high = schema.get("maximum")
    xlow = schema.get("exclusiveMinimum")
    xhigh = schema.get("exclusiveMaximum")
    step = schema.get("multipleOf")
    if kind == "integer":
        lo = None if low is None else math.ceil(low)
        hi = None if high is None else math.floor(high)
        if xlow is not None:
            lo = max(lo, math.floor(xlow) + 1) if lo is not None else math.floor(xlow) + 1
        if xhigh is not None:
            hi = min(hi, math.ceil(xhigh) - 1) if hi is not None else math.ceil(xhigh) - 1
        if isinstance(step, int) and step > 0:
            first = None if lo is None else -(-lo // step)
            last = None if hi is None else hi // step
            return st.integers(first, last).map(lambda n: n * step)
        return st.integers(lo, hi)
    floats = st.floats(
        min_value=low if xlow is None else xlow,
        max_value=high if xhigh is None else xhigh,
        exclude_min=xlow is not None,
        exclude_max=xhigh is not None,
        allow_nan=False,
        allow_infinity=False,
    )
    return _numbers("integer", schema) | floats


def _strings(schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
    low = int(schema.get("minLength", 0))
    high = schema.get("maxLength")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        # JSON Schema patterns are searches, not full matches; the validator checks lengths.
        return st.from_regex(pattern)
    size = max(low, _MAX_TEXT) if high is None else int(high)
    return st.text(min_size=low, max_size=size)

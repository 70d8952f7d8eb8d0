"""The input policy (depth and size limits) and the depth-proof JSON codec."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewright.errors import InvalidInput, ValueTooDeep, ValueTooLarge
from statewright.jsonvalue import Limits, _dumps_deep, _loads_deep, depth, dumps, loads
from tests.torture import examples

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def nested(levels: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


@settings(max_examples=examples(300, 100))
@given(values, st.booleans(), st.booleans())
def test_the_iterative_encoder_writes_what_json_writes(
    value: Any, sort_keys: bool, ensure_ascii: bool
) -> None:
    """Random values (a new draw each run): 100 by default, 300 under ``--torture``
    (tests/torture.py); 100 still meet every scalar type, nested lists and objects, and both
    flags either way, many times over."""
    expected = json.dumps(
        value, separators=(",", ":"), sort_keys=sort_keys, ensure_ascii=ensure_ascii
    )
    assert _dumps_deep(value, sort_keys, ensure_ascii, True) == expected


@settings(max_examples=examples(300, 100))
@given(values, st.sampled_from([None, 0, 2]))
def test_the_iterative_parser_reads_what_json_reads(value: Any, indent: int | None) -> None:
    """As the encoder's test: 100 random values by default (each indent about 33 times), 300
    under ``--torture``."""
    text = json.dumps(value, indent=indent)
    assert _loads_deep(text) == json.loads(text)


def test_constants_and_numbers_parse_like_json() -> None:
    text = '[NaN, Infinity, -Infinity, -0, 0.5, 1e3, -2E-2, 12345678901234567890, "\\u00e9"]'
    got, want = _loads_deep(text), json.loads(text)
    assert math.isnan(got[0]) and got[1:] == want[1:]
    assert [type(v) for v in got] == [type(v) for v in want]


@pytest.mark.parametrize("bad", ["", "[1,]", "{1: 2}", '{"a" 1}', "[1 2]", "[1] x", "tru", "["])
def test_malformed_text_raises_json_decode_error(bad: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        _loads_deep(bad)


@pytest.mark.parametrize("levels", [256, 1_000, 10_000, 100_000])
def test_values_of_any_depth_round_trip(levels: int) -> None:
    value = nested(levels)
    text = dumps(value)
    assert text.count("[") + text.count("{") == levels
    # (== on such values would itself recurse: compare their encodings)
    assert dumps(loads(text)) == text
    assert dumps(loads(text.encode())) == text
    assert depth(value) == levels


def test_deep_encoder_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps(nested(5_000, object()))
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps(nested(5_000, float("nan")), allow_nan=False)


def test_limits_name_the_limit_that_was_passed() -> None:
    limits = Limits(max_depth=64, max_bytes=1000)
    assert limits.check(nested(64), "input") == dumps(nested(64), ensure_ascii=False)
    with pytest.raises(ValueTooDeep) as deep:
        limits.check(nested(65), "input")
    assert deep.value.details["limit"] == "max_depth" and deep.value.details["max"] == 64
    assert "input" in deep.value.message
    with pytest.raises(ValueTooDeep):
        limits.check(nested(10_000), "payload")
    with pytest.raises(ValueTooLarge) as large:
        limits.check({"text": "é" * 600}, "payload")  # 600 characters, 1,200 bytes
    assert large.value.details["limit"] == "max_bytes" and large.value.details["size"] > 1000
    assert isinstance(large.value, InvalidInput)
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        limits.check({"x": float("inf")}, "payload")


def test_an_empty_object_passes_any_limit_it_fits_and_only_those() -> None:
    """The empty payload's shortcut answers what the walk and the encoder would."""
    assert Limits(max_depth=1, max_bytes=2).check({}, "payload") == "{}"
    with pytest.raises(ValueTooLarge):
        Limits(max_bytes=1).check({}, "payload")


def test_limits_can_be_lifted_and_must_be_positive() -> None:
    Limits(max_depth=None, max_bytes=None).check(nested(2_000), "input")
    with pytest.raises(InvalidInput):
        Limits(max_depth=0)

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewright.definition.guards import MAX_EXPRESSION_LENGTH, compile_expression
from statewright.errors import DefinitionError
from tests.torture import examples

CTX = {"order": {"total": 120, "lines": [1, 2, 3], "tags": ["vip"]}, "name": "ada", "n": 0}
PAYLOAD = {"attempt": 2, "max_attempts": 3, "error": None, "items": ["a", "b"]}


def ev(expr: str, context: Mapping[str, Any] = CTX, payload: Mapping[str, Any] = PAYLOAD) -> bool:
    return compile_expression(expr)(context, payload)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("payload.attempt <= payload.max_attempts", True),
        ("payload.attempt > 2", False),
        ("context.order.total >= 100", True),
        ('context["order"]["total"] == 120', True),
        ("context.order.lines[0] == 1", True),
        ("context.order.lines[9] is None", True),
        ("payload.missing is None", True),
        ("payload.missing.deeper is None", True),
        ("payload.error is not None", False),
        ("'vip' in context.order.tags", True),
        ("'x' not in context.order.tags", True),
        ("'order' in context", True),
        ("'d' in context.name", True),
        ("1 < payload.attempt < 3", True),
        ("payload.attempt == 2 and not payload.error", True),
        ("payload.error or payload.attempt", True),
        ("not (payload.attempt == 2 or False)", False),
        ("payload.attempt + 1 == payload.max_attempts", True),
        ("payload.max_attempts - payload.attempt * 2 == -1", True),
        ("context.order.total / 4 == 30.0", True),
        ("context.order.total % 7 == 1", True),
        ("-payload.attempt == -2 and +1 == 1", True),
        ("context.name + '!' == 'ada!'", True),
        ("payload.items + ['c'] == ['a', 'b', 'c']", True),
        ("(1, 2) == (1, 2)", True),
        ("len(payload.items) == 2 and len(context) == 3", True),
        ("min(payload.items) == 'a' and max(1, 5, 3) == 5", True),
        ("abs(-3.5) == 3.5", True),
        ("payload.attempt == 2.0", True),
        ("True", True),
        ("None", False),
        ("context.name", True),
    ],
)
def test_allowed_forms(expr: str, expected: bool) -> None:
    assert ev(expr) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "payload.attempt <= 'three'",
        "len(payload.attempt)",
        "context.n / 0 == 1",
        "1 % context.n",
        "min([]) == 1",
        "max(payload.missing)",
        "payload.attempt.deeper",
        "context.name[0]",
        "'a' * 3 == 'aaa'",
        "-context.name",
        "payload.attempt + 'x'",
        "payload.missing + 1",
        "1 in payload.attempt",
        "[1] in context",
        "abs('x')",
        "payload.big / 1",
        "context.order.total * 1e308 / 0",
    ],
)
def test_evaluation_errors_are_type_errors(expr: str) -> None:
    with pytest.raises(TypeError):
        ev(expr, payload={**PAYLOAD, "big": 10**400})


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "payload.attempt <=",
        "x == 1",
        "__import__('os').system('echo pwned')",
        "open('/etc/passwd')",
        "payload.__class__",
        "payload['__class__']",
        "context.__dict__",
        "payload.get('a')",
        "print(1)",
        "len(x for x in payload)",
        "[x for x in payload.items]",
        "{x for x in payload.items}",
        "{'a': 1}",
        "{1, 2}",
        "lambda: 1",
        "payload.a if True else 1",
        "(y := 1)",
        "f'{payload}'",
        "payload.a ** 2",
        "payload.a // 2",
        "payload.a << 1",
        "~payload.a",
        "payload.a is 1",
        "payload.a is payload.b",
        "payload[payload.key]",
        "payload.items[0:1]",
        "payload.items[-1]",
        "payload[True]",
        "len(*payload.items)",
        "max(payload.items, key=len)",
        "len()",
        "abs(1, 2)",
        "b'bytes'",
        "1j",
        "...",
        "[*payload.items]",
        "await payload",
        "import os",
        "payload.a = 1",
        "payload.a; payload.b",
        "globals()",
        "context.__class__.__mro__",
        "[" * 60 + "]" * 60,
        "-" * 80 + "1",
        "1 + " * MAX_EXPRESSION_LENGTH + "1",
    ],
)
def test_forbidden_forms_rejected_at_compile_time(expr: str) -> None:
    with pytest.raises(DefinitionError) as info:
        compile_expression(expr)
    (problem,) = info.value.problems
    assert problem.code == "invalid_guard"
    assert repr(expr) in problem.message


def test_non_string_rejected() -> None:
    with pytest.raises(DefinitionError):
        compile_expression(42)  # type: ignore[arg-type]


class Booby:
    """A non-mapping value that records any attempt to reach into it."""

    touched = False

    def __getattr__(self, name: str) -> Any:
        Booby.touched = True
        raise AssertionError(name)

    def __getitem__(self, key: Any) -> Any:
        Booby.touched = True
        raise AssertionError(key)


def test_never_touches_attributes_of_user_data() -> None:
    for expr in ("payload.obj.attempt", 'payload.obj["attempt"]', "payload.obj.items[0]"):
        with pytest.raises(TypeError):
            ev(expr, payload={"obj": Booby()})
    assert not Booby.touched
    # attribute syntax on a mapping is a key lookup, never a method
    assert ev("payload.keys is None and payload.get is None", payload={}) is True


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "attempt", "n"]), children, max_size=4)
    ),
    max_leaves=12,
)
contexts = st.dictionaries(st.sampled_from(["a", "b", "attempt", "n", "order"]), json_values)

EXPRESSIONS = [
    "payload.attempt <= payload.max_attempts",
    "context.a.b == 1 or context.n > 3",
    "context.order.total * 2 - payload.n / context.n >= 10 % payload.a",
    "len(context.a) > 0 and min(payload.a) < max(context.b)",
    "abs(payload.n) + -context.n in context.a",
    "context['a'][0] not in payload.b",
    "payload.a + context.a == context.b + payload.b",
    "1 < context.n <= payload.n < 10",
    "context.a is None or not context.b",
    "max(context.a, payload.a, 3) == min(context.b, 1)",
    "[context.a, payload.n] == (1, 2)",
]


@settings(max_examples=examples(300, 100), deadline=None)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    context=contexts,
    payload=contexts,
)
def test_random_data_only_ever_raises_type_error(
    expr: str, context: dict[str, Any], payload: dict[str, Any]
) -> None:
    """Random contexts and payloads (a new draw each run): 100 by default, each of the 11
    expressions about 9 times, 300 under ``--torture`` (tests/torture.py)."""
    guard = compile_expression(expr)
    try:
        result = guard(context, payload)
    except TypeError:
        return
    assert isinstance(result, bool)


code_fragments = st.sampled_from(
    [
        "payload",
        "context",
        ".a",
        ".__class__",
        "[0]",
        "['a']",
        "(",
        ")",
        " + ",
        " * ",
        " ** ",
        " and ",
        " or ",
        "not ",
        " < ",
        " == ",
        " in ",
        " is ",
        "None",
        "1",
        "'s'",
        "[",
        "]",
        ",",
        "len",
        "min",
        "eval",
        "exec",
        "__import__",
        "lambda x: ",
        " for x in ",
        " if ",
        "__builtins__",
        "getattr",
        ":=",
        "os",
        ";",
        "\n",
        "__import__('sys').exit(3)",
    ]
)
FORBIDDEN = ("__", "eval", "exec", "lambda", "getattr", ":=", " for ", " if ", ";", "os")


@settings(max_examples=examples(500, 150), deadline=None)
@given(pieces=st.lists(code_fragments, min_size=1, max_size=12), payload=contexts)
def test_random_text_compiles_safely_or_is_rejected(
    pieces: list[str], payload: dict[str, Any]
) -> None:
    """Random texts of 1 to 12 fragments (a new draw each run): 150 by default, each of the 39
    fragments in some of them (most in 5 to 15), 500 under ``--torture`` (tests/torture.py)."""
    expr = "".join(pieces)
    try:
        guard = compile_expression(expr)
    except DefinitionError as exc:
        rejected = [p.code for p in exc.problems]
    else:
        rejected = []
    if rejected:
        assert rejected == ["invalid_guard"]
        return
    # "__" inside a longer key (payload.a__b) is a plain key lookup; a name *starting* with
    # "__" would be a dunder and must never compile.
    assert not re.search(r"(?<![A-Za-z0-9_])__", expr)
    # A forbidden word inside a longer key (payload.aeval, payload.os) is a key lookup too.
    words = [t for t in FORBIDDEN if t.isidentifier()]
    assert not [t for t in words if re.search(rf"(?<![A-Za-z0-9_.]){t}(?![A-Za-z0-9_])", expr)]
    assert not [t for t in FORBIDDEN if t != "__" and not t.isidentifier() and t in expr]
    try:
        guard(payload, payload)
    except TypeError:
        pass

"""Guard expressions: a small, safe language for predicates over ``context`` and ``payload``.

Why not ``eval``: a guard is part of a machine *definition*, and definitions are data. They
are saved as JSON/YAML, loaded from files, shipped over HTTP and shown to LLMs, so a guard
must be plain text that can be stored and read back, and loading a definition must never
run arbitrary code. ``eval`` (even with stripped builtins) can be escaped through dunder
attributes. So the text is parsed with :mod:`ast`, checked against a whitelist of node
types, and compiled once into a tree of closures; evaluating a guard only ever walks that
tree. Nothing calls ``getattr`` on user data: ``payload.attempt`` is a key lookup.

The language:

- names ``context`` and ``payload`` (the workflow context and the event payload);
- ``x.key`` and ``x["key"]`` / ``x[0]``: key lookup (index lookup on lists); a missing key,
  a missing index, or a lookup on ``None`` gives ``None``;
- constants (numbers, strings, ``True``, ``False``, ``None``), list and tuple literals;
- comparisons ``== != < <= > >= in not in``, and ``is None`` / ``is not None``;
- ``and``, ``or``, ``not``; ``+ - * / %`` and unary ``-`` / ``+``;
- calls to ``len``, ``min``, ``max``, ``abs``.

Evaluation errors are always :class:`TypeError` (``1 < "a"``, ``len(3)``, division by zero,
``min([])``), which :class:`~statewright.definition.machine.Machine` treats as "the guard did
not pass".
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statewright.errors import DefinitionError, Problem

if TYPE_CHECKING:
    from statewright.definition.model import GuardFn

__all__ = ["MAX_EXPRESSION_LENGTH", "compile_expression", "compile_value"]

MAX_EXPRESSION_LENGTH = 2000
"""Longer guard texts are rejected: guards are predicates, not programs."""
_MAX_DEPTH = 50  # bounds the closure tree so evaluation can never hit the recursion limit

_Node = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
_NUMBER = (int, float)


class _Reject(Exception):
    """Raised inside the compiler; turned into one DefinitionError naming the expression."""


def compile_expression(expr: str) -> GuardFn:
    """Compile a guard expression into a ``guard(context, payload) -> bool`` function.

    Raises:
        DefinitionError: the text is not valid Python syntax or uses anything outside the
            language above (other names, attribute calls, lambdas, comprehensions, dunders).
    """
    node = _compile_text(expr, "guard", "invalid_guard")

    def guard(context: Mapping[str, Any], payload: Mapping[str, Any]) -> bool:
        return bool(node(context, payload))

    return guard


def compile_value(expr: str) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Any]:
    """Compile an expression of the same language into ``value(context, payload) -> Any``:
    the right-hand side of an ``assign`` action (``"(context.failed_attempts or 0) + 1"``).

    Raises:
        DefinitionError: as :func:`compile_expression` (code ``invalid_action``).
    """
    return _compile_text(expr, "action expression", "invalid_action")


def _compile_text(expr: str, what: str, code: str) -> _Node:
    try:
        if not isinstance(expr, str) or not expr.strip():
            raise _Reject(f"a {what} must be a non-empty string")
        if len(expr) > MAX_EXPRESSION_LENGTH:
            raise _Reject(f"longer than {MAX_EXPRESSION_LENGTH} characters")
        try:
            tree = ast.parse(expr.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise _Reject(f"not a valid expression ({type(exc).__name__})") from None
        return _compile(tree.body, 0)
    except _Reject as exc:
        raise DefinitionError([Problem(code, f"{what} {expr!r} is not allowed: {exc}")]) from None


# -- compiler ---------------------------------------------------------------------------------


def _compile(node: ast.expr, depth: int) -> _Node:
    if depth > _MAX_DEPTH:
        raise _Reject(f"nested deeper than {_MAX_DEPTH} levels")
    d = depth + 1
    match node:
        case ast.Name(id="context"):
            return lambda c, p: c
        case ast.Name(id="payload"):
            return lambda c, p: p
        case ast.Name(id=name):
            raise _Reject(f"unknown name {name!r} (only 'context' and 'payload')")
        case ast.Constant(value=value):
            if value is None or isinstance(value, bool | int | float | str):
                return lambda c, p: value
            raise _Reject(f"constant {value!r} of type {type(value).__name__}")
        case ast.Attribute(value=inner, attr=attr):
            if attr.startswith("__"):
                raise _Reject(f"dunder access {attr!r}")
            return _lookup(_compile(inner, d), attr)
        case ast.Subscript(value=inner, slice=ast.Constant(value=key)) if isinstance(
            key, str | int
        ) and not isinstance(key, bool):
            if isinstance(key, str) and key.startswith("__"):
                raise _Reject(f"dunder access {key!r}")
            return _lookup(_compile(inner, d), key)
        case ast.Subscript():
            raise _Reject("subscripts must be a constant string or integer key")
        case ast.List(elts=elts) | ast.Tuple(elts=elts):
            return _sequence([_compile(e, d) for e in elts], isinstance(node, ast.Tuple))
        case ast.BoolOp(op=op, values=values):
            return _boolop(isinstance(op, ast.And), [_compile(v, d) for v in values])
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            inner_not = _compile(operand, d)
            return lambda c, p: not inner_not(c, p)
        case ast.UnaryOp(op=ast.USub() | ast.UAdd() as op, operand=operand):
            inner_u = _compile(operand, d)
            fn = operator.neg if isinstance(op, ast.USub) else operator.pos
            return lambda c, p: fn(_number(inner_u(c, p), "unary minus/plus"))
        case ast.BinOp(op=op, left=left, right=right) if type(op) in _BINOPS:
            return _binop(type(op), _compile(left, d), _compile(right, d))
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            return _compare(node, _compile(left, d), ops, [_compile(x, d) for x in comparators])
        case ast.Call(func=ast.Name(id=fname), args=args, keywords=[]) if fname in _CALLS:
            if any(isinstance(a, ast.Starred) for a in args):
                raise _Reject(f"*args in call to {fname}()")
            return _call(fname, [_compile(a, d) for a in args])
        case ast.Call():
            raise _Reject("only len(), min(), max() and abs() may be called, without keywords")
    raise _Reject(f"{type(node).__name__} expressions are not supported")


def _lookup(inner: _Node, key: str | int) -> _Node:
    def lookup(c: Mapping[str, Any], p: Mapping[str, Any]) -> Any:
        obj = inner(c, p)
        if obj is None:
            return None  # a.b.c with a.b missing is None, like a missing key
        if isinstance(obj, Mapping):
            return obj.get(key)
        if isinstance(key, int) and isinstance(obj, list | tuple):
            return obj[key] if -len(obj) <= key < len(obj) else None
        # Never getattr on user data: only mappings (and lists by index) can be looked into.
        raise TypeError(f"cannot look up {key!r} in a {type(obj).__name__}")

    return lookup


def _sequence(items: list[_Node], as_tuple: bool) -> _Node:
    if as_tuple:
        return lambda c, p: tuple(i(c, p) for i in items)
    return lambda c, p: [i(c, p) for i in items]


def _boolop(is_and: bool, values: list[_Node]) -> _Node:
    def boolop(c: Mapping[str, Any], p: Mapping[str, Any]) -> Any:
        result: Any = None
        for v in values:
            result = v(c, p)
            if bool(result) != is_and:  # short-circuit exactly like Python's and/or
                return result
        return result

    return boolop


def _number(value: Any, what: str) -> int | float:
    if isinstance(value, _NUMBER):
        return value
    raise TypeError(f"{what} needs numbers, got {type(value).__name__}")


def _add(a: Any, b: Any) -> Any:
    # + also joins strings, lists and tuples of the same type: the result is bounded by the
    # inputs. * / % are numeric only, so "x" * 10**12 cannot exhaust memory.
    if isinstance(a, _NUMBER) and isinstance(b, _NUMBER):
        return a + b
    if type(a) is type(b) and isinstance(a, str | list | tuple):
        return a + b
    raise TypeError(f"cannot add {type(a).__name__} and {type(b).__name__}")


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: _add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


def _binop(kind: type[ast.operator], left: _Node, right: _Node) -> _Node:
    fn = _BINOPS[kind]
    numeric = kind is not ast.Add

    def binop(c: Mapping[str, Any], p: Mapping[str, Any]) -> Any:
        a, b = left(c, p), right(c, p)
        if numeric:
            _number(a, kind.__name__)
            _number(b, kind.__name__)
        try:
            return fn(a, b)
        except ArithmeticError as exc:  # division by zero, float overflow
            raise TypeError(str(exc)) from exc

    return binop


_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: _contains(b, a),
    ast.NotIn: lambda a, b: not _contains(b, a),
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _contains(container: Any, item: Any) -> bool:
    if isinstance(container, str | list | tuple | Mapping):
        return item in container
    raise TypeError(f"'in' needs a string, list or mapping, got {type(container).__name__}")


def _compare(
    node: ast.Compare, left: _Node, ops: Sequence[ast.cmpop], rights: list[_Node]
) -> _Node:
    operands = [node.left, *node.comparators]
    for i, op in enumerate(ops):
        if isinstance(op, ast.Is | ast.IsNot):
            pair = (operands[i], operands[i + 1])
            if not any(isinstance(x, ast.Constant) and x.value is None for x in pair):
                raise _Reject("'is' / 'is not' may only compare with None")
    fns = [_COMPARE[type(op)] for op in ops]

    def compare(c: Mapping[str, Any], p: Mapping[str, Any]) -> bool:
        a = left(c, p)
        for fn, right in zip(fns, rights, strict=True):  # a < b < c chains like Python
            b = right(c, p)
            if not fn(a, b):
                return False
            a = b
        return True

    return compare


def _len(*args: Any) -> int:
    (value,) = args
    if isinstance(value, str | list | tuple | Mapping):
        return len(value)
    raise TypeError(f"len() of a {type(value).__name__}")


def _abs(*args: Any) -> int | float:
    (value,) = args
    return abs(_number(value, "abs()"))


def _extreme(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        values = args[0] if len(args) == 1 else args
        if not isinstance(values, str | list | tuple | Mapping):
            raise TypeError(f"{fn.__name__}() of a {type(values).__name__}")
        try:
            return fn(values)
        except ValueError as exc:  # empty sequence
            raise TypeError(str(exc)) from exc

    return call


_CALLS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    # name: (implementation, minimum arguments, maximum arguments)
    "len": (_len, 1, 1),
    "abs": (_abs, 1, 1),
    "min": (_extreme(min), 1, None),
    "max": (_extreme(max), 1, None),
}


def _call(name: str, args: list[_Node]) -> _Node:
    fn, low, high = _CALLS[name]
    if len(args) < low or (high is not None and len(args) > high):
        raise _Reject(f"wrong number of arguments to {name}()")
    return lambda c, p: fn(*(a(c, p) for a in args))

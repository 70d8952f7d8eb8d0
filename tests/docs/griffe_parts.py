"""A griffe extension for the Python reference: the engine's operations as methods.

``Engine.send = part(commands.send)`` (``statewright/engine/core.py``) and
``SyncEngine.send = blocking(Engine.send)`` (``statewright/sync.py``) are descriptors, so a
static reading sees attributes with neither a signature nor a docstring, and mkdocstrings
would leave the engine's operations out. This extension replaces each such attribute by the
function it forwards to, as a method: the same docstring and parameters, less the
``runtime`` a ``part`` passes itself, and not ``async`` on a ``SyncEngine`` (a ``Raises:``
section written as prose is kept as a paragraph: :func:`prose_raises`). Named in the
site's ``mkdocs.yml`` (and ``tests/docs/mkdocs_reference.yml``) under the python handler's
``extensions``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# descriptor name -> (drops the first parameter, is async on the new class)
_WRAPPERS = {"part": (True, None), "blocking": (False, False), "forwarded": (False, None)}


class EngineOperations(griffe.Extension):
    """Turn ``part``/``blocking``/``forwarded`` class attributes into documented methods."""

    def on_package(
        self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any
    ) -> None:
        if pkg.name != "statewright":
            return
        # The engine first: the sync wrapper forwards to the engine's (already replaced) ones.
        for path in ("statewright.engine.core.Engine", "statewright.sync.SyncEngine"):
            cls = loader.modules_collection.get_member(path)
            if isinstance(cls, griffe.Class):
                _replace(cls, loader)


def _replace(cls: griffe.Class, loader: griffe.GriffeLoader) -> None:
    for name, member in list(cls.members.items()):
        if member.is_alias or not isinstance(member, griffe.Attribute):
            continue
        value = member.value
        if not isinstance(value, griffe.ExprCall) or not value.arguments:
            continue
        wrapper = str(value.function)
        if wrapper not in _WRAPPERS:
            continue
        target = _target(cls, str(value.arguments[0]), loader)
        if target is None:
            continue
        drop_first, is_async = _WRAPPERS[wrapper]
        cls.set_member(name, _method(name, target, drop_first, is_async, member))


def _target(cls: griffe.Class, dotted: str, loader: griffe.GriffeLoader) -> griffe.Function | None:
    """``commands.send`` (a module imported in the class's module) or ``Engine.send``."""
    head, _, rest = dotted.partition(".")
    try:
        base = cls.module[head]
        found = base[rest] if rest else base
        while found.is_alias:
            found = found.final_target
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return found if isinstance(found, griffe.Function) else None


def _method(
    name: str,
    fn: griffe.Function,
    drop_first: bool,
    is_async: bool | None,
    where: griffe.Attribute,
) -> griffe.Function:
    params = list(fn.parameters)[1 if drop_first else 0 :]
    method = griffe.Function(
        name,
        lineno=where.lineno,
        endlineno=where.endlineno,
        parameters=griffe.Parameters(
            *(
                griffe.Parameter(
                    p.name,
                    annotation=p.annotation,
                    kind=p.kind,
                    default=p.default,
                    docstring=p.docstring,
                )
                for p in params
            )
        ),
        returns=fn.returns,
    )
    method.labels = set(fn.labels) | {"method"}
    if is_async is False:
        method.labels.discard("async")
    if fn.docstring is not None:
        method.docstring = griffe.Docstring(
            prose_raises(fn.docstring.value),
            lineno=fn.docstring.lineno,
            endlineno=fn.docstring.endlineno,
            parent=method,
            parser=fn.docstring.parser,
            parser_options=fn.docstring.parser_options,
        )
    return method


_RAISES = re.compile(r"^(?P<indent>[ \t]*)Raises:[ \t]*\n(?P<item>[ \t]+\S[^\n]*)", re.MULTILINE)
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*(?: \([^)]*\))?:(?:\s|$)")


def prose_raises(text: str) -> str:
    """A ``Raises:`` section written as prose (``WorkflowNotFound, IllegalTransition (...),
    ...``, as ``Engine.send`` and ``Engine.cancel`` have it) kept as a paragraph: the Google
    parser wants ``Name: description`` entries, and would drop these lines with a warning."""

    def fix(m: re.Match[str]) -> str:
        if _ENTRY.match(m.group("item").strip()):
            return m.group(0)
        return f"{m.group('indent')}Raises (any of):\n{m.group('item')}"

    return _RAISES.sub(fix, text)

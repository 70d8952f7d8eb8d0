"""JSON and YAML text, and files chosen by suffix.

Only :func:`load_path` and :func:`save_path` touch the file system; everything else is
text in, text out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statewright.definition.formats.document import from_dict, to_dict
from statewright.definition.machine import AssignFn, GuardFn, Machine
from statewright.errors import DefinitionError, InvalidInput, Problem

__all__ = [
    "dumps_json",
    "dumps_yaml",
    "load_path",
    "loads_json",
    "loads_yaml",
    "save_path",
]


def dumps_json(machine: Machine, *, indent: int = 2) -> str:
    """The machine as a JSON document (deterministic, ends with a newline)."""
    return json.dumps(to_dict(machine), indent=indent, ensure_ascii=False) + "\n"


def loads_json(
    text: str | bytes,
    guards: Mapping[str, GuardFn] | None = None,
    actions: Mapping[str, AssignFn] | None = None,
) -> Machine:
    """Parse and build a machine from JSON text; see :func:`from_dict`."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise DefinitionError([Problem("invalid_syntax", f"not valid JSON: {exc}")]) from exc
    return from_dict(data, guards, actions)


def dumps_yaml(machine: Machine) -> str:
    """The machine as a YAML document (block style, keys in document order)."""
    import yaml

    return yaml.safe_dump(to_dict(machine), sort_keys=False, allow_unicode=True)


def loads_yaml(
    text: str | bytes,
    guards: Mapping[str, GuardFn] | None = None,
    actions: Mapping[str, AssignFn] | None = None,
) -> Machine:
    """Parse (``yaml.safe_load``: no object tags) and build a machine from YAML text."""
    import yaml

    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DefinitionError([Problem("invalid_syntax", f"not valid YAML: {exc}")]) from exc
    return from_dict(data, guards, actions)


_LOADERS = {".json": loads_json, ".yaml": loads_yaml, ".yml": loads_yaml}


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in _LOADERS:
        raise InvalidInput(
            f"cannot tell the format of {str(path)!r}: use a .json, .yaml or .yml file"
        )
    return suffix


def load_path(
    path: str | os.PathLike[str],
    guards: Mapping[str, GuardFn] | None = None,
    actions: Mapping[str, AssignFn] | None = None,
) -> Machine:
    """Read a machine from a ``.json``, ``.yaml`` or ``.yml`` file.

    The file may hold its type's options beside the machine (``redact``, ``budgets``,
    ``input_schema``, ``search_attributes``: checked for shape by the document's schema, read
    by ``--app``), which the machine leaves out: give them to the
    :class:`~statewright.engine.WorkflowType` that binds it."""
    p = Path(path)
    loader = _LOADERS[_suffix(p)]
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read machine definition {str(p)!r}: {exc}") from exc
    return loader(text, guards, actions)


def save_path(machine: Machine, path: str | os.PathLike[str]) -> None:
    """Write a machine to a ``.json``, ``.yaml`` or ``.yml`` file (format by suffix)."""
    p = Path(path)
    text = dumps_json(machine) if _suffix(p) == ".json" else dumps_yaml(machine)
    p.write_text(text, encoding="utf-8")

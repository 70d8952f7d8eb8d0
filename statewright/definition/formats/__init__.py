"""Machine definitions as data: plain dicts, JSON, YAML and an XState subset."""

from __future__ import annotations

from statewright.definition.formats.document import (
    check_document,
    from_dict,
    machine_schema,
    to_dict,
)
from statewright.definition.formats.files import (
    dumps_json,
    dumps_yaml,
    load_path,
    loads_json,
    loads_yaml,
    save_path,
)
from statewright.definition.formats.xstate import from_xstate, to_xstate

__all__ = [
    "check_document",
    "dumps_json",
    "dumps_yaml",
    "from_dict",
    "from_xstate",
    "load_path",
    "loads_json",
    "loads_yaml",
    "machine_schema",
    "save_path",
    "to_dict",
    "to_xstate",
]

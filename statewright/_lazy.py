"""Names of a package imported from their modules on first use (PEP 562).

Used by packages whose import must stay cheap: ``statewright`` itself (a script that only
defines a machine does not load the engine), and ``statewright.mcp_server`` (importing any of
its submodules runs its ``__init__``, and ``serve`` must not load the MCP SDK until ``/mcp`` is
first called). The standard library has no helper for this; it is a dozen lines.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def attributes(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, where each of ``names`` is imported
    from the module it maps to when first looked up (then kept in the package)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups do not come back here
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__

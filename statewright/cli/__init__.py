"""The ``statewright`` command line: a thin adapter over the Python API.

Each command parses its input, calls the :class:`~statewright.engine.Engine`, and formats
the result (Rich tables, or JSON with ``--json``). See ``statewright --help``.
"""

from __future__ import annotations

from statewright.cli.main import app, main

__all__ = ["app", "main"]

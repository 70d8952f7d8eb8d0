"""``statewright`` command lines forked from a fork server (tests/forkserver.py) that has
imported the whole package once.

A ``statewright`` process costs 0.7 CPU-seconds before it does anything (``serve`` 2: FastAPI
builds its routes), most of it imports; a test that runs a dozen of them spends its time
there. Each child here runs ``statewright.cli.main`` with the request's arguments, exactly as
``python -m statewright.cli`` would (same command line, same logs, same exit codes, its own
environment and working folder when given), forked from a server that imported every module
of the package except the MCP server (whose lazy import ``tests/mcp/test_lazy_start.py``
checks in processes of its own) and the pytest plugin. The server has no thread, no event
loop and no open database (tests/forkserver.py checks both before every fork).

Use the ``cli_forks`` fixture (tests/conftest.py): one server per xdist worker, started at
its first use. What a forked child cannot do: read its stdin (it is /dev/null).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import statewright
from tests.forkserver import ForkServer

SKIP = ("statewright.mcp_server", "statewright.testing", "statewright.cli.__main__")
"""Not preloaded: the MCP SDK (imported by the first MCP request, which is tested), the
pytest plugin, and the module that runs the CLI when imported."""


def preload() -> None:
    """Import every module of the package but :data:`SKIP`, and the ASGI server."""
    for module in pkgutil.walk_packages(statewright.__path__, "statewright."):
        if not module.name.startswith(SKIP):
            importlib.import_module(module.name)
    importlib.import_module("uvicorn")


def cli(argv: list[str]) -> None:
    """``statewright ARGV`` in this process."""
    from statewright.cli.main import main

    sys.argv = ["statewright", *argv]
    main()


class CliForkServer(ForkServer):
    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        super().__init__(
            log,
            "tests.cli_forks:cli",
            prepare="tests.cli_forks:preload",
            name="statewright fork server",
            timeout=timeout,
        )

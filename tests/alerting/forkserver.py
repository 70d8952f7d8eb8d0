"""``statewright`` commands forked from a fork server (tests/forkserver.py) that has imported
the CLI, the stores and the alert delivery once.

Each child runs ``statewright.cli.main`` with the request's arguments, exactly as
``python -m statewright.cli`` would (same command line, same log, same exit codes). ``PRELOAD``
is what ``statewright alerts --deliver`` imports (a module it misses is imported by each child,
which costs time, not correctness).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.forkserver import ForkServer

PRELOAD = (
    "httpx",
    "pydantic",
    "secrets",
    "typer._adapters",
    "typer._click.decorators",
    "statewright.definition.fingerprint",
    "statewright.cli.main",
    "statewright.cli.alerts",
    "statewright.cli.timers",
    "statewright.observability.alerts",
    "statewright.observability.delivery",
    "statewright.store.sqlite",
    "statewright.store.postgres",
)


def cli(argv: list[str]) -> None:
    """``statewright ARGV`` in this process."""
    from statewright.cli.main import main

    sys.argv = ["statewright", *argv]
    main()


class CliForkServer(ForkServer):
    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        super().__init__(log, "tests.alerting.forkserver:cli", preload=PRELOAD, timeout=timeout)

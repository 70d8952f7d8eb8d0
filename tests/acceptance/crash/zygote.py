"""The crash tests' zygote: a fork server (tests/forkserver.py) for crash-test workers.

It imports the engine, both stores and the crash app once; each child it forks runs
:func:`tests.acceptance.crash.worker.child_main` (``asyncio.run`` of the worker, as
``python -m tests.acceptance.crash.worker`` does) with its own stdout and stderr files.
"""

from __future__ import annotations

from pathlib import Path

from tests.forkserver import ForkServer

PRELOAD = (
    "jsonschema",  # imported lazily when an engine opens
    "statewright.definition.graph",
    "statewright.definition.validate",
    "statewright.store.postgres",
    "statewright.store.postgres.listen",
    "statewright.store.sqlite",
)


def prepare() -> None:
    """Warm up the worker's argument parser (argparse imports parts of itself lazily)."""
    from tests.acceptance.crash import worker

    worker.parser().parse_args(["--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"])


class Zygote(ForkServer):
    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        super().__init__(
            log,
            "tests.acceptance.crash.worker:child_main",
            preload=PRELOAD,
            prepare="tests.acceptance.crash.zygote:prepare",
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            name="zygote",
            timeout=timeout,
        )

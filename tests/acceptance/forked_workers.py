"""``statewright worker`` processes of the exactly-once app, forked from the ``cli_forks``
fork server (tests/cli_forks.py) instead of started as ``python -m statewright.cli``: the same
command line, environment and working folder as
:func:`tests.acceptance.test_exactly_once.spawn_worker`, a real process of its own (SIGKILL,
SIGSTOP and SIGTERM reach it alone), for a twentieth of the CPU of a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

from tests.acceptance.test_exactly_once import APP, ROOT, _env
from tests.forkserver import Child, ForkServer


def fork_worker(forks: ForkServer, db: str, tmp: Path, name: str, *args: str, **env: str) -> Child:
    """A worker on ``db`` (its output, stdout and stderr, in ``tmp/<name>.err``)."""
    argv = ["--db", db, "--app", str(APP), "worker", "--concurrency", "4"]
    argv += ["--poll-interval", "0.05", *args]
    return forks.popen(argv, tmp / f"{name}.err", env=_env(tmp, **env), cwd=ROOT)


@contextlib.contextmanager
def forked() -> Iterator[list[Child]]:
    """Workers forked in the block; killed at the end whatever happens (continued first, in
    case the test froze one)."""
    procs: list[Child] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # (sent by the fork server: its own child)
                p.kill()
            p.wait(timeout=10)

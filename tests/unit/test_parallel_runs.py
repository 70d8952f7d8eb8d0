"""The parallel run's quiet worker (tests/conftest.py, "Parallel runs"): under pytest-xdist as
``scripts/test`` runs it, an ``alone`` test runs on ``gw0`` at the priority the run started
with, and an ordinary one at the lowest, in the run's background cgroup when there is one.
Without xdist (``-n 0``) there is no quiet worker, and nothing to check."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKGROUND, LOWEST_PRIORITY, QUIET, QUIET_WORKER


def _workerinput(request: pytest.FixtureRequest) -> dict[str, Any] | None:
    workerinput: dict[str, Any] | None = getattr(request.config, "workerinput", None)
    return workerinput if workerinput is not None and QUIET in workerinput else None


def _cpu_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return ""


@pytest.mark.alone
def test_an_alone_test_runs_on_the_quiet_worker_at_its_priority(
    request: pytest.FixtureRequest,
) -> None:
    workerinput = _workerinput(request)
    if workerinput is None:
        return  # not under xdist: every test runs alone
    assert workerinput["workerid"] == QUIET_WORKER
    assert os.getpriority(os.PRIO_PROCESS, 0) < LOWEST_PRIORITY
    assert "statewright-test-" not in _cpu_cgroup()


def test_an_ordinary_test_runs_at_the_lowest_priority(request: pytest.FixtureRequest) -> None:
    workerinput = _workerinput(request)
    if workerinput is None:
        return
    assert os.getpriority(os.PRIO_PROCESS, 0) == LOWEST_PRIORITY
    if workerinput[BACKGROUND]:  # the quiet worker too, once its alone tests are done
        assert _cpu_cgroup() == "/" + Path(workerinput[BACKGROUND]).name

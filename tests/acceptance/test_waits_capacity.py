"""The capacity check of waits that free the worker (issue 27, item 3), on both stores: N
workflows suspended in ``run.wait_input`` on ONE worker of concurrency 8, then an input posted
to each: they all complete, within a generous ratio of the time the same work takes with the
inputs posted before the worker starts; the handlers in flight never exceed 8 and the worker
process's memory stays flat. It runs ``bench/bench_waits.py`` (a real process of its own)
and checks its figures: N = 1,000 by default, 10,000 with ``--torture``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torture import torture_enabled

ROOT = Path(__file__).resolve().parents[2]
RATIO, SLACK = 1.5, 3.0
"""The waiting run may take up to RATIO x the ready run + SLACK seconds (a noisy VM)."""
RSS_GROWTH_MB = 50.0


@pytest.mark.acceptance
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_one_worker_of_concurrency_8_holds_every_waiting_workflow(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    n = 10_000 if torture_enabled(request.config) else 1_000
    out = tmp_path / "figures.json"
    args = [sys.executable, "bench/bench_waits.py", "--store", store, "--workflows", str(n)]
    args += ["--dir", str(tmp_path), "--json", str(out)]
    if store == "postgres":
        args += ["--dsn", request.getfixturevalue("pg_dsn")]  # no PostgreSQL: this fails
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    proc = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120 + n * 0.1
    )
    assert proc.returncode == 0, f"bench_waits failed:\n{proc.stdout}\n{proc.stderr}"
    print(proc.stdout)
    figures = json.loads(out.read_text())
    ready, waiting = figures["ready"], figures["waiting"]
    assert waiting["suspended"] == n  # every one of them waited, suspended
    assert waiting["most_in_flight"] <= 8 and ready["most_in_flight"] <= 8
    assert waiting["seconds"] <= RATIO * ready["seconds"] + SLACK, proc.stdout
    assert waiting["rss_growth_mb"] < RSS_GROWTH_MB, proc.stdout

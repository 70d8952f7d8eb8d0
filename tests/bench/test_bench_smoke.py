"""Every benchmark script runs, at toy sizes, from this checkout: a benchmark that no longer
runs (an API it calls changed) fails here, not on the day someone reproduces the README's
figures. The figures themselves are not checked: the sizes are too small to mean anything.

Each script runs as a real subprocess, as the README tells users to run it; PostgreSQL comes
from the suite's throwaway server (``--dsn``), and ``bench_http`` needs ``wrk`` (fails when it
is missing, like every real part the suite needs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240


def _run(tmp_path: Path, command: str, *more: str) -> str:
    """Run ``command`` (a script and its options, split on spaces) plus ``more`` arguments."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    out = tmp_path / "figures.json"
    args = [*command.split(), *more]
    proc = subprocess.run(
        [sys.executable, *args, "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, f"{args[0]} failed:\n{proc.stdout}\n{proc.stderr}"
    assert out.stat().st_size > 2, f"{args[0]} wrote no figures"
    return proc.stdout


def _dsn(request: pytest.FixtureRequest) -> str:
    make: Callable[..., str] = request.getfixturevalue("pg_database")
    return make()


def test_bench_sqlite(tmp_path: Path) -> None:
    # On a disk that the script chooses (it refuses tmpfs, where scripts/test puts the temp
    # folder: then <repo>/.statewright/bench, its own folder removed after), but
    # synchronous=OFF: the same code, no fsyncs.
    options = "--transitions 20 --repeat 1 --clients 1,4 --modes OFF"
    _run(tmp_path, f"bench/bench_sqlite.py {options}")


def test_bench_postgres(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    options = "--transitions 20 --clients 1,2 --pickups 2"
    _run(tmp_path, f"bench/bench_postgres.py {options}", "--dsn", _dsn(request))


def test_bench_workflows(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    options = "--stores sqlite,postgres --states 2 --workflows 8 --processes 1 --concurrency 4"
    more = ("--dsn", _dsn(request), "--dir", str(tmp_path), "--timeout", "120")
    _run(tmp_path, f"bench/bench_workflows.py {options}", *more)


def test_bench_scale(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # The deep-page reads need more than a page (20) of "orders" in s2: 400 workflows have 24.
    options = "--workflows 800 --small 400 --repeat 1 --check 1"
    more = ("--dsn", _dsn(request), "--dir", str(tmp_path))
    _run(tmp_path, f"bench/bench_scale.py {options}", *more)


def test_bench_health(tmp_path: Path) -> None:
    _run(tmp_path, "bench/bench_health.py --workflows 500 --repeat 1", "--dir", str(tmp_path))


def test_bench_http(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.fail("bench_http needs wrk (apt-get install wrk)", pytrace=False)
    # wrk runs at least 1 s per operation, whatever --duration says: paced (a request every
    # 50 ms) the server idles through it instead of answering flat out (2 CPU-s less).
    options = "--duration 0.5 --connections 1 --threads 1 --workflows 10 --warmup 0 --pace 50"
    _run(tmp_path, f"bench/bench_http.py {options}", "--dir", str(tmp_path))


def test_bench_cli(tmp_path: Path) -> None:
    # One workflow in the store (`show w1`, `list`): each more is one more `statewright start`.
    _run(tmp_path, "bench/bench_cli.py --runs 1 --warmup 0 --workflows 1")

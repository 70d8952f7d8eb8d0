"""How long the ``statewright`` command takes to start: wall time of whole processes.

Each command runs ``--runs`` times as a fresh process (stdout and stderr discarded); the
median and the minimum are printed next to the floor measured in the same run: the
interpreter alone (``python -c pass``) and the interpreter importing Typer, which every
command needs. A small SQLite store is made first (three workflows, ``--workflows``), for
``show`` and ``list``.

    .venv/bin/python bench/bench_cli.py                 # about 20 s on 2 cores
    .venv/bin/python bench/bench_cli.py --runs 50 --json cli.json

Bytecode is written (``PYTHONDONTWRITEBYTECODE`` is dropped from the children's environment)
and two warm-up runs of each command (``--warmup``) are not counted, so the figures are those
of an installed package, not of compiling the sources. It is a script, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PYTHON = sys.executable
SCRIPT = Path(PYTHON).with_name("statewright")
"""The console script next to this interpreter (``python -m statewright.cli`` without one)."""


def statewright(*args: str) -> list[str]:
    if SCRIPT.is_file():
        return [str(SCRIPT), *args]
    return [PYTHON, "-m", "statewright.cli", *args]


def wall(argv: list[str], env: dict[str, str], runs: int, warmup: int = 2) -> list[float]:
    """Seconds each of ``runs`` runs of ``argv`` took (after ``warmup`` uncounted runs)."""
    times: list[float] = []
    for i in range(warmup + runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr!r}")
        if i >= warmup:
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per command")
    parser.add_argument(
        "--warmup", type=int, default=2, help="uncounted runs of each command first (2)"
    )
    parser.add_argument(
        "--workflows", type=int, default=3, help="workflows in the store, started first (3)"
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for name in ("STATEWRIGHT_DB", "STATEWRIGHT_APP", "STATEWRIGHT_JSON", "COLUMNS"):
        env.pop(name, None)
    with tempfile.TemporaryDirectory(prefix="statewright-bench-cli-") as folder:
        db = str(Path(folder) / "cli.db")
        for n in range(1, max(1, args.workflows) + 1):
            subprocess.run(
                statewright("--db", db, "start", "agent_task", "--id", f"w{n}", "--input",
                            json.dumps({"goal": f"triage {n}"})),
                env=env, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        cases = [
            ("python -c pass", [PYTHON, "-c", "pass"]),
            ('python -c "import typer"', [PYTHON, "-c", "import typer"]),
            ("statewright --help", statewright("--help")),
            ("statewright show w1", statewright("--db", db, "show", "w1")),
            ("statewright list", statewright("--db", db, "list")),
        ]
        load = os.getloadavg()[0]
        results: list[dict[str, Any]] = []
        for label, argv in cases:
            times = wall(argv, env, args.runs, args.warmup)
            results.append(
                {
                    "command": label,
                    "median_ms": round(statistics.median(times) * 1000, 1),
                    "min_ms": round(min(times) * 1000, 1),
                    "runs": len(times),
                }
            )
    floor = results[1]["median_ms"]
    print(
        f"CLI start, wall time of a fresh process, median and min of {args.runs} runs "
        f"(Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f} "
        "before the first run)"
    )
    print(f"{'command':<28} {'median ms':>9} {'min ms':>7} {'- typer floor':>13}")
    for r in results:
        extra = r["median_ms"] - floor if r["command"].startswith("statewright") else None
        shown = f"{extra:+13.1f}" if extra is not None else ""
        print(f"{r['command']:<28} {r['median_ms']:>9.1f} {r['min_ms']:>7.1f} {shown:>13}")
    if args.json:
        Path(args.json).write_text(json.dumps({"load": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()

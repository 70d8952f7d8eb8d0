"""``statewright demo`` as users run it: a real process that SIGKILLs a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STATEWRIGHT = Path(sys.executable).with_name("statewright")
ENV = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}


def demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STATEWRIGHT), "demo", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_runs_end_to_end_and_every_check_passes(tmp_path: Path) -> None:
    db = tmp_path / ".statewright" / "demo.db"
    done = demo(cwd=tmp_path)  # the default database, in a folder that does not exist yet
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for text in (
        "killed with SIGKILL",
        "the gateway says it was charged, so its result was adopted (reconcile)",
        "✓ the worker process was killed in the middle of a payment step",
        "✓ every workflow reached a terminal state",
        "✓ each paid order was charged exactly once (3 charges), cancelled orders never",
        "✓ no payment request was sent twice",
        "✓ each approved refund was paid out exactly once (2 payouts)",
        "✓ replaying each workflow's log gives its stored row (11 checked)",
        f"database: {db}",
        f"history order-1001 --db {db.relative_to(tmp_path)}",
        "all checks passed",
    ):
        assert text in out, out
    assert "✗" not in out
    assert db.exists() and db.with_name("demo-services.db").exists()
    assert "worker " in db.with_name("demo-worker.log").read_text()

    # The database is left for inspection, and the CLI reads it.
    shown = subprocess.run(
        [str(STATEWRIGHT), "--json", "--db", str(db), "history", "order-1001"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [t["to_state"] for t in json.loads(shown.stdout)][-1] == "closed"


def test_demo_starts_fresh_each_run_and_reports_json(tmp_path: Path) -> None:
    db = tmp_path / "new" / "folder" / "d.db"  # folders are created
    assert demo("--db", str(db), cwd=tmp_path).returncode == 0
    done = demo("--db", str(db), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["db"] == str(db)
    assert len(report["checks"]) == 7 and all(c["ok"] for c in report["checks"])
    assert len(report["workflows"]) == 11
    assert report["seconds"] < 60


def test_demo_never_wipes_a_database_that_is_not_a_demo(tmp_path: Path) -> None:
    db = tmp_path / "real.db"
    subprocess.run(
        [str(STATEWRIGHT), "--db", str(db), "start", "agent_task", "--id", "keep"],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=60,
    )
    done = demo("--db", str(db), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error[invalid_input]: ")
    assert "holds other workflows (agent_task)" in done.stderr
    assert db.exists()


def test_demo_refuses_a_folder_without_the_examples(tmp_path: Path) -> None:
    """``--examples`` names the folder; one without the examples is refused, nothing written.
    (Without it, the demo runs the copy installed with the package, else the checkout's:
    tests/integration/test_wheel.py runs it from an installed wheel.)"""
    done = demo("--examples", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error[invalid_input]: the examples are not in '{tmp_path}'")
    assert not (tmp_path / ".statewright").exists()

"""statewright bulk (issue 28, item 3): a dry run counts and changes nothing; a real run
applies the action to each match once; the same --operation-id again replays."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import Cli

APP = """
from statewright import MachineBuilder, WorkflowType

m = (
    MachineBuilder("order")
    .state("charging", initial=True)
    .state("cancelled", terminal=True)
    .event("cancel")
    .transition("cancel", "charging", "cancelled")
    .build()
)
TYPES = [WorkflowType(m)]
"""


def test_bulk_cancel_dry_run_then_real_then_replayed(cli: Cli, tmp_path: Path) -> None:
    app = tmp_path / "order_app.py"
    app.write_text(APP)
    a = ("--app", str(app))
    for i in range(3):
        cli(*a, "start", "order", "--id", f"o{i}")
    dry = cli.json(*a, "bulk", "cancel", "--type", "order", "--reason", "r", "--dry-run")
    assert (dry["matched"], dry["applied"], dry["dry_run"]) == (3, 0, True)
    assert sorted(dry["sample"]) == ["o0", "o1", "o2"]
    assert cli.json(*a, "show", "o0")["workflow"]["state"] == "charging"
    text = cli(*a, "bulk", "cancel", "--older-than", "0s", "--reason", "r", "--operation-id", "x")
    assert "3 matched, 3 applied, 0 replayed" in text.stdout
    assert cli.json(*a, "show", "o1")["workflow"]["state"] == "cancelled"
    history = cli.json(*a, "history", "o1")
    assert [h["actor"] for h in history if h["event"] == "cancel"] == ["cli"]
    line = cli.error(*a, "bulk", "explode", "--reason", "r", code=2)
    assert line.startswith("error[invalid_input]") and "unknown bulk action" in line
    line = cli.error(*a, "bulk", "cancel", "--reason", "r", "--older-than", "soon", code=2)
    assert "invalid age" in line


def test_a_fork_run_again_with_its_entered_before_forks_no_fork(cli: Cli, tmp_path: Path) -> None:
    """The forks of a bulk fork sit in the same state: a re-run passes the printed
    --entered-before, so it matches the first run's workflows only (each forked once)."""
    app = tmp_path / "fork_app.py"
    app.write_text(APP)
    a = ("--app", str(app))
    for i in range(2):
        cli(*a, "start", "order", "--id", f"f{i}")
    base = ("bulk", "fork", "--type", "order", "--reason", "r", "--operation-id", "fk")
    first = cli(*a, *base).stdout
    assert "2 matched, 2 applied" in first
    hint = [ln for ln in first.splitlines() if ln.startswith("run it again with")]
    assert len(hint) == 1, first
    cutoff = hint[0].split()[-1]
    again = cli(*a, *base, "--entered-before", cutoff).stdout
    assert "2 matched, 0 applied, 2 replayed" in again
    listed = cli.json(*a, "list", "--type", "order")
    assert len(listed) == 4  # the two and one fork each
    line = cli.error(*a, *base, "--entered-before", "nan", code=2)
    assert "finite" in line


def test_include_chooses_live_finished_or_all(cli: Cli, tmp_path: Path) -> None:
    app = tmp_path / "include_app.py"
    app.write_text(APP)
    a = ("--app", str(app))
    for i in range(3):
        cli(*a, "start", "order", "--id", f"i{i}")
    cli(*a, "cancel", "i0", "--reason", "gone")
    base = ("bulk", "fork", "--type", "order", "--reason", "r", "--dry-run")
    assert sorted(cli.json(*a, *base)["sample"]) == ["i1", "i2"]
    assert cli.json(*a, *base, "--include", "finished")["sample"] == ["i0"]
    assert sorted(cli.json(*a, *base, "--include", "all")["sample"]) == ["i0", "i1", "i2"]
    line = cli.error(*a, *base, "--include", "dead", code=2)
    assert "--include is live, finished or all" in line

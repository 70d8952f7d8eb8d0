"""statewright migrate: a dry run shows the plan, a bad map is refused (exit 2) before anything
moves, and a migration is one logged transition per workflow that replays."""

from __future__ import annotations

from pathlib import Path

from statewright.definition.formats import save_path
from tests.integration.conftest import Cli
from tests.store.engine.test_definitions import shop


def test_migrate_from_the_command_line(cli: Cli, tmp_path: Path) -> None:
    v1, v2 = tmp_path / "shop1.yaml", tmp_path / "shop2.yaml"
    save_path(shop(1), v1)
    save_path(shop(2), v2)
    cli("--app", str(v1), "start", "shop", "--id", "s1")
    both = f"{v1},{v2}"
    line = cli.error("--app", both, "migrate", "shop", "1", "2", "--reason", "x", code=2)
    assert line.startswith("error[unknown_state]") and "'new'" in line
    plan = cli.json(
        "--app",
        both,
        "migrate",
        "shop",
        "1",
        "2",
        "--map",
        "new=received",
        "--reason",
        "rename",
        "--dry-run",
    )
    assert plan["plan"] == [{"id": "s1", "from": "new", "to": "received"}] and plan["dry_run"]
    assert cli.json("--app", both, "show", "s1")["workflow"]["machine_version"] == 1
    done = cli.json(
        "--app", both, "migrate", "shop", "1", "2", "--map", "new=received", "--reason", "rename"
    )
    assert done["moved"] == ["s1"]
    shown = cli.json("--app", both, "show", "s1")["workflow"]
    assert (shown["machine_version"], shown["state"]) == (2, "received")
    assert cli.json("--app", both, "history", "s1")[-1]["event"] == "$migrate"
    cli("--app", both, "replay", "s1")

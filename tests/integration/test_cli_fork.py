"""statewright fork (issue 22, item 3): forking from a version after which steps were done
runs them again under the fork's keys, so the command refuses (exit code 2, naming them)
without --rerun-steps; forking the latest version needs no flag."""

from __future__ import annotations

from pathlib import Path

from tests.integration.conftest import Cli

APP = """
from statewright import MachineBuilder, Next, WorkflowType

m = (
    MachineBuilder("parcel")
    .state("paying", initial=True)
    .state("shipping")
    .state("shipped", terminal=True)
    .event("charged")
    .event("sent")
    .transition("charged", "paying", "shipping")
    .transition("sent", "shipping", "shipped")
    .build()
)


async def pay(run):
    return Next("charged", context=await run.step("charge", lambda key: {"charge": key}))


async def ship(run):
    return Next("sent", context=await run.step("send", lambda key: {"sent": key}))


TYPES = [WorkflowType(m, handlers={"paying": pay, "shipping": ship})]
"""


def test_fork_from_an_earlier_version_needs_rerun_steps(cli: Cli, tmp_path: Path) -> None:
    app = tmp_path / "parcel_app.py"
    app.write_text(APP)
    cli("--app", str(app), "start", "parcel", "--id", "p1")
    cli("--app", str(app), "worker", "--until-idle")
    assert cli.json("--app", str(app), "show", "p1")["workflow"]["state"] == "shipped"
    help_text = cli("--app", str(app), "fork", "--help").stdout
    assert "--rerun-steps" in help_text and "run again" in help_text
    line = cli.error("--app", str(app), "fork", "p1", "--version", "1", "--reason", "r", code=2)
    assert line.startswith("error[steps_would_rerun]") and "'send'" in line
    assert cli.error("--app", str(app), "show", "p1.fork-1", code=1).startswith(
        "error[workflow_not_found]"
    )
    forked = cli.json(
        "--app", str(app), "fork", "p1", "--version", "1", "--reason", "r", "--rerun-steps"
    )
    assert (forked["id"], forked["state"]) == ("p1.fork-1", "paying")
    latest = cli.json("--app", str(app), "fork", "p1", "--reason", "a copy")
    assert latest["state"] == "shipped"

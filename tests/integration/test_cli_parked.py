"""The command line on parked workflows (issue 22, item 11): ``statewright stuck`` lists a
parked workflow from the moment it parks, with its reason and the command to run;
``statewright resume`` refuses one parked because a step's outcome is unknown (exit 2,
``step_unresolved``, naming the step and resolve-step) instead of reporting success;
``statewright alerts`` fires ``workflow_parked``."""

from __future__ import annotations

import json

from tests.integration.conftest import Cli
from tests.integration.test_cli_idempotency import events, park


def _two_parked(cli: Cli) -> None:
    for wid in ("t1", "t2", "t3"):
        cli("start", "agent_task", "--id", wid)
        cli("send", wid, "start")  # running: stuck only after an hour
    park(cli.db, "t1")  # a charge of unknown outcome
    park(cli.db, "t2", step=None, why="fatal_error")


def test_stuck_lists_parked_workflows_at_once_with_what_to_do(cli: Cli) -> None:
    assert cli("stuck").stdout.strip() == "no stuck workflows"
    _two_parked(cli)
    stdout = cli("stuck").stdout
    assert stdout.startswith("2 stuck workflow(s)\n") and "t3" not in stdout
    todo = " ".join(stdout.split("what to do:\n", 1)[1].split())  # long lines wrap
    assert todo.startswith("t1: the outcome of step 'charge' is unknown")
    assert "statewright resolve-step t1 charge --applied RESULT_JSON (or --not-applied)" in todo
    assert "t2: fix the cause (see its error), then statewright resume t2" in todo
    listed = cli.json("stuck")
    assert [(x["workflow"]["id"], x["parked"], x["action"], x["step"]) for x in listed] == [
        ("t1", "step_outcome_unknown", "resolve_step", "charge"),
        ("t2", "fatal_error", "resume", None),
    ]
    assert "resolve-step t1 charge" in listed[0]["todo"]


def test_resume_refuses_an_unknown_outcome_and_says_what_to_do(cli: Cli) -> None:
    _two_parked(cli)
    line = cli.error("resume", "t1", "--reason", "try again", code=2)
    assert line.startswith("error[step_unresolved]: ")
    assert "'charge'" in line and "resolve the step" in line
    report = json.loads(cli("--json", "resume", "t1", "--reason", "x", code=2).stderr)
    assert (report["code"], report["steps"]) == ("step_unresolved", ["charge"])
    assert events(cli, "t1") == ["$start", "start"]  # nothing was logged
    assert cli.json("show", "t1")["workflow"]["parked"] == "step_outcome_unknown"
    text = cli("resume", "t1", "--reason", "the hook's service is back", "--reconcile").stdout
    assert "runs again" in text and "parks again" in text
    assert events(cli, "t1") == ["$start", "start", "$resume"]
    # Another reason: resumed as before.
    assert "runs again" in cli("resume", "t2", "--reason", "fixed").stdout


def test_alerts_fire_workflow_parked(cli: Cli) -> None:
    assert cli("alerts").stdout.strip() == "no alerts"
    _two_parked(cli)
    text = cli("alerts", code=1).stdout
    assert "CRITICAL workflow_parked agent_task/running: 2 agent_task workflow(s) parked" in text
    assert "fatal_error 1, step_outcome_unknown 1" in text
    found = cli.json("alerts", "--threshold", "parked_workflows=3")
    assert found == {"status": "ok", "alerts": []}

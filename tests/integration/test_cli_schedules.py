"""``statewright schedules ...``, in-process on a temporary SQLite file: declare, list, show,
pause, resume, remove; bad definitions exit 2 and write nothing; a missing one exits 1."""

from __future__ import annotations

from tests.integration.conftest import Cli


def test_add_list_show_pause_resume_remove(cli: Cli) -> None:
    made = cli.json(
        "schedules",
        "add",
        "nightly",
        "agent_task",
        "0 2 * * *",
        "--input",
        '{"goal": "report"}',
        "--timezone",
        "Europe/Paris",
        "--catch-up",
        "all",
    )
    assert (made["id"], made["cron"], made["timezone"], made["catch_up"]) == (
        "nightly",
        "0 2 * * *",
        "Europe/Paris",
        "all",
    )
    assert made["input"] == {"goal": "report"} and made["paused"] is False
    assert "nightly" in cli("schedules", "list").stdout
    assert [s["id"] for s in cli.json("schedules", "list")] == ["nightly"]
    assert cli.json("schedules", "pause", "nightly")["paused"] is True
    assert cli.json("schedules", "resume", "nightly")["paused"] is False
    assert cli.json("schedules", "show", "nightly")["type"] == "agent_task"
    assert "removed" in cli("schedules", "remove", "nightly").stdout
    assert cli.error("schedules", "remove", "nightly", code=1).startswith(
        "error[schedule_not_found]"
    )
    assert cli.json("schedules", "list") == []


def test_bad_definitions_exit_2_and_write_nothing(cli: Cli) -> None:
    for args in (
        ["s", "agent_task", "61 * * * *"],
        ["s", "agent_task", "* * * * *", "--timezone", "Mars/Olympus"],
        ["s", "agent_task", "* * * * *", "--catch-up", "sometimes"],
        ["s", "agent_task", "* * * * *", "--input", "[1]"],
        ["bad id", "agent_task", "* * * * *"],
    ):
        line = cli.error("schedules", "add", *args, code=2)
        assert line.startswith(("error[invalid_schedule]", "error[invalid_input]")), line
    assert cli.error("schedules", "add", "s", "nope", "* * * * *", code=1).startswith(
        "error[unknown_workflow_type]"
    )
    assert cli.json("schedules", "list") == []


def test_a_schedule_keeps_who_declared_it(cli: Cli) -> None:
    made = cli.json("schedules", "add", "s", "agent_task", "@daily", "--actor", "carol")
    assert made["created_by"] == "carol"
    assert "declared by: carol" in cli("schedules", "show", "s").stdout
    assert cli.json("schedules", "add", "s", "agent_task", "@daily")["created_by"] == "carol"

"""The CLI's workflow commands and error paths, in-process on a temporary SQLite file."""

from __future__ import annotations

import json

import pytest

from statewright import Engine
from statewright.cli.loading import db_path
from statewright.store.postgres import PostgresStore
from tests.integration.conftest import Cli


def start_paused(cli: Cli, wid: str) -> None:
    cli("start", "agent_task", "--id", wid, "--input", '{"goal": "triage"}')
    cli("send", wid, "start")
    cli("send", wid, "request_approval", "--actor", "agent")


def test_help_lists_every_command_and_the_env_var_of_every_global_option(cli: Cli) -> None:
    text = cli("--help", db=False).stdout
    for name in (
        "init",
        "start",
        "send",
        "show",
        "history",
        "approve",
        "deny",
        "cancel",
        "input",
        "resolve-step",
        "resume",
        "stuck",
        "diagram",
        "check",
        "worker",
        "list",
        "replay",
        "demo",
    ):
        assert f"  {name} " in text
    for env in ("STATEWRIGHT_DB", "STATEWRIGHT_APP", "STATEWRIGHT_JSON", "STATEWRIGHT_LOG_LEVEL"):
        assert env in text
    assert "STATEWRIGHT_DB" in cli("show", "--help", db=False).stdout


def test_init_creates_the_database_and_prints_its_path(cli: Cli) -> None:
    assert str(cli.db) in cli("init").stdout
    assert cli.db.exists()
    assert cli.json("init") == {"db": str(cli.db), "types": ["agent_task"]}


def test_start_send_show_history_list_replay(cli: Cli) -> None:
    assert "planned" in cli("start", "agent_task", "--id", "t1", "--input", '{"goal": "x"}').stdout
    row = cli.json("send", "t1", "start", "--actor", "ann", "--expected-version", "1")
    assert (row["state"], row["version"], row["context"]) == ("running", 2, {"goal": "x"})

    shown = cli("show", "t1").stdout
    assert "running" in shown and "complete" in shown and '"goal": "x"' in shown
    details = cli.json("show", "t1")
    assert details["workflow"]["state"] == "running"
    assert "complete" in details["allowed_events"]
    assert details["timers"] == [] and details["steps"] == []

    log = cli.json("history", "t1")
    assert [(t["event"], t["to_state"], t["actor"]) for t in log] == [
        ("$start", "planned", "cli"),
        ("start", "running", "ann"),
    ]
    assert "ann" in cli("history", "t1").stdout

    cli("start", "agent_task", "--id", "t2")
    assert {w["id"] for w in cli.json("list")} == {"t1", "t2"}
    assert [w["id"] for w in cli.json("list", "--state", "planned")] == ["t2"]
    assert cli.json("list", "--type", "other") == []
    assert "t1" in cli("list").stdout

    assert "OK" in cli("replay", "t1").stdout
    assert cli.json("replay", "t1")["replayed"]["state"] == "running"


def test_start_with_an_existing_id_is_idempotent(cli: Cli) -> None:
    first = cli.json("start", "agent_task", "--id", "t1")
    assert cli.json("start", "agent_task", "--id", "t1") == first


def test_global_options_work_after_the_command_and_win_there(cli: Cli) -> None:
    other = str(cli.db.with_name("other.db"))
    cli("start", "agent_task", "--id", "t1", "--db", other)
    # The root --db (the fixture's) has no t1: the --db after the command wins.
    assert cli.json("show", "t1", "--db", other)["workflow"]["id"] == "t1"
    assert json.loads(cli("show", "t1", "--db", other, "--json").stdout)["workflow"]
    cli.error("show", "t1", code=1)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{bad", "not valid JSON"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"text"', "must be a JSON object"),
    ],
)
def test_malformed_json_is_refused_with_exit_2_and_nothing_written(
    cli: Cli, text: str, why: str
) -> None:
    cli("start", "agent_task", "--id", "t1")
    line = cli.error("start", "agent_task", "--id", "t2", "--input", text, code=2)
    assert line.startswith("error[invalid_input]: --input") and why in line
    line = cli.error("send", "t1", "start", "--payload", text, code=2)
    assert line.startswith("error[invalid_input]: --payload") and why in line
    assert [w["id"] for w in cli.json("list")] == ["t1"]
    assert len(cli.json("history", "t1")) == 1


def test_illegal_transition_exits_2_with_one_line_and_changes_nothing(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    before = (cli.json("show", "t1"), cli.json("history", "t1"))
    result = cli("send", "t1", "complete", code=2)
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error[illegal_transition]: event 'complete' is not allowed in state 'planned'; "
        "allowed: start, cancel"
    ]
    report = json.loads(cli("--json", "send", "t1", "complete", code=2).stderr)
    assert report["code"] == "illegal_transition"
    assert (report["state"], report["event"], report["allowed"]) == (
        "planned",
        "complete",
        ["start", "cancel"],
    )
    assert (cli.json("show", "t1"), cli.json("history", "t1")) == before


def test_a_payload_that_breaks_the_schema_exits_2(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    line = cli.error("send", "t1", "error_transient", "--payload", '{"attempt": 1}', code=2)
    assert line.startswith("error[invalid_payload]: ")
    assert cli.json("show", "t1")["workflow"]["version"] == 2


def test_unknown_workflow_or_type_exits_1(cli: Cli) -> None:
    for args in (
        ("show", "nope"),
        ("history", "nope"),
        ("send", "nope", "start"),
        ("replay", "nope"),
        ("approve", "nope", "--approver", "a"),
    ):
        assert cli.error(*args, code=1) == "error[workflow_not_found]: no workflow with id 'nope'"
    assert cli.error("start", "nope", code=1) == (
        "error[unknown_workflow_type]: unknown workflow type 'nope' (known: agent_task)"
    )
    assert json.loads(cli("--json", "show", "nope", code=1).stderr) == {
        "code": "workflow_not_found",
        "message": "no workflow with id 'nope'",
        "workflow_id": "nope",
    }


def test_a_stale_expected_version_is_a_conflict(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    line = cli.error("send", "t1", "start", "--expected-version", "7", code=1)
    assert line.startswith("error[version_conflict]: ")


def test_approve_and_deny_record_the_approver(cli: Cli) -> None:
    start_paused(cli, "t1")
    start_paused(cli, "t2")
    assert cli.json("show", "t1")["timers"]  # the approval timeout and reminder
    assert "running" in cli("approve", "t1", "--approver", "maria", "--comment", "ok").stdout
    assert cli.json("deny", "t2", "--approver", "maria")["state"] == "failed"
    last = cli.json("history", "t1")[-1]
    assert (last["event"], last["actor"], last["payload"]) == (
        "approval_granted",
        "maria",
        {"approver": "maria", "comment": "ok"},
    )
    assert cli.error("approve", "t1", "--approver", "maria", code=2).startswith(
        "error[illegal_transition]: "
    )
    assert cli.error("deny", "t1", "--approver", " ", code=2).startswith("error[invalid_input]")


def test_store_errors_show_the_cause_chain(cli: Cli) -> None:
    cli.db.mkdir()  # a folder where the database file should be
    lines = cli("list", code=1).stderr.splitlines()
    assert lines[0].startswith("error[store_error]: ")
    assert lines[1].startswith("  caused by: OperationalError: ")


def test_bad_option_values_are_usage_errors(cli: Cli) -> None:
    assert "not one of" in cli("--log-level", "loud", "list", code=2).stderr
    cli("list", "--limit", "0", code=2)
    assert cli.error("--db", "mysql://x/y", "list", code=2).startswith("error[invalid_input]: ")


def test_stuck_lists_workflows_past_their_threshold(cli: Cli) -> None:
    machine = cli.db.with_name("slow.yaml")
    machine.write_text(
        "name: slow\nstates:\n  - {name: waiting, initial: true, stuck_after: 0.001}\n"
        "  - {name: done, terminal: true}\nevents: [{name: finish}]\n"
        "transitions: [{event: finish, source: waiting, target: done}]\n"
    )
    assert "no stuck workflows" in cli("stuck").stdout
    cli("--app", str(machine), "start", "slow", "--id", "s1")
    found = cli.json("--app", str(machine), "stuck")
    assert [(x["workflow"]["id"], x["threshold"]) for x in found] == [("s1", 0.001)]
    assert "s1" in cli("--app", str(machine), "stuck").stdout


def test_messages_name_a_postgres_store_by_database_and_host_never_credentials() -> None:
    """The worker's start-up line and the JSON of ``init`` name the store (a SQLite file, or
    a server's ``dbname@host:port``); a PostgreSQL store was named ``None``."""
    store = PostgresStore("postgresql://ops:s3cret@db.internal:5433/orders")
    assert db_path(Engine(store, [])) == "orders@db.internal:5433"

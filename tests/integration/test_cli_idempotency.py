"""``--idempotency-key`` on the writing commands, and the operator commands (resolve-step,
resume), in-process on a temporary SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statewright import SQLiteStore
from statewright.errors import OutcomeUnknown
from statewright.types import DeferWrite, StepFinish, TransitionWrite, WorkflowRow
from tests.integration.conftest import Cli
from tests.integration.test_cli import start_paused


def events(cli: Cli, wid: str) -> list[str]:
    return [t["event"] for t in cli.json("history", wid)]


def test_help_lists_the_operator_commands(cli: Cli) -> None:
    text = cli("--help", db=False).stdout
    for name in ("cancel", "input", "resolve-step", "resume"):
        assert f"  {name} " in text
    for command in ("start", "send", "approve", "deny", "cancel", "input"):
        assert "--idempotency-key" in cli(command, "--help", db=False).stdout


def test_send_retried_with_its_key_applies_once(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    first = cli.json("send", "t1", "start", "--idempotency-key", "k1", "--expected-version", "1")
    assert (first["state"], first["version"], first["replayed"]) == ("running", 2, False)
    again = cli.json("send", "t1", "start", "--idempotency-key", "k1", "--expected-version", "1")
    assert (again["version"], again["replayed"]) == (2, True)
    text = cli("send", "t1", "start", "--idempotency-key", "k1").stdout
    assert text.startswith("already applied with idempotency key 'k1': nothing was done again")
    # The same key for another event: refused with exit 2, nothing written.
    line = cli.error("send", "t1", "complete", "--idempotency-key", "k1", code=2)
    assert line.startswith("error[idempotency_key_reused]: ")
    assert events(cli, "t1") == ["$start", "start"]
    assert cli.json("history", "t1")[1]["idempotency_key"] == "k1"
    # Without a key the JSON is the row as before.
    assert "replayed" not in cli.json("send", "t1", "complete")


@pytest.mark.parametrize("bad", ["has space", "", "x" * 256])
def test_a_malformed_key_exits_2(cli: Cli, bad: str) -> None:
    cli("start", "agent_task", "--id", "t1")
    line = cli.error("send", "t1", "start", "--idempotency-key", bad, code=2)
    assert line.startswith("error[invalid_input]: invalid idempotency key")
    assert events(cli, "t1") == ["$start"]


def test_start_without_an_id_retried_with_its_key_starts_one_workflow(cli: Cli) -> None:
    first = cli.json("start", "agent_task", "--input", '{"goal": "x"}', "--idempotency-key", "s")
    again = cli.json("start", "agent_task", "--input", '{"goal": "x"}', "--idempotency-key", "s")
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["id"] == first["id"]
    assert [w["id"] for w in cli.json("list")] == [first["id"]]
    line = cli.error(
        "start", "agent_task", "--input", '{"goal": "y"}', "--idempotency-key", "s", code=2
    )
    assert line.startswith("error[idempotency_key_reused]: ")


def test_approve_deny_and_cancel_retried_with_their_keys(cli: Cli) -> None:
    start_paused(cli, "t1")
    assert not cli.json("approve", "t1", "--approver", "maria", "--idempotency-key", "a")[
        "replayed"
    ]
    assert cli.json("approve", "t1", "--approver", "maria", "--idempotency-key", "a")["replayed"]
    line = cli.error("deny", "t1", "--approver", "maria", "--idempotency-key", "a", code=2)
    assert line.startswith("error[idempotency_key_reused]: ")
    assert events(cli, "t1").count("approval_granted") == 1

    start_paused(cli, "t2")
    assert cli.json("deny", "t2", "--approver", "maria", "--idempotency-key", "d")["state"] == (
        "failed"
    )
    assert cli.json("deny", "t2", "--approver", "maria", "--idempotency-key", "d")["replayed"]

    cli("start", "agent_task", "--id", "t3")
    done = cli.json("cancel", "t3", "--reason", "stop", "--idempotency-key", "c")
    assert (done["terminal"], done["replayed"]) == (True, False)
    text = cli("cancel", "t3", "--reason", "stop", "--idempotency-key", "c").stdout
    assert text.startswith("already applied with idempotency key 'c'")
    line = cli.error("cancel", "t3", "--reason", "other", "--idempotency-key", "c", code=2)
    assert line.startswith("error[idempotency_key_reused]: ")
    assert events(cli, "t3").count("cancel") == 1


def test_input_retried_with_its_key_posts_once(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    args = ("input", "t1", "doc", "--payload", '{"pages": 3}', "--idempotency-key", "in-1")
    first = cli.json(*args)
    again = cli.json(*args)
    assert (first["replayed"], again["replayed"]) == (False, True)
    assert again["input_id"] == first["input_id"]
    assert "nothing posted again" in cli(*args).stdout
    line = cli.error("input", "t1", "doc", "--payload", "{}", "--idempotency-key", "in-1", code=2)
    assert line.startswith("error[idempotency_key_reused]: ")
    cli("send", "t1", "complete")
    line = cli.error("input", "t1", "late", code=2)
    assert line.startswith("error[workflow_finished]: ")
    assert cli.json(*args)["replayed"] is True  # posted before it finished: still a replay


def test_an_unknown_outcome_exits_1_and_says_to_retry_with_the_key(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli("start", "agent_task", "--id", "t1")
    real: Callable[[SQLiteStore, TransitionWrite], Awaitable[WorkflowRow]] = (
        SQLiteStore.apply_transition
    )

    async def applied_then_lost(self: SQLiteStore, write: TransitionWrite) -> WorkflowRow:
        await real(self, write)
        raise OutcomeUnknown("lost the connection during a write; it may have been applied")

    monkeypatch.setattr(SQLiteStore, "apply_transition", applied_then_lost)
    # The store failure is logged (at error level, on stderr) before the one-line report.
    stderr = cli("send", "t1", "start", "--idempotency-key", "k", code=1).stderr
    [line] = [x for x in stderr.splitlines() if x.startswith("error[")]
    assert line.startswith("error[outcome_unknown]: lost the connection")
    assert "run the same command again with the same --idempotency-key" in line
    report = json.loads(cli("--json", "send", "t1", "complete", code=1).stderr.splitlines()[-1])
    assert report["code"] == "outcome_unknown" and "--idempotency-key" in report["message"]
    monkeypatch.setattr(SQLiteStore, "apply_transition", real)
    assert cli.json("send", "t1", "start", "--idempotency-key", "k")["replayed"] is True
    assert events(cli, "t1") == ["$start", "start", "complete"]


# -- operators ----------------------------------------------------------------------------------


def park(
    db: Path, wid: str, *, step: str | None = "charge", why: str = "step_outcome_unknown"
) -> None:
    """What a worker leaves behind: a step of unknown outcome and the workflow parked."""

    async def go() -> None:
        store = SQLiteStore(db)
        await store.open()
        try:
            row = await store.get_workflow(wid)
            assert row is not None
            at = row.updated_at
            if step is not None:
                key = f"{wid}:{step}"
                await store.step_begin(key, wid, step, at)
                await store.step_finish(
                    StepFinish(key, 1, "failed", error="TimeoutError", outcome="unknown", at=at)
                )
            await store.defer(
                DeferWrite(
                    wid, row.version, at, 1, total_attempts=1, last_error="boom", parked=why
                )
            )
        finally:
            await store.close()

    asyncio.run(go())


def test_show_prints_parking_and_step_outcomes(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    park(cli.db, "t1")
    text = cli("show", "t1").stdout
    assert "parked    step_outcome_unknown" in text
    assert "unknown" in text and "TimeoutError" in text and "1 over its life" in text
    details = cli.json("show", "t1")
    workflow: dict[str, Any] = details["workflow"]
    assert (workflow["parked"], workflow["total_attempts"]) == ("step_outcome_unknown", 1)
    assert "fence" in workflow
    [step] = details["steps"]
    assert (step["status"], step["outcome"]) == ("failed", "unknown")


def test_resolve_step_answers_for_the_step_and_resumes(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    park(cli.db, "t1")
    for bad in (
        ("--reason", "x"),  # neither
        ("--applied", "1", "--not-applied", "--reason", "x"),  # both
        ("--applied", "{bad", "--reason", "x"),
        ("--applied", "1", "--reason", " "),
    ):
        line = cli.error("resolve-step", "t1", "charge", *bad, code=2)
        assert line.startswith("error[invalid_input]: "), (bad, line)
    line = cli.error("resolve-step", "t1", "nope", "--applied", "1", "--reason", "x", code=1)
    assert line.startswith("error[step_not_found]: ")  # like an unknown workflow: exit 1
    assert cli.json("show", "t1")["workflow"]["parked"] == "step_outcome_unknown"

    record = cli.json(
        "resolve-step", "t1", "charge", "--applied", '{"charge_id": "ch_1"}', "--reason",
        "seen in the PSP", "--actor", "ops",
    )  # fmt: skip
    assert (record["status"], record["result"]) == ("done", {"charge_id": "ch_1"})
    assert "ops" in record["error"] and "seen in the PSP" in record["error"]
    workflow = cli.json("show", "t1")["workflow"]
    assert (workflow["parked"], workflow["state"]) == (None, "running")
    assert workflow["next_due_at"] is not None  # due again: its handler runs next
    line = cli.error("resolve-step", "t1", "charge", "--not-applied", "--reason", "x", code=2)
    assert "done already" in line

    cli("start", "agent_task", "--id", "t2")
    cli("send", "t2", "start")
    park(cli.db, "t2")
    text = cli("resolve-step", "t2", "charge", "--not-applied", "--reason", "no charge").stdout
    assert "resolved as not applied: now failed" in text
    [step] = cli.json("show", "t2")["steps"]
    assert (step["status"], step["outcome"]) == ("failed", "not_applied")


def test_resume_makes_a_parked_workflow_due(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    park(cli.db, "t1", step=None, why="fatal_error")
    assert cli.error("resume", "t1", "--reason", " ", code=2).startswith("error[invalid_input]")
    row = cli.json("resume", "t1", "--reason", "fixed the config", "--actor", "ops")
    assert (row["parked"], row["state"]) == (None, "running") and row["next_due_at"]
    assert "runs again" in cli("resume", "t1", "--reason", "again").stdout
    # Each resume is in the log (a self-transition), with its actor and reason.
    assert events(cli, "t1") == ["$start", "start", "$resume", "$resume"]
    cli("send", "t1", "complete")
    assert cli.error("resume", "t1", "--reason", "x", code=2).startswith(
        "error[workflow_finished]"
    )
    assert cli.error("resume", "nope", "--reason", "x", code=1).startswith(
        "error[workflow_not_found]"
    )

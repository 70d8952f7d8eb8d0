"""JSON logs: one object per line, an INFO line per transition, a WARNING per rejected
transition and an ERROR per persistence failure, through the CLI's stderr handler."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import pytest

from statewright import ManualClock
from statewright.cli.output import LogFormat, logs_to_stderr, use_log_format
from statewright.definition.builtin.agent_task import agent_task_machine
from statewright.errors import IllegalTransition, InvalidPayload, StoreError
from statewright.observability.logs import JsonFormatter
from statewright.testing import memory_engine


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_transitions_rejections_and_persistence_failures_as_json_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with logs_to_stderr("info"):
        use_log_format(LogFormat.json)
        async with memory_engine([agent_task_machine()], ManualClock(1_800_000_000.0)) as eng:
            await eng.start("agent_task", workflow_id="t1", actor="agent-7")
            await eng.send("t1", "start", actor="agent-7")
            with pytest.raises(IllegalTransition):
                await eng.send("t1", "start", actor="agent-7")
            with pytest.raises(InvalidPayload):
                await eng.send("t1", "error_transient", {"attempt": 0}, actor="agent-7")
        with pytest.raises(StoreError):
            await eng.send("t1", "complete")  # the store is closed: not persisted
    lines = json_lines(capsys.readouterr().err)  # every line parses as JSON
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    assert all(line["ts"].endswith("Z") and "T" in line["ts"] for line in lines)
    mine = [line for line in lines if line["logger"] == "statewright.transitions"]
    assert [(line["level"], line["message"], line["action"]) for line in mine] == [
        ("INFO", "transition", "transition"),
        ("INFO", "transition", "transition"),
        ("WARNING", "transition rejected", "transition_rejected"),
        ("WARNING", "transition rejected", "transition_rejected"),
        ("ERROR", "transition not persisted", "persistence_failure"),
    ]
    start, moved, illegal, invalid, lost = mine
    assert (start["from_state"], start["to_state"], start["event"]) == (None, "planned", "$start")
    assert {k: moved[k] for k in ("workflow_id", "workflow_type", "actor", "version")} == {
        "workflow_id": "t1",
        "workflow_type": "agent_task",
        "actor": "agent-7",
        "version": 2,
    }
    assert (moved["from_state"], moved["to_state"], moved["event"]) == (
        "planned",
        "running",
        "start",
    )
    assert (illegal["code"], illegal["state"], illegal["event"]) == (
        "illegal_transition",
        "running",
        "start",
    )
    assert illegal["workflow_type"] == "agent_task" and "not allowed" in illegal["error"]
    assert invalid["code"] == "invalid_payload"
    assert (lost["workflow_id"], lost["event"]) == ("t1", "complete")
    assert "not open" in lost["error"]


def test_text_stays_the_default_and_the_format_can_switch_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = logging.getLogger("statewright.test")
    with logs_to_stderr("info"):
        log.info("plain", extra={"action": "x"})
        use_log_format("json")
        log.info("structured", extra={"action": "y", "n": 3})
        use_log_format("text")
        log.info("plain again")
    text, structured, again = capsys.readouterr().err.splitlines()
    assert text == "INFO statewright.test: plain action=x"
    assert json.loads(structured) | {"ts": "-"} == {
        "ts": "-",
        "level": "INFO",
        "logger": "statewright.test",
        "message": "structured",
        "action": "y",
        "n": 3,
    }
    assert again == "INFO statewright.test: plain again"


def test_the_formatter_keeps_odd_values_and_exceptions_as_json() -> None:
    record = logging.LogRecord("statewright.x", logging.ERROR, __file__, 1, "boom %s", (1,), None)
    record.level = "mine"  # an extra field named like a base key
    record.when = {1, 2}  # not JSON: written as str
    try:
        raise ValueError("bad")
    except ValueError:
        record.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(record))
    assert (data["level"], data["extra_level"], data["message"]) == ("ERROR", "mine", "boom 1")
    assert data["when"] == "{1, 2}"
    assert "ValueError: bad" in data["exception"]

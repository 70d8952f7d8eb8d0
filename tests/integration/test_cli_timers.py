"""The CLI's timer commands, in-process on a temporary SQLite file."""

from __future__ import annotations

import datetime
import time

import pytest

from statewright.cli.timers import parse_duration
from statewright.errors import InvalidInput
from tests.integration.conftest import Cli


def test_durations() -> None:
    assert [parse_duration(t) for t in ("10s", "90m", "2h", "1d", "1.5", "0.5h")] == [
        10,
        5400,
        7200,
        86400,
        1.5,
        1800,
    ]
    for bad in ("", "h", "10x", "-5s", "1e3s"):
        with pytest.raises(InvalidInput):
            parse_duration(bad)


def test_schedule_list_and_cancel(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1", "--input", '{"goal": "triage"}')
    before = time.time()
    made = cli.json("schedule", "t1", "start", "--after", "90m", "--key", "kick", "--keep")
    assert (made["key"], made["event"], made["keep"]) == ("kick", "start", True)
    assert before + 5400 <= made["due_at"] <= time.time() + 5400
    at = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)).isoformat()
    cli("schedule", "t1", "cancel", "--at", at, "--payload", '{"reason": "too slow"}')
    listed = cli.json("timers", "t1")
    assert [t["key"] for t in listed] == ["kick", "cancel"]
    assert "kick" in cli("timers", "t1").stdout
    cli("cancel-timer", "t1", "kick")
    assert [t["key"] for t in cli.json("timers", "t1")] == ["cancel"]
    cli("cancel-timer", "t1", "kick", code=1)


def test_schedule_refusals_exit_2(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t2", "--input", '{"goal": "triage"}')
    cli("schedule", "t2", "start", code=2)  # neither --after nor --at
    cli("schedule", "t2", "start", "--after", "1s", "--at", "2030-01-01T00:00:00", code=2)
    cli("schedule", "t2", "start", "--after", "soon", code=2)
    cli("schedule", "t2", "no_such_event", "--after", "1s", code=2)
    cli("schedule", "t2", "start", "--after", "1s", "--payload", "[1]", code=2)
    assert cli.json("timers", "t2") == []
    cli("schedule", "nope", "start", "--after", "1s", code=1)


def test_a_timer_names_who_scheduled_it(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t3", "--input", '{"goal": "triage"}')
    made = cli.json("schedule", "t3", "start", "--at", "2000-01-01T00:00:00", "--actor", "bob")
    assert made["scheduled_by"] == "bob"
    assert "bob" in cli("timers", "t3").stdout  # the "scheduled by" column
    cli("worker", "--once")
    fired = [t for t in cli.json("history", "t3") if t["event"] == "start"]
    assert [t["actor"] for t in fired] == ["timer for bob"]

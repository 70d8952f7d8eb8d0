"""The CLI's observability: ``statewright alerts`` (exit 0 when nothing fires, 1 when
something does) and ``--log-format json`` for ``worker`` and ``serve``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from statewright import Engine, ManualClock, SQLiteStore
from statewright.engine.builtin import agent_task_type
from tests.integration.conftest import CLEAN_ENV, Cli
from tests.integration.test_cli_apps import ORDERS

HOUR = 3600.0


def seed(cli: Cli, *, hours_ago: float) -> None:
    """Workflows started ``hours_ago`` hours ago (a clock set back, on the CLI's database):
    t1 running, t2 paused, g1 running in tenant globex, t3 done."""

    async def go() -> None:
        clock = ManualClock(time.time() - hours_ago * HOUR)
        async with Engine(SQLiteStore(cli.db), [agent_task_type()], clock=clock) as engine:
            for wid, tenant in (("t1", "acme"), ("t2", "acme"), ("g1", "globex"), ("t3", "acme")):
                await engine.start("agent_task", workflow_id=wid, tenant=tenant)
                await engine.send(wid, "start")
            await engine.send("t2", "request_approval")
            await engine.send("t3", "complete")

    asyncio.run(go())


def test_alerts_exit_0_when_nothing_fires(cli: Cli) -> None:
    assert cli("alerts").stdout.strip() == "no alerts"
    assert cli.json("alerts") == {"status": "ok", "alerts": []}
    seed(cli, hours_ago=0.5)  # nothing is old enough yet
    assert cli("alerts").stdout.strip() == "no alerts"


def test_alerts_exit_1_when_alerts_fire(cli: Cli) -> None:
    seed(cli, hours_ago=2)
    result = cli("alerts", code=1)
    assert "1 alert(s) firing" in result.stdout and result.stderr == ""
    assert "running_too_long" in result.stdout and "e.g. g1, t1" in result.stdout

    body = cli.json("alerts", code=1)
    assert body["status"] == "firing"
    [alert] = body["alerts"]
    assert {k: alert[k] for k in ("rule", "severity", "type", "state", "count")} == {
        "rule": "running_too_long",
        "severity": "warning",
        "type": "agent_task",
        "state": "running",
        "count": 2,
    }
    assert alert["sample_ids"] == ["g1", "t1"] and alert["threshold"] == HOUR
    assert alert["value"] >= 2 * HOUR

    # One tenant only; thresholds from options or the environment.
    assert [
        a["sample_ids"] for a in cli.json("alerts", "--tenant", "globex", code=1)["alerts"]
    ] == [["g1"]]
    assert cli.json("alerts", "--tenant", "nobody") == {"status": "ok", "alerts": []}
    assert cli("alerts", "--threshold", "running_too_long=10800").stdout.strip() == "no alerts"
    rules = [
        a["rule"]
        for a in cli.json(
            "alerts", "--threshold", "paused_too_long=3600", "--threshold", "samples=1", code=1
        )["alerts"]
    ]
    assert rules == ["running_too_long", "paused_abandoned"]
    env = CLEAN_ENV | {"STATEWRIGHT_ALERT_THRESHOLDS": "running_too_long=10800 samples=1"}
    result = cli.runner.invoke(app_(), ["--db", str(cli.db), "alerts"], env=env)
    assert (result.exit_code, result.stdout.strip()) == (0, "no alerts")


def test_alerts_refuse_bad_thresholds_with_exit_2_and_document_the_exit_codes(cli: Cli) -> None:
    line = cli.error("alerts", "--threshold", "nope=1", code=2)
    assert line.startswith("error[invalid_input]: unknown alert threshold 'nope'")
    assert cli.error("alerts", "--threshold", "samples", code=2).startswith("error[invalid_input]")
    help_text = " ".join(cli("alerts", "--help", db=False).stdout.split())
    assert "exit 0 when none fires, 1 when any fires" in help_text
    assert "STATEWRIGHT_ALERT_THRESHOLDS" in help_text and "running_too_long=3600" in help_text
    assert "  alerts " in cli("--help", db=False).stdout


def app_() -> Any:
    from statewright.cli import app

    return app


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_worker_logs_one_json_object_per_line(cli: Cli) -> None:
    order = '{"sku": "BOOK-42", "quantity": 1, "amount_cents": 2599}'
    cli("--app", ORDERS, "start", "order_fulfilment", "--id", "o1", "--input", order)
    result = cli("--app", ORDERS, "worker", "--until-idle", "--log-format", "json")
    lines = json_lines(result.stderr)  # nothing but JSON on stderr
    assert lines[0]["message"] == "worker started" and lines[0]["types"]
    moves = [
        (line["level"], line["from_state"], line["to_state"])
        for line in lines
        if line.get("action") == "transition"
    ]
    assert moves == [
        ("INFO", "created", "inventory_reserved"),
        ("INFO", "inventory_reserved", "payment_authorized"),
        ("INFO", "payment_authorized", "payment_captured"),
        ("INFO", "payment_captured", "fulfillment_triggered"),
    ]
    # The variable does the same; text stays the default.
    cli("--app", ORDERS, "start", "order_fulfilment", "--id", "o2", "--input", order)
    env = CLEAN_ENV | {"STATEWRIGHT_LOG_FORMAT": "json"}
    argv = ["--db", str(cli.db), "--app", ORDERS, "worker", "--until-idle"]
    result = cli.runner.invoke(app_(), argv, env=env)
    assert result.exit_code == 0, result.stderr
    assert sum(1 for line in json_lines(result.stderr) if line.get("action") == "transition") == 4
    cli("--app", ORDERS, "start", "order_fulfilment", "--id", "o3", "--input", order)
    text = cli("--app", ORDERS, "worker", "--until-idle").stderr
    assert "INFO statewright.transitions: transition" in text
    assert (
        "'xml' is not one of 'text', 'json'" in cli("worker", "--log-format", "xml", code=2).stderr
    )


def test_serve_logs_json_from_its_first_line(cli: Cli) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "statewright.cli", "--db", str(cli.db), "serve", "--port", "0"],
        env=env | {"STATEWRIGHT_LOG_FORMAT": "json"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first, second = json.loads(proc.stderr.readline()), json.loads(proc.stderr.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert (first["level"], first["logger"]) == ("WARNING", "statewright.http")
    assert "open mode" in first["message"]
    assert second["message"].startswith("statewright serving on http://127.0.0.1:0/")

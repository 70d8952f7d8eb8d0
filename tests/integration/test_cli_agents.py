"""``statewright show`` of a workflow whose agents called a model (its usage line, and
``usage`` in ``--json``), and ``statewright conversation`` (the agents' messages in order; the
CLI is a local operator: nothing is redacted)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from statewright.cli.loading import load_app
from statewright.engine import WorkflowType
from statewright.engine.budgets import Budget
from tests.agents_app import CARD
from tests.integration.conftest import Cli

APP = ("--app", str(Path(__file__).resolve().parents[1] / "agents_app.py"))


def test_show_has_the_usage_and_conversation_the_messages(cli: Cli) -> None:
    cli(*APP, "start", "triage", "--id", "t1", "--input", f'{{"card": "{CARD}"}}')
    cli(*APP, "start", "triage", "--id", "t2", "--input", '{"card": "x"}')
    cli(*APP, "worker", "--until-idle")
    shown = cli(*APP, "show", "t1").stdout
    assert "usage     200 tokens (160 in, 40 out), 0.004 USD, 2 model calls" in shown
    assert "usage     tokens by model: big 150, small 50" in shown
    details = cli.json(*APP, "show", "t1")
    assert details["usage"]["total"]["model_calls"] == 2
    assert details["usage"]["by_state"]["reading"]["tokens"] == 200

    talk = cli(*APP, "conversation", "t1").stdout
    assert f"the card is {CARD}" in talk and "lookup(" in talk
    messages = cli.json(*APP, "conversation", "t1")
    assert [(m["role"], m["step"]) for m in messages] == [
        ("user", "triage.v1.model.0"),
        ("assistant", "triage.v1.model.0"),
        ("user", "triage.v1.model.1"),
        ("assistant", "triage.v1.model.1"),
    ]
    cli(*APP, "start", "agent_task", "--id", "plain")
    assert "usage " not in cli(*APP, "show", "plain").stdout
    assert cli.json(*APP, "show", "plain")["usage"] is None
    assert "no agent conversation" in cli(*APP, "conversation", "plain").stdout
    assert cli.json(*APP, "conversation", "plain") == []
    cli.error(*APP, "conversation", "nope", code=1)


REVIEW = {
    "name": "review",
    "states": [
        {"name": "drafting", "initial": True},
        {"name": "waiting_human"},
        {"name": "done", "terminal": True},
    ],
    "events": [{"name": "drafted"}, {"name": "over_budget"}],
    "transitions": [
        {"event": "drafted", "source": "drafting", "target": "done"},
        {"event": "drafted", "source": "waiting_human", "target": "done"},
        {"event": "over_budget", "source": "drafting", "target": "waiting_human"},
    ],
}


def test_a_definition_file_may_declare_budgets(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "review.yaml"
    budgets = [
        {"event": "over_budget", "tokens": 50_000},
        {"event": "over_budget", "cost": 0.5, "per": "visit", "states": ["drafting"]},
    ]
    path.write_text(yaml.safe_dump({**REVIEW, "budgets": budgets, "redact": ["card"]}))
    [loaded] = load_app(str(path))
    assert isinstance(loaded, WorkflowType)
    assert loaded.budgets == (
        Budget("over_budget", tokens=50_000),
        Budget("over_budget", cost=0.5, per="visit", states=("drafting",)),
    )
    assert loaded.redact == ("card",)
    assert "OK" in cli("check", str(path)).stdout
    json_path = tmp_path / "review.json"  # JSON too
    json_path.write_text(json.dumps({**REVIEW, "budgets": budgets}))
    assert load_app(str(json_path))[0].budgets == loaded.budgets  # type: ignore[union-attr]
    # Wrong budgets: `check` lists the problems (exit 1), --app refuses the file.
    for wrong, code in [
        ([{"event": "nope", "tokens": 1}], "unknown_event"),
        ([{"event": "over_budget", "tokens": 0}], "invalid_budget"),
        ([{"event": "over_budget", "tokens": 1, "states": ["nowhere"]}], "unknown_budget_state"),
        ([{"event": "over_budget", "tokens": 1, "per": "day"}], "invalid_budget"),
        ([{"event": "over_budget", "tokenz": 1}], "invalid_budget"),
        ([{"tokens": 1}], "invalid_budget"),
        ({"event": "over_budget"}, "invalid"),
    ]:
        path.write_text(yaml.safe_dump({**REVIEW, "budgets": wrong}))
        checked = cli.json("check", str(path), code=1)
        assert checked["ok"] is False
        assert code in {p["code"] for p in checked["problems"]}, (wrong, checked)
        cli("--app", str(path), "list", code=1)

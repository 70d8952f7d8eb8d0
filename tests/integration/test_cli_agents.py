"""``statewright show`` of a workflow whose agents called a model (its usage line, and
``usage`` in ``--json``), and ``statewright conversation`` (the agents' messages in order; the
CLI is a local operator: nothing is redacted)."""

from __future__ import annotations

from pathlib import Path

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

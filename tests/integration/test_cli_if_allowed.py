"""``statewright send --if-allowed`` (a late event is not applied: exit 0), and a definition
file's ``redact`` list in ``--app``."""

from __future__ import annotations

from pathlib import Path

import yaml

from statewright.cli.loading import load_app, load_definition
from statewright.definition import dumps_yaml
from statewright.engine import WorkflowType
from tests.integration.conftest import Cli
from tests.mcp.redact_app import machine


def test_send_if_allowed_says_not_applied_and_exits_0(cli: Cli) -> None:
    cli("start", "agent_task", "--id", "t1")
    cli("send", "t1", "start")
    cli("send", "t1", "complete")
    out = cli("send", "t1", "complete", "--if-allowed").stdout
    assert "not applied" in out and "done" in out and "terminal state" in out
    row = cli.json("send", "t1", "complete", "--if-allowed", "--idempotency-key", "k-1")
    assert (row["applied"], row["state"], row["version"]) == (False, "done", 3)
    assert row["reason"] == "terminal state" and row["allowed_events"] == []
    # Applied: the usual output; without the flag, still refused (exit 2).
    cli("start", "agent_task", "--id", "t2")
    assert "moved" in cli("send", "t2", "start", "--if-allowed").stdout
    assert "illegal_transition" in cli.error("send", "t1", "complete", code=2)
    assert "unknown event" in cli.error("send", "t1", "nope", "--if-allowed", code=2)


def test_a_definition_file_may_list_its_redact_keys(cli: Cli, tmp_path: Path) -> None:
    doc = yaml.safe_load(dumps_yaml(machine("payment")))
    path = tmp_path / "payment.yaml"
    path.write_text(yaml.safe_dump({**doc, "redact": ["stripe_secret_ref", "customer.card"]}))
    [loaded] = load_app(str(path))
    assert isinstance(loaded, WorkflowType)
    assert loaded.redact == ("stripe_secret_ref", "customer.card")
    assert load_definition(path)[0] == loaded.machine
    # The file still checks and draws; without the list it stays a bare machine.
    cli("check", str(path))
    plain = tmp_path / "plain.yaml"
    plain.write_text(dumps_yaml(machine("payment")))
    assert load_definition(plain)[1] == ()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**doc, "redact": "stripe_secret_ref"}))
    assert "redact" in cli.error("--app", str(bad), "list", code=2)

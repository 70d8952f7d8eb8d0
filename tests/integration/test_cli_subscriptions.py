"""``statewright subscriptions ...``, in-process on a temporary SQLite file: add, list, show,
pause, resume, remove, apply a type's file; bad input exits 2 and writes nothing; a missing
one exits 1; the secret and header values never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Cli

TYPE_FILE = """
name: shop
states:
  - {name: placed, initial: true}
  - {name: failed, terminal: true}
events:
  - {name: fail}
transitions:
  - {event: fail, source: placed, target: failed}
subscriptions:
  - name: shop-failures
    url: https://hooks.example.com/shop
    secret_env: SHOP_HOOK_SECRET
    filter: {states: [failed]}
"""


def test_add_list_show_pause_resume_remove(cli: Cli) -> None:
    made = cli.json(
        "subscriptions",
        "add",
        "failures",
        "--url",
        "https://hooks.example.com/x",
        "--state",
        "failed",
        "--type",
        "order",
        "--secret",
        "s3cret",
        "--headers",
        '{"Authorization": "Bearer tok"}',
    )
    assert made["filter"] == {"types": ["order"], "states": ["failed"]}
    assert made["signed"] is True and made["headers"] == ["Authorization"]
    listed = cli("subscriptions", "list").stdout
    assert "failures" in listed and "s3cret" not in listed and "tok" not in listed
    assert cli.json("subscriptions", "pause", "failures")["paused"] is True
    assert cli.json("subscriptions", "resume", "failures")["paused"] is False
    assert cli.json("subscriptions", "show", "failures")["url"] == "https://hooks.example.com/x"
    assert "removed" in cli("subscriptions", "remove", "failures").stdout
    assert cli.error("subscriptions", "remove", "failures", code=1).startswith(
        "error[subscription_not_found]"
    )


def test_bad_input_exits_2_and_writes_nothing(cli: Cli) -> None:
    assert "invalid_subscription" in cli.error(
        "subscriptions", "add", "x", "--url", "ftp://a", code=2
    )
    assert "invalid_subscription" in cli.error("subscriptions", "add", "x", code=2)
    assert cli.json("subscriptions", "list") == []


def test_apply_a_type_file(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(TYPE_FILE)
    monkeypatch.setenv("SHOP_HOOK_SECRET", "s3")
    [made] = cli.json("subscriptions", "apply", str(path))
    assert made["name"] == "shop-failures" and made["signed"] is True
    assert made["filter"] == {"types": ["shop"], "states": ["failed"]}

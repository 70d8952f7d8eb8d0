"""Redaction (statewright.redaction) and summaries (statewright.views.summary_of)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from statewright import WorkflowType
from statewright.errors import DefinitionError
from statewright.redaction import MASK, NO_REDACTION, Redactor
from statewright.views import MAX_SUMMARY_TEXT, default_summary, summary_of
from tests.mcp.redact_app import CARD, SECRET_REF, context, machine

PATHS = ("stripe_secret_ref", "customer.card.number", "items.secret")


def test_paths_are_removed_through_objects_and_lists_and_values_masked() -> None:
    ctx = {
        **context(),
        "items": [{"secret": "s3cr3t-1", "sku": "A"}, {"sku": "B"}, "text"],
        "note": f"card {CARD} and ref {SECRET_REF}",
        "customer.card.number": "dotted-key-value",
    }
    red = Redactor(PATHS, ctx)
    out = red.value(ctx)
    assert "stripe_secret_ref" not in out
    assert out["customer"]["card"] == {"exp": "12/30"}
    assert out["items"] == [{"sku": "A"}, {"sku": "B"}, "text"]
    assert "customer.card.number" not in out  # a key holding the dotted path itself
    assert out["note"] == f"card {MASK} and ref {MASK}"
    assert red.text(f"declined: {CARD}") == f"declined: {MASK}"
    assert red.text("s3cr3t-1 and dotted-key-value") == f"{MASK} and {MASK}"
    # A copy: the context itself is untouched.
    assert ctx["customer"]["card"]["number"] == CARD


def test_short_and_numeric_values() -> None:
    red = Redactor(("pin", "card"), {"pin": "12", "card": 4242424242424242})
    assert red.value({"pin": "12", "n": "12"}) == {"n": "12"}  # too short to mask elsewhere
    assert red.text("card 4242424242424242") == f"card {MASK}"


def test_values_learnt_from_other_sources_are_masked() -> None:
    red = Redactor(("token",), {})
    assert red.text("tok-123456") == "tok-123456"
    red.learn([{"token": "tok-123456"}], None, "x")
    assert red.text("used tok-123456") == f"used {MASK}"


def test_nothing_to_redact_is_the_same_value() -> None:
    value = {"a": [1, {"b": "c"}]}
    assert NO_REDACTION.value(value) is value
    assert not NO_REDACTION.active


def test_deep_values_do_not_hit_the_recursion_limit() -> None:
    deep: Any = "echo deep-secret"
    for _ in range(5_000):
        deep = {"x": [deep]}
    ctx = {"secret": "deep-secret", "blob": deep}
    red = Redactor(("secret", "blob.x.secret"), ctx)
    out = red.value(ctx)
    assert "secret" not in out
    node = out["blob"]
    for _ in range(5_000):
        node = node["x"][0]
    assert node == f"echo {MASK}"


def test_the_default_summary_hides_underscore_and_redacted_keys() -> None:
    red = Redactor(PATHS, context())
    summary = default_summary(context(), red)
    assert set(summary) == {"amount", "currency", "customer"}
    assert summary_of("payment", context(), None, red).text is None


def summarize_with(hook: Any, caplog: pytest.LogCaptureFixture) -> tuple[Any, Any, list[str]]:
    red = Redactor(PATHS, context())
    with caplog.at_level(logging.DEBUG, logger="statewright.views"):
        s = summary_of("t", context(), hook, red)
    return s.text, s.data, [r.getMessage() for r in caplog.records]


def test_a_hook_gives_text_data_or_both(caplog: pytest.LogCaptureFixture) -> None:
    text, data, logged = summarize_with(lambda c: "short", caplog)
    assert text == "short" and set(data) == {"amount", "currency", "customer"}
    text, data, _ = summarize_with(lambda c: {"n": 1}, caplog)
    assert text is None and data == {"n": 1}
    text, data, _ = summarize_with(lambda c: (f"ref {SECRET_REF}", {"ref": SECRET_REF}), caplog)
    assert text == f"ref {MASK}" and data == {"ref": MASK}  # masked even if the hook leaks
    seen: list[Mapping[str, Any]] = []

    def keep(context: Mapping[str, Any]) -> str:
        seen.append(context)
        return "x"

    summarize_with(keep, caplog)
    assert "stripe_secret_ref" not in seen[0] and "_internal" in seen[0]
    assert not logged


@pytest.mark.parametrize(
    "hook",
    [
        lambda c: 1 / 0,
        lambda c: 42,
        lambda c: "x" * (MAX_SUMMARY_TEXT + 1),
        lambda c: {"big": "x" * 10_000},
        lambda c: {"obj": object()},
        lambda c: {"nan": float("nan")},
        lambda c: (1, {}),
        lambda c: ("a", "b"),
    ],
)
def test_a_broken_hook_falls_back_and_is_logged(
    hook: Any, caplog: pytest.LogCaptureFixture
) -> None:
    text, data, logged = summarize_with(hook, caplog)
    assert text is None and set(data) == {"amount", "currency", "customer"}
    assert logged == ["summary hook failed: the default summary is shown"]


def test_an_async_hook_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    async def hook(c: Mapping[str, Any]) -> str:
        return "never"

    text, _, logged = summarize_with(hook, caplog)
    assert text is None and logged


def test_the_type_checks_its_redact_list_and_summary() -> None:
    assert WorkflowType(machine("p"), redact=["a", "b.c"]).redact == ("a", "b.c")  # type: ignore[arg-type]
    for bad in ("secret", ("",), ("a..b",), (3,)):
        with pytest.raises(DefinitionError) as exc:
            WorkflowType(machine("p"), redact=bad)  # type: ignore[arg-type]
        assert exc.value.problems[0].code == "invalid_redact"
    with pytest.raises(DefinitionError):
        WorkflowType(machine("p"), summary="not callable")  # type: ignore[arg-type]

"""Every runnable ``examples/*.py`` runs (its ``main()``) and ends the way its story says.

Runnable examples are those with a ``main()``; the others (``fake_services.py``) are
helpers they import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from statewright.engine import WorkflowType
from tests.integration.conftest import EXAMPLES

EXPECTED: dict[str, dict[str, str]] = {
    "order_fulfilment": {
        "order-1001": "closed", "order-1002": "closed", "order-1003": "refunded",
        "order-1004": "cancelled", "order-1005": "cancelled",
    },
    "refund_approval": {
        "refund-small": "done", "refund-approved": "done", "refund-denied": "rejected",
        "refund-timeout": "failed", "refund-huge": "rejected", "refund-invalid": "rejected",
    },
    "mcp_agent": {"order-7001": "delivered"},
    "refund_agent": {"refund-agent-1": "done"},
}  # fmt: skip


RUNNABLE = sorted(p for p in EXAMPLES.glob("*.py") if "\ndef main(" in p.read_text())


@pytest.fixture(autouse=True)
def examples_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # As for `python examples/x.py`: an example may import its sibling helpers.
    monkeypatch.syspath_prepend(str(EXAMPLES))


def load(path: Path) -> ModuleType:
    name = f"_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.stem)
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load(path)
    assert all(isinstance(t, WorkflowType) for t in module.TYPES)
    result = module.main()
    assert result == EXPECTED.get(path.stem, result)
    assert capsys.readouterr().out


def test_every_example_has_expectations() -> None:
    assert {p.stem for p in RUNNABLE} == set(EXPECTED)


def test_orders_are_charged_once_and_cancelled_ones_never(
    capsys: pytest.CaptureFixture[str],
) -> None:
    load(EXAMPLES / "order_fulfilment.py").main()
    out = capsys.readouterr().out
    assert "refused: event 'cancel' is not allowed in state 'delivered'" in out
    assert "order-1004: cancelled (after 'cancel' by worker:" in out
    assert "amount 950000 is over the card limit" in out
    charged = [line for line in out.splitlines() if line.startswith("charged ")]
    assert [line.split()[1] for line in charged] == [
        "order-1001:capture:",
        "order-1002:capture:",
        "order-1003:capture:",
    ]
    assert "charged order-1001:capture: 2599 cents (2 request(s), one charge)" in out


def test_refunds_pause_for_approval_and_pay_out_only_when_allowed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    load(EXAMPLES / "refund_approval.py").main()
    out = capsys.readouterr().out
    assert "paused for a manager: refund-approved, refund-denied, refund-timeout" in out
    assert "refused: event 'paid_out' is not allowed in state 'awaiting_approval'" in out
    assert (
        "refund-timeout: failed  (validating -> checking_policy -> awaiting_approval -> "
        "awaiting_approval -> failed)"
    ) in out
    paid = [line.split()[2] for line in out.splitlines() if line.startswith("paid out ")]
    assert paid == ["refund-approved:payout:", "refund-small:payout:"]


def test_the_refund_agent_resumes_mid_thought_and_pays_out_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Its worker is SIGKILLed while the model thinks about its 3rd answer: the next worker
    # gets answers 1 and 2 from the ledger and asks only the 3rd again; the model's try at
    # approving the refund itself never moves it; a manager's approval pays out once.
    load(EXAMPLES / "refund_agent.py").main()
    out = capsys.readouterr().out
    assert "model calls, in order: [1, 2, 3, 3, 4]" in out
    assert "refund-agent-1: paused; allowed now: approval_granted, approval_denied" in out
    assert 'assistant: approval_granted({"approver": "the model itself"})' in out
    assert "Unknown tool name: 'approval_granted'" in out
    assert "refund-agent-1: done  (planned -> running -> paused -> running -> done)" in out
    assert [line for line in out.splitlines() if line.startswith("paid out ")] == [
        "paid out refund-agent-1:payout: 8900 cents"
    ]

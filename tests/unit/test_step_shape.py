"""Metric labels name a kind of step, not each call of it: the visit and call numbers that
agents, waits and per-visit steps put in their names are dropped (a label per visit would
grow without end and push every later step into ``unknown``)."""

from __future__ import annotations

import pytest

from statewright.observability.metrics import step_shape


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("charge", "charge"),
        ("undo.charge", "undo.charge"),
        ("reviewer.v12.model.3", "reviewer.model"),
        ("reviewer.v12.tool.0-1.read_order", "reviewer.tool.read_order"),
        ("agent.v1.tool.call_Xy7.lookup", "agent.tool.lookup"),
        ("$wait.v4.0", "$wait"),
        ("$sleep.v2.1", "$sleep"),
        ("ask_approver_v5", "ask_approver"),
        ("v2", "v2"),
        ("tool.x", "tool.x"),
        ("order.12x", "order.12x"),
    ],
)
def test_step_shape(name: str, shape: str) -> None:
    assert step_shape(name) == shape

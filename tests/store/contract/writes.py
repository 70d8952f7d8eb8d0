"""What the contract tests write: a new workflow, a transition, a deferral (each with the
defaults the tests share)."""

from __future__ import annotations

from statewright.types import DeferWrite, NewWorkflow, TransitionWrite

T0 = 1_800_000_000.0


def new(wid: str = "w1", **kw: object) -> NewWorkflow:
    base: dict[str, object] = {
        "id": wid,
        "type": "t",
        "machine_version": 1,
        "state": "a",
        "context": {"n": 1},
        "actor": "tester",
        "at": T0,
    }
    base.update(kw)
    return NewWorkflow(**base)  # type: ignore[arg-type]


def defer(wid: str, expected: int, **kw: object) -> DeferWrite:
    base: dict[str, object] = {"workflow_id": wid, "expected_version": expected, "at": T0}
    base.setdefault("attempts", 0)
    base.update(kw)
    return DeferWrite(**base)  # type: ignore[arg-type]


def move(wid: str, expected: int, to: str = "b", **kw: object) -> TransitionWrite:
    base: dict[str, object] = {
        "workflow_id": wid,
        "expected_version": expected,
        "from_state": "a",
        "to_state": to,
        "event": "go",
        "payload": {"p": expected},
        "actor": "tester",
        "at": T0 + expected,
        "context": {"n": expected + 1},
        "context_patch": {"n": expected + 1},
    }
    base.update(kw)
    return TransitionWrite(**base)  # type: ignore[arg-type]

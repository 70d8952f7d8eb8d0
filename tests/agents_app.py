"""An app (``--app tests/agents_app.py``) whose ``triage`` type has an agent-like handler:
two model calls recorded as usage envelopes (:mod:`statewright.agents.usage`), the first
reading the customer's card aloud (the type redacts ``card``), then an ordinary step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statewright import MachineBuilder, Run, WorkflowType
from statewright.agents.usage import Usage, envelope

CARD = "4111-1111-1111-1111"


def _returns(value: Any) -> Callable[[Any], Any]:
    return lambda key: value


def agent_type() -> WorkflowType:
    """``triage``: one agent turn that reads the card aloud (two model calls, two models),
    then ``done``."""
    machine = (
        MachineBuilder("triage")
        .state("reading", initial=True)
        .state("done", terminal=True)
        .event("read")
        .transition("read", "reading", "done")
        .build()
    )

    async def reading(run: Run) -> str:
        visit = run.workflow.version
        card = run.context["card"]
        calls = [
            (Usage("big", 120, 30, 0.004), f"the card is {card}", "lookup"),
            (Usage("small", 40, 10, None), "refund it", None),
        ]
        for i, (u, said, tool) in enumerate(calls):
            asked: dict[str, Any] = {"role": "user", "content": f"question {i}"}
            answer: dict[str, Any] = {"role": "assistant", "content": said}
            if tool:
                answer["tool_calls"] = [{"id": "c1", "name": tool, "args": {"card": card}}]
            env = envelope(
                u, agent="triage", state=run.state, visit=visit, response={"n": i},
                messages=[asked, answer],
            )  # fmt: skip
            await run.step(f"triage.v{visit}.model.{i}", _returns(env))
        await run.step("charge", lambda key: {"ok": True})
        return "read"

    return WorkflowType(machine, {"reading": reading}, redact=("card",))


TYPES = [agent_type()]

"""The refund agent of the product story, written with PydanticAI, inside the agent task
lifecycle: it reads the order, checks the policy and may only ask for approval.

planned -> running -> paused -> (a manager approves) -> running -> done. In its first visit
of ``running`` a PydanticAI agent looks the order up and checks the refund policy (two tools),
then moves the workflow the only way it is offered: ``request_approval``. The model tries to
approve the refund itself first; ``approval_granted`` is an approver's event, never offered to
an agent, so PydanticAI answers it as an unknown tool and the workflow does not move. A
manager approves (on the dashboard, or ``statewright approve``); back in ``running`` the
handler pays the refund out in one step, and the task is done.

The model is offline: a scripted PydanticAI ``FunctionModel`` that answers in four turns.
``main()`` runs the agent in a worker process and SIGKILLs it while the model is thinking
about its third answer; a second worker finds the two answers it had already received in the
step ledger (the model is not asked for them again) and carries on from there.

Run it: ``python examples/refund_agent.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fake_services import FakePaymentsAPI
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from statewright import Engine, Next, Run, SQLiteStore, Worker, WorkflowType
from statewright.access import LOCAL, Access
from statewright.agents.pydantic_ai import StatewrightAgent, ToolOptions
from statewright.engine import agent_task_type
from statewright.engine.budgets import Budget

HERE = Path(__file__).resolve()
REFUND_ID = "refund-agent-1"
REQUEST = {"order_id": "order-1003", "reason": "arrived damaged"}
SAMPLE_REQUESTS = {REFUND_ID: REQUEST}
ORDERS = {
    "order-1003": {"amount_cents": 8_900, "customer": "ada@example.com", "delivered": True},
}
AUTO_APPROVE_UNDER_CENTS = 5_000
"""The policy: smaller refunds would not need a manager (this one does)."""


# -- the model (offline, scripted) and the agent ------------------------------------------------


class ScriptedModel:
    """Answers like a model that reads the order, checks the policy, tries to approve the
    refund itself, and then asks for approval. Every call is appended to ``calls`` (a file,
    so the parent process can count them); with ``slow_at`` it "thinks" for a long time
    before that answer (long enough to be killed)."""

    def __init__(self, calls: Path | None = None, slow_at: int | None = None) -> None:
        self.calls = calls
        self.slow_at = slow_at

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if self.calls is not None:
            with self.calls.open("a") as f:
                f.write(f"{turn}\n")
        if turn == self.slow_at:
            await asyncio.sleep(3600)  # mid-thought: the worker is killed here
        returned = [
            p.content
            for m in messages
            for p in getattr(m, "parts", ())
            if isinstance(p, ToolReturnPart) and isinstance(p.content, dict)
        ]
        if turn == 0:
            call = ToolCallPart("read_order", {"order_id": REQUEST["order_id"]})
        elif turn == 1:
            call = ToolCallPart("check_policy", {"amount_cents": returned[-1]["amount_cents"]})
        elif turn == 2:  # not offered to an agent: PydanticAI answers "unknown tool"
            call = ToolCallPart("approval_granted", {"approver": "the model itself"})
        else:
            policy = returned[-1]
            call = ToolCallPart(
                "request_approval",
                {"amount_cents": policy["amount_cents"], "why": policy["rule"]},
            )
        return ModelResponse(parts=[call], model_name="scripted-refund-model")


def refund_agent(model: ScriptedModel) -> StatewrightAgent:
    agent: Agent[None, str] = Agent(
        FunctionModel(model, model_name="scripted-refund-model"),
        instructions="You review refund requests. Read the order, apply the policy, and "
        "ask a manager to approve the refund.",
    )

    @agent.tool_plain
    def read_order(order_id: str) -> dict[str, Any]:
        """The order as the shop has it."""
        return {"order_id": order_id, **ORDERS[order_id]}

    @agent.tool_plain
    def check_policy(amount_cents: int) -> dict[str, Any]:
        """What the refund policy says about this amount."""
        auto = amount_cents < AUTO_APPROVE_UNDER_CENTS
        rule = "under the auto-approve limit" if auto else "a manager approves refunds this big"
        return {"amount_cents": amount_cents, "needs_approval": not auto, "rule": rule}

    return StatewrightAgent(
        agent,
        name="reviewer",
        roles=("agent",),
        events=("request_approval",),  # the agent's only way out of `running`
        tools={
            "read_order": ToolOptions(safe_to_repeat=True),
            "check_policy": ToolOptions(safe_to_repeat=True),
        },
    )


def refund_agent_type(
    payments: FakePaymentsAPI | None = None, model: ScriptedModel | None = None
) -> WorkflowType:
    pay = payments or FakePaymentsAPI()
    reviewer = refund_agent(model or ScriptedModel())

    async def planned(run: Run) -> Next:
        return Next("start")

    async def running(run: Run) -> Next:
        if "approval_requested" in run.context:
            # Back in `running`: only `approval_granted` leads here from `paused`.
            paid = await run.step(
                "payout",
                lambda key: pay.payout(key, run.context["approval_requested"]["amount_cents"]),
                reconcile=pay.lookup,
            )
            return Next("complete", paid, context=paid)
        chosen = await reviewer.run(
            run, f"Refund request {run.id}: {json.dumps(run.context, sort_keys=True)}"
        )
        return Next(chosen.event, chosen.payload, context={"approval_requested": chosen.payload})

    wtype = agent_task_type(
        {"planned": planned, "running": running},
        name="refund_agent",
        approval_reminder=None,
        # A worker that dies mid-thought: the next one runs the handler again in the same
        # visit of `running` (the lifecycle's default sends it through `retrying`, a new
        # visit whose agent starts afresh).
        recovery={"running": "rerun"},
    )
    # A model that loops is handed to a person instead of being asked a ninth time.
    budget = Budget("request_approval", model_calls=8, per="visit", states=("running",))
    return dataclasses.replace(wtype, budgets=(budget,))


TYPES = [refund_agent_type()]


# -- the worker process (killed mid-thought) ----------------------------------------------------


async def work(db: str, calls: Path, slow_at: int | None, until: str) -> None:
    """Run a worker until the refund is in ``until`` (or until killed)."""
    wtype = refund_agent_type(model=ScriptedModel(calls, slow_at))
    async with Engine(SQLiteStore(db), [wtype]) as engine:
        worker = Worker(engine, concurrency=1, lease_seconds=1.0, poll_interval=0.05)
        task = asyncio.create_task(worker.run())
        while (await engine.get(REFUND_ID)).state != until:
            await asyncio.sleep(0.05)
        worker.stop()
        await task


def spawn(db: str, calls: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(HERE), "--worker", db, "--calls", str(calls), *extra],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what}")
        time.sleep(0.05)


# -- the story ----------------------------------------------------------------------------------


def main() -> dict[str, str]:
    payments = FakePaymentsAPI()
    with tempfile.TemporaryDirectory() as tmp:
        db, calls = str(Path(tmp, "refund_agent.db")), Path(tmp, "model_calls.txt")
        calls.touch()
        engine = Engine(SQLiteStore(db), [refund_agent_type(payments)])

        async def start() -> None:
            async with engine:
                await engine.start("refund_agent", REQUEST, workflow_id=REFUND_ID, actor="support")

        asyncio.run(start())
        first = spawn(db, calls, "--slow-at", "2", "--until", "done")
        wait_for(lambda: calls.read_text().split() == ["0", "1", "2"], "the third model call")
        first.send_signal(signal.SIGKILL)
        first.wait()
        print("worker 1 killed while the model was thinking about its 3rd answer")
        second = spawn(db, calls, "--until", "paused")
        if second.wait(timeout=120) != 0:
            raise RuntimeError("the second worker failed")
        asked = [int(n) + 1 for n in calls.read_text().split()]
        print(f"model calls, in order: {asked} (answers 1 and 2 came back from the ledger)")
        print("the model tried approval_granted: not offered to an agent, refused as unknown")

        async def finish() -> dict[str, str]:
            async with engine:
                row = await engine.get(REFUND_ID)
                allowed = ", ".join(await engine.allowed_events(REFUND_ID))
                print(f"{REFUND_ID}: {row.state}; allowed now: {allowed}")
                print("the conversation, as kept with the workflow:")
                for m in await Access(engine, LOCAL).conversation(REFUND_ID):
                    calls = [
                        f"{c['name']}({json.dumps(c['args'])})" for c in m.get("tool_calls", ())
                    ]
                    print(f"  {m['role']}: {m.get('content') or ', '.join(calls)}")
                await engine.approve(REFUND_ID, approver="maria", comment="damaged in transit")
                await Worker(engine).run_until_idle()
                row = await engine.get(REFUND_ID)
                trail = " -> ".join(t.to_state for t in await engine.history(REFUND_ID))
                print(f"{REFUND_ID}: {row.state}  ({trail})")
                return {REFUND_ID: row.state}

        states = asyncio.run(finish())
        for p in payments.payouts():
            print(f"paid out {p['key']}: {p['amount_cents']} cents")
        return states


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", metavar="DB")
    parser.add_argument("--calls", type=Path)
    parser.add_argument("--slow-at", type=int)
    parser.add_argument("--until", default="done")
    args = parser.parse_args()
    if args.worker:
        asyncio.run(work(args.worker, args.calls, args.slow_at, args.until))
    else:
        main()

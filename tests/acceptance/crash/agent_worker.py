"""A worker of the agent crash test (``tests/acceptance/test_agent_crash.py``), forked by a
fork server (:func:`child_main`).

Each workflow is a refund review: in ``reviewing`` a PydanticAI agent (``run_agent``) runs a
scripted ``FunctionModel`` of :data:`MODEL_CALLS` responses asking for :data:`TOOL_CALLS`
tool calls, one event the guard refuses (``request_approval`` over the limit), one event
never offered (``approve``, an approval) and at last a legal ``request_approval``, which
moves the workflow to ``submitted``. The model appends ``<workflow> <ordinal>`` to
``--model-log`` on every call it is asked (outside the workflow's store), thinks a moment, and
records the response it gives at the :class:`~tests.acceptance.crash.gateway.ModelGateway`
(``--gateway``) under the model step's key (``current_key()``) as it answers; the agent's
``model_reconcile`` asks the gateway, so a call cut after it answered is not asked again. The
tools' effects go to a
:class:`~tests.acceptance.crash.app.Service` in ``count`` mode (no deduplication), keyed by
the tool step's key (``current_key()``), and the tools reconcile against it (``lookup``).

With ``--die`` the process SIGKILLs itself now and then (after logging a line to
``--kill-log``): in a model call before it answered (``model_asked``) or after
(``model_answered``), in a tool before or after its effect.
Runs ``Worker.run`` (recovery first) until every workflow is terminal; exit 0 then, 4 as
soon as one is parked (nothing should be).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from statewright import (
    Engine,
    MachineBuilder,
    Next,
    RetryPolicy,
    Run,
    Worker,
    WorkflowType,
    store_from_url,
)
from statewright.agents.core import current_key
from statewright.agents.pydantic_ai import ToolOptions, run_agent
from statewright.definition.machine import Machine
from statewright.types import WorkflowFilter
from tests.acceptance.crash.app import Service, append_line
from tests.acceptance.crash.gateway import ModelGateway

TYPE = "agent_refund"
EXIT_PARKED = 4
TOOLS = ("lookup_order", "check_policy", "add_note", "notify_customer")
SCRIPT: list[list[tuple[str, dict[str, Any]] | str]] = [
    [("lookup_order", {})],
    [("check_policy", {}), ("add_note", {"text": "within policy"})],
    [("request_approval", {"amount": 10_000})],  # refused: over the limit (the guard)
    [("approve", {})],  # not offered (an approval event): an unknown tool
    [("notify_customer", {"text": "a person will review your refund"})],
    [("request_approval", {"amount": 50})],  # accepted: the run ends
    ["never asked"],
]
MODEL_CALLS = 6
TOOL_CALLS = len(TOOLS)
PATH = ("reviewing", "submitted")


def machine() -> Machine:
    b = MachineBuilder(TYPE)
    b.state("reviewing", initial=True).state("submitted", terminal=True)
    b.state("paid", terminal=True)
    b.event(
        "request_approval",
        description="Ask a person to approve the refund of `amount`.",
        payload_schema={
            "type": "object",
            "properties": {"amount": {"type": "number", "minimum": 0}},
            "required": ["amount"],
        },
        roles=["agent"],
    )
    b.event("approve", approval=True)
    b.transition(
        "request_approval", "reviewing", "submitted", guard="payload.amount <= context.limit"
    )
    b.transition("approve", "reviewing", "paid")
    return b.build()


def workflow_of(messages: list[ModelMessage]) -> str:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    for part in first.parts:
        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
            return part.content.rsplit(" ", 1)[-1]
    raise AssertionError("no prompt naming the workflow")


def dump(response: ModelResponse) -> Any:
    [dumped] = ModelMessagesTypeAdapter.dump_python([response], mode="json")
    return dumped


def load(data: Any) -> ModelResponse:
    [response] = ModelMessagesTypeAdapter.validate_python([data])
    assert isinstance(response, ModelResponse)
    return response


def make_type(
    service: Service,
    model_log: Path,
    die: Callable[[str], None],
    rng: random.Random,
    gateway: ModelGateway,
) -> WorkflowType:
    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        key = current_key()
        assert key is not None and key.endswith(f".model.{n}"), key
        append_line(model_log, f"{workflow_of(messages)} {n}")
        await asyncio.sleep(rng.uniform(0.0, 0.02))  # a model thinks (a window for a kill)
        die("model_asked")  # killed before it answered: no response, asked again
        parts: list[Any] = []
        for i, item in enumerate(SCRIPT[n]):
            if isinstance(item, str):
                parts.append(TextPart(item))
            else:
                parts.append(ToolCallPart(item[0], item[1], tool_call_id=f"call-{n}-{i}"))
        response = ModelResponse(parts=parts, model_name="scripted")
        gateway.answer(key, dump(response))  # the response given, recorded as it is given
        die("model_answered")  # killed after it answered: reconciled from the gateway
        return response

    def model_reconcile(key: str) -> ModelResponse | None:
        found = gateway.recorded(key)
        return None if found is None else load(found)

    agent: Agent[None, str] = Agent(FunctionModel(respond, model_name="scripted"))

    async def effect(tool: str, payload: dict[str, Any]) -> dict[str, Any]:
        key = current_key()
        assert key is not None
        await asyncio.sleep(rng.uniform(0.0, 0.01))
        die("before_effect")
        done = service.apply(str(key), {"tool": tool, **payload}, key.fencing_token)
        die("after_effect")
        return done

    @agent.tool_plain
    async def lookup_order() -> dict[str, Any]:
        return await effect("lookup_order", {})

    @agent.tool_plain
    async def check_policy() -> dict[str, Any]:
        return await effect("check_policy", {})

    @agent.tool_plain
    async def add_note(text: str) -> dict[str, Any]:
        return await effect("add_note", {"text": text})

    @agent.tool_plain
    async def notify_customer(text: str) -> dict[str, Any]:
        return await effect("notify_customer", {"text": text})

    options = {tool: ToolOptions(reconcile=service.lookup) for tool in TOOLS}

    async def reviewing(run: Run) -> Next:
        return await run_agent(
            run,
            agent,
            f"Review the refund of {run.id}",
            tools=options,
            model_reconcile=model_reconcile,
        )

    return WorkflowType(
        machine(),
        {"reviewing": reviewing},
        retry=RetryPolicy(
            max_attempts=1000, base_delay=0.02, max_delay=0.2, jitter=0, max_total_attempts=None
        ),
        on_transient=None,
    )


async def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    kill_log = Path(args.kill_log)

    def die(point: str) -> None:
        if args.die and rng.random() < args.die:
            append_line(kill_log, f"{point} {os.getpid()}")
            os.kill(os.getpid(), signal.SIGKILL)

    service = Service(args.service, mode="count")
    gateway = ModelGateway(args.gateway, args.gateway + ".journal")
    store = store_from_url(args.db)
    engine = Engine(store, [make_type(service, Path(args.model_log), die, rng, gateway)])
    async with engine:
        Path(args.ready).write_text(str(os.getpid()))
        worker = Worker(
            engine, concurrency=args.concurrency, poll_interval=0.02, lease_seconds=30.0
        )
        task = asyncio.create_task(worker.run())
        while True:
            await asyncio.sleep(0.05)
            if task.done():
                task.result()
                raise RuntimeError("Worker.run returned although it was not stopped")
            left = await store.list_workflows(WorkflowFilter(terminal=False, limit=1000))
            if not left:
                break
            parked = {w.id: w.last_error for w in left if w.parked}
            if parked:
                print(f"parked: {parked}", file=sys.stderr)
                worker.stop()
                await task
                return EXIT_PARKED
        worker.stop()
        await task
    service.close()
    gateway.close()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tests.acceptance.crash.agent_worker")
    p.add_argument("--db", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--model-log", required=True)
    p.add_argument("--gateway", required=True, help="the model gateway's SQLite file")
    p.add_argument("--ready", required=True)
    p.add_argument("--kill-log", required=True)
    p.add_argument("--die", type=float, default=0.0, help="chance of a SIGKILL at each point")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=4)
    return p


def child_main(argv: Sequence[str]) -> int:
    return asyncio.run(run(parser().parse_args(list(argv))))


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))

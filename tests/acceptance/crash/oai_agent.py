"""The OpenAI Agents SDK agent of the agent crash test (tests/acceptance/test_oai_agent_crash.py),
its scripted model, and the worker process that runs it (forked by :class:`AgentZygote`).

One state, ``reviewing``, whose handler is :func:`run_agent` on an agent of **6 model calls and
4 tool calls**: calls 0-2 and 4 each ask for the ``charge`` tool (an effect at the crash tests'
:class:`~tests.acceptance.crash.app.Service` in ``count`` mode: it does NOT deduplicate, so
exactly once can only come from the ledger and the tool's reconcile hook, which looks the
step's key up at the service); call 3 tries ``approve``, an approval event the agent is never
offered (the SDK tells the model the tool does not exist), and ``request_approval`` with a
payload its schema refuses (a structured refusal); the workflow must never move on either.
Call 5 fires ``request_approval`` rightly, the one legal way out.

The model is offline and scripted; it appends ``<workflow> <call number> <pid>`` to a log file
(one ``write(2)``: a SIGKILL cannot tear it) every time it is asked, so the test can compare
the calls made with the ledger's attempts. It answers through the
:class:`~tests.acceptance.crash.gateway.ModelGateway`, which records the response it gives
under the model step's key (``current_key()``) as it answers; ``run_agent``'s
``model_reconcile`` asks the gateway, so a call cut after it answered is not asked again.
Service calls and model calls are bracketed by the crash app's in-flight counter and random
pauses (a model call's: one before it answers, one after), so kills from outside land inside
them.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall

from statewright import MachineBuilder, Next, Run, WorkflowType
from statewright.agents.core import current_key
from statewright.agents.openai_agents import dump_response, load_response, run_agent
from statewright.definition.machine import Machine
from tests.acceptance.crash import worker
from tests.acceptance.crash.app import Faults, Service, append_line
from tests.acceptance.crash.gateway import ModelGateway
from tests.acceptance.crash.zygote import PRELOAD, Zygote
from tests.forkserver import ForkServer

set_tracing_disabled(True)

TYPE = "oai_refund"
CHARGES = (0, 1, 2, 4)
"""The model calls that ask for the ``charge`` tool (part ``1..4``)."""
ILLEGAL = 3
"""The model call that tries ``approve`` (never offered)."""
CHOOSE = 5
MODEL_CALLS = 6
AMOUNT = 40

_WORKFLOW: contextvars.ContextVar[str] = contextvars.ContextVar("oai_crash_workflow")


def machine() -> Machine:
    b = MachineBuilder(TYPE)
    b.state("reviewing", initial=True).state("requested", terminal=True)
    b.state("paid", terminal=True).state("rejected", terminal=True)
    b.event(
        "request_approval",
        payload_schema={
            "type": "object",
            "properties": {"amount": {"type": "integer", "minimum": 0}},
            "required": ["amount"],
        },
        roles=["agent"],
    )
    b.event("approve", approval=True).event("reject", roles=["agent"])
    b.transition("request_approval", "reviewing", "requested")
    b.transition("approve", "reviewing", "paid")
    b.transition("reject", "reviewing", "rejected")
    return b.build()


def _call(n: int, name: str, args: dict[str, Any], suffix: str = "") -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{n}{suffix}",
        call_id=f"call_{n}{suffix}",
        name=name,
        arguments=json.dumps(args),
    )


def turn_of(input: str | list[Any]) -> int:
    """The call's number in the agent's run: one past the last call id its input holds."""
    if isinstance(input, str):
        return 0
    ids = [
        int(item["call_id"].split("_")[1])
        for item in input
        if isinstance(item, dict) and item.get("type") == "function_call"
    ]
    return 1 + max(ids, default=-1)


class CrashModel(Model):
    """The scripted model: logs every call it is asked, pauses around it (in flight)."""

    def __init__(self, log: str | Path, faults: Faults, gateway: ModelGateway | None) -> None:
        self.log = log
        self.faults = faults
        self.gateway = gateway

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        input = args[1]
        n = turn_of(input)
        key = current_key()
        assert key is not None and key.endswith(f".model.{n}"), key
        append_line(self.log, f"{_WORKFLOW.get()} {n} {os.getpid()}")
        with self.faults.calling():
            await self.faults.around_call()  # a kill here: no response, asked again
            if n == ILLEGAL + 1:  # both refusals came back: the model reads them, goes on
                told = {
                    i["call_id"]: i["output"]
                    for i in input
                    if isinstance(i, dict) and i.get("type") == "function_call_output"
                }
                assert "not found" in told[f"call_{ILLEGAL}"], told
                refused = json.loads(told[f"call_{ILLEGAL}_b"])
                assert (refused["accepted"], refused["error"]) == (False, "invalid_payload")
            if n in CHARGES:
                output = [_call(n, "charge", {"part": CHARGES.index(n) + 1})]
            elif n == ILLEGAL:  # an approval (never offered) and a payload the schema refuses
                output = [
                    _call(n, "approve", {}),
                    _call(n, "request_approval", {"amount": -AMOUNT}, suffix="_b"),
                ]
            else:
                output = [_call(n, "request_approval", {"amount": AMOUNT})]
            usage = Usage(requests=1, input_tokens=50 + n, output_tokens=5, total_tokens=55 + n)
            response = ModelResponse(output=list(output), usage=usage, response_id=f"resp_{n}")
            if self.gateway is not None:  # the response given, recorded as it is given
                self.gateway.answer(key, dump_response(response))
            await self.faults.around_call()  # a kill here: reconciled from the gateway
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def make_type(
    service: Service,
    faults: Faults,
    model_log: str | Path,
    gateway: ModelGateway | None = None,
) -> WorkflowType:
    """The workflow type; ``gateway``: the model gateway the model answers through and the
    agent reconciles against (None in the test's own engine, which runs no handler)."""

    @function_tool
    async def charge(part: int) -> dict[str, Any]:
        """Charge one part of the refund back to the merchant (an effect)."""
        key = current_key()
        assert key is not None
        with faults.calling():
            await faults.around_call()
            effect = service.apply(key, {"part": part}, token=key.fencing_token)
            await faults.around_call()
        return effect

    agent = Agent(
        name="refunder",
        instructions="Charge the four parts, then ask for approval.",
        tools=[charge],
        model=CrashModel(model_log, faults, gateway),
    )

    def model_reconcile(key: str) -> ModelResponse | None:
        assert gateway is not None
        found = gateway.recorded(key)
        return None if found is None else load_response(found)

    async def reviewing(run: Run) -> Next:
        _WORKFLOW.set(run.id)
        return await run_agent(
            run,
            agent,
            f"Refund {run.id}.",
            reconcilers={"charge": service.lookup},
            model_reconcile=None if gateway is None else model_reconcile,
        )

    return WorkflowType(machine(), handlers={"reviewing": reviewing})


def parser() -> argparse.ArgumentParser:
    p = worker.parser()
    p.add_argument("--model-log", required=True)
    p.add_argument("--gateway", required=True, help="the model gateway's SQLite file")
    return p


def child_main(argv: Sequence[str]) -> int:
    """A worker process of the agent crash test (forked by the zygote)."""
    import asyncio

    args = parser().parse_args(list(argv))

    def types(service: Service, faults: Faults, a: argparse.Namespace) -> list[WorkflowType]:
        gateway = ModelGateway(a.gateway, a.gateway + ".journal")
        return [make_type(service, faults, a.model_log, gateway)]

    return asyncio.run(worker.run(args, types))


def prepare() -> None:
    parser().parse_args(
        [
            *("--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"),
            *("--model-log", "x", "--gateway", "x"),
        ]
    )


class AgentZygote(Zygote):
    """Forks the agent crash test's workers, with statewright, the stores and the SDK imported
    once."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        ForkServer.__init__(  # the crash tests' zygote, with this module's worker as target
            self,
            log,
            "tests.acceptance.crash.oai_agent:child_main",
            preload=PRELOAD,
            prepare="tests.acceptance.crash.oai_agent:prepare",
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            name="agent zygote",
            timeout=timeout,
        )

"""The crash test of waits that free the worker (issue 27, item 3): a workflow doing
step -> sleep -> step -> wait_input -> step, its steps calling a service that does not
deduplicate; run by worker processes forked by :class:`WaitsZygote` and killed at random.

Each suspension of a ``wait_input`` or ``sleep`` is noted in a marker file (one line each), so
the test can tell that the workflows did suspend (the test is not vacuous).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from statewright import MachineBuilder, Next, Run, WorkflowType
from statewright.engine.suspend import Suspended
from tests.acceptance.crash.app import Faults, Service, amount_of, append_line
from tests.acceptance.crash.worker import parser, run
from tests.acceptance.crash.zygote import PRELOAD, Zygote
from tests.forkserver import ForkServer

TYPE = "waits"
STEPS = ("first", "second", "third")
INPUT = "go"
SLEEP = 0.2
"""Seconds of the durable sleep between the first and the second step."""


def machine() -> Any:
    return (
        MachineBuilder(TYPE)
        .state("working", initial=True)
        .state("done", terminal=True)
        .state("failed", terminal=True)
        .event("finish")
        .event("fatal_error")
        .transition("finish", "working", "done")
        .transition("fatal_error", "working", "failed")
        .build()
    )


def make_type(service: Service, faults: Faults, marks: Path | None = None) -> WorkflowType:
    async def step(run: Run, name: str) -> dict[str, Any]:
        faults.hit("before_step", run.id, name)

        async def action(key: Any) -> dict[str, Any]:
            faults.hit("before_effect", run.id, name)
            with faults.calling():
                await faults.around_call()
                effect = service.apply(key, {"step": name, "amount": amount_of(key)})
                await faults.around_call()
            faults.hit("during_step", run.id, name)
            return effect

        result: dict[str, Any] = await run.step(name, action, reconcile=service.lookup)
        faults.hit("after_step", run.id, name)
        await faults.jitter()
        return result

    def suspending(run: Run, what: str) -> None:
        if marks is not None:
            append_line(marks, f"{what} {run.id}")

    async def working(run: Run) -> Next:
        first = await step(run, "first")
        try:
            await run.sleep(SLEEP)
        except Suspended:
            suspending(run, "sleep")
            raise
        second = await step(run, "second")
        try:
            item = await run.wait_input(INPUT)
        except Suspended:
            suspending(run, "wait")
            raise
        assert item is not None
        third = await step(run, "third")
        ids = [r["effect_id"] for r in (first, second, third)]
        return Next("finish", context={"effects": ids, "input": item.id})

    return WorkflowType(machine(), {"working": working})


def child_main(argv: Sequence[str]) -> int:
    """A worker process of the waits crash test (the marker file is ``<kill log>.waits``)."""
    args = parser().parse_args(list(argv))

    def types(service: Service, faults: Faults, a: argparse.Namespace) -> list[WorkflowType]:
        return [make_type(service, faults, Path(a.kill_log + ".waits"))]

    return asyncio.run(run(args, types))


def prepare() -> None:
    parser().parse_args(["--db", "x", "--service", "x", "--ready", "x", "--kill-log", "x"])


class WaitsZygote(Zygote):
    """The crash zygote (:class:`Zygote`), forking workers of this module's type."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        ForkServer.__init__(
            self,
            log,
            "tests.acceptance.crash.waits:child_main",
            preload=PRELOAD,
            prepare="tests.acceptance.crash.waits:prepare",
            env={"PYTHONDONTWRITEBYTECODE": "1"},
            name="waits-zygote",
            timeout=timeout,
        )

"""A workflow type with a slow handler, for the worker signal tests (``--app`` this file).

The handler reports progress, then runs one step that sleeps ``SLOW_SECONDS`` (environment,
default 1.5) and finishes with ``{"slept": seconds}`` in the context.
"""

from __future__ import annotations

import asyncio
import os

from statewright import MachineBuilder, Next, Run, WorkflowType

SECONDS = float(os.environ.get("SLOW_SECONDS", "1.5"))

MACHINE = (
    MachineBuilder("slow")
    .state("working", initial=True)
    .state("done", terminal=True)
    .state("cancelled", terminal=True)
    .event("finish")
    .event("cancel")
    .transition("finish", "working", "done")
    .transition("cancel", "working", "cancelled")
    .build()
)


async def _sleep(key: str) -> float:
    await asyncio.sleep(SECONDS)
    return SECONDS


async def work(run: Run) -> Next:
    await run.progress(stage="sleeping", seconds=SECONDS)
    run.save_partial(started=True)
    slept = await run.step("sleep", _sleep)
    return Next("finish", context={"slept": slept})


TYPES = [WorkflowType(MACHINE, {"working": work})]

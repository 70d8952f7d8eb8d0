"""A workflow type whose step takes a while and reports its progress (``--app`` this file).

``report``: ``working`` (a handler: three parts of ``PART_SECONDS`` each, a progress report
``done/of`` before each) -> ``done``.
"""

from __future__ import annotations

import asyncio

from statewright import MachineBuilder, Next, Run, WorkflowType

PARTS = 3
PART_SECONDS = 0.4

MACHINE = (
    MachineBuilder("report", 1, "Write a report in three parts.")
    .state("working", initial=True, description="Writing the parts.")
    .state("done", terminal=True, description="Written.")
    .event("finish", "Every part is written.", roles=["system"])
    .transition("finish", "working", "done")
    .build()
)


async def write(run: Run) -> Next:
    for part in range(1, PARTS + 1):
        await run.progress(done=part - 1, of=PARTS, message=f"writing part {part}")
        await asyncio.sleep(PART_SECONDS)
    words = await run.step("count_words", lambda key: 3 * 250)
    return Next("finish", context={"words": words})


TYPES = [WorkflowType(MACHINE, {"working": write})]

"""Stuck detection per machine version: a workflow's threshold is that of its state in the
version it runs; every registered version is covered, a version no longer registered gets the
newest definition's threshold, and a state that is terminal in a version is never stuck there.
Counts are true counts; pages follow ``(type, state, state_entered_at, id)``."""

from __future__ import annotations

from pathlib import Path

from statewright import Engine, MachineBuilder, ManualClock, SQLiteStore
from statewright.definition.machine import Machine
from statewright.engine.core import StuckTotal
from statewright.types import StuckCutoff
from tests.store import bulk

T0 = 1_800_000_000.0


def job(version: int, work_after: float, review_terminal: bool = False) -> Machine:
    b = MachineBuilder("job", version)
    b.state("work", initial=True, stuck_after=work_after)
    if version >= 2:
        b.state("review", terminal=review_terminal, stuck_after=None if review_terminal else 50)
    b.state("done", terminal=True)
    b.event("finish")
    b.transition("finish", "work", "done")
    if version >= 2:
        b.event("check")
        b.transition("check", "work", "review")
        if not review_terminal:
            b.transition("finish", "review", "done")
    return b.build()


async def test_each_version_keeps_its_own_thresholds(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    engine = Engine(
        SQLiteStore(tmp_path / "s.db"),
        [job(1, 100), job(2, 1000), job(3, 1000, review_terminal=True)],
        clock=clock,
        default_stuck_after=86400,
    )
    await engine.open()
    # work: v1 100 s, v2 and v3 1000 s (and so any other version: the newest's);
    # review: 50 s in v2, terminal in v3 (and so for other versions).
    assert engine.stuck_cutoffs(T0) == [
        StuckCutoff("job", "review", None),
        StuckCutoff("job", "review", T0 - 50, 2),
        StuckCutoff("job", "work", T0 - 1000),
        StuckCutoff("job", "work", T0 - 100, 1),
    ]
    rows = [
        bulk.workflow("v1-old", "job", "work", T0 - 200, machine_version=1),  # stuck (100)
        bulk.workflow("v1-new", "job", "work", T0 - 50, machine_version=1),
        bulk.workflow("v2-old", "job", "work", T0 - 2000, machine_version=2),  # stuck (1000)
        bulk.workflow("v2-mid", "job", "work", T0 - 200, machine_version=2),
        bulk.workflow("v9-old", "job", "work", T0 - 2000, machine_version=9),  # newest's
        bulk.workflow("v2-rev", "job", "review", T0 - 60, machine_version=2),  # stuck (50)
        bulk.workflow("v3-rev", "job", "review", T0 - 10**6, machine_version=3),  # terminal
        bulk.workflow("other", "unknown", "work", T0 - 10**6),  # no such type: not ours
    ]
    await bulk.insert(engine.store, "workflows", bulk.WORKFLOW_COLUMNS, rows)

    found = await engine.stuck()
    assert [(s.workflow.id, s.threshold, s.age) for s in found] == [
        ("v2-rev", 50, 60),
        ("v2-old", 1000, 2000),
        ("v9-old", 1000, 2000),
        ("v1-old", 100, 200),
    ]
    assert all(engine.is_stuck(s.workflow) for s in found if s.workflow.machine_version < 9)
    assert await engine.stuck_counts() == [
        StuckTotal("job", "review", 1, 60),
        StuckTotal("job", "work", 3, 2000),
    ]
    # Pages: each continues after the last one's key.
    first = await engine.stuck(limit=2)
    rest = await engine.stuck(limit=2, after=first[-1].key)
    assert [s.workflow.id for s in first + rest] == [s.workflow.id for s in found]
    assert await engine.stuck(after=found[-1].key) == []
    # Later, more are stuck; parked ones are counted apart, whatever their age.
    assert len(await engine.stuck(now=T0 + 950)) == 6
    assert await engine.parked_counts() == []
    await engine.close()

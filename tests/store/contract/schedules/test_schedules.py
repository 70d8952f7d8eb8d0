"""Cron schedules and per-type claim limits, on every store (SQLite file and memory,
PostgreSQL): one workflow per tick however many fire it, the catch-up policies, the
compare-and-swap of the next tick, typed errors at schedule time; the concurrency limit and
the token bucket in the claim, lapsed leases freeing the budget."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from statewright import Engine, Worker
from statewright.clock import ManualClock
from statewright.engine.schedules import tick_workflow_id
from statewright.errors import InvalidInput, InvalidSchedule, ScheduleNotFound, UnknownWorkflowType
from statewright.store.protocol import FullStore as Store
from tests.store.contract.core.test_limits import _machine

T0 = datetime(2027, 1, 15, 8, 3, tzinfo=UTC).timestamp()
"""08:03 UTC: the next */5 tick is 08:05."""


def _at(hh: int, mm: int, ss: int = 0) -> float:
    return datetime(2027, 1, 15, hh, mm, ss, tzinfo=UTC).timestamp()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
async def engine(store: Store, clock: ManualClock) -> Engine:
    return Engine(store, [_machine("nightly"), _machine("other")], clock=clock)


async def _ids(engine: Engine) -> list[str]:
    return sorted(w.id for w in await engine.list_workflows())


# -- schedules --------------------------------------------------------------------------------


async def test_a_tick_starts_one_workflow_however_often_it_is_fired(
    engine: Engine, clock: ManualClock
) -> None:
    s = await engine.schedule_start(
        "nightly", cron="*/5 * * * *", input={"n": 1}, schedule_id="every5"
    )
    assert (s.next_at, s.catch_up, s.timezone, s.paused) == (_at(8, 5), "latest", "UTC", False)
    assert await engine.fire_schedules() == []  # 08:03: not due
    clock.set(_at(8, 5, 1))
    # Two workers that read the schedule at the same instant: one creates, one finds it.
    other = Engine(engine.store, [_machine("nightly")], clock=clock)
    first = await engine.fire_schedules()
    second = await other.fire_schedules()
    assert first == ["every5.20270115T080500Z"] and second == []
    assert await _ids(engine) == first
    row = await engine.get(first[0])
    assert row.context == {"n": 1} and row.type == "nightly"
    after = await engine.get_schedule("every5")
    assert after.next_at == _at(8, 10) and after.last_workflow_id == first[0]
    assert after.last_tick == _at(8, 5)


async def test_a_worker_killed_after_the_start_leaves_the_tick_to_the_next_round(
    engine: Engine, clock: ManualClock
) -> None:
    s = await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="every5", actor="al")
    clock.set(_at(8, 6))
    # The start landed, the advance did not (the worker died in between).
    tick = tick_workflow_id(s, _at(8, 5))
    await engine.start("nightly", {}, workflow_id=tick, actor="schedule:every5 for al")
    assert await engine.fire_schedules() == []  # the same tick: nothing new
    assert len(await _ids(engine)) == 1
    after = await engine.get_schedule("every5")
    assert after.next_at == _at(8, 10)
    assert (after.last_workflow_id, after.last_error) == (tick, None)  # it is the tick's


async def test_the_next_tick_moves_by_compare_and_swap(engine: Engine, store: Store) -> None:
    s = await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="every5")
    assert await store.advance_schedule("every5", s.next_at, _at(8, 10), at=T0)
    # A second worker that read the same next tick changes nothing.
    assert not await store.advance_schedule("every5", s.next_at, _at(8, 15), at=T0)
    assert (await engine.get_schedule("every5")).next_at == _at(8, 10)


@pytest.mark.parametrize(
    ("catch_up", "started"),
    [
        ("latest", ["every5.20270115T090500Z"]),
        ("all", [f"every5.20270115T{h:02d}{m:02d}00Z" for h, m in [(8, 5), (8, 10)]]),
        ("skip", []),
    ],
)
async def test_catch_up_policies_after_an_hour_without_workers(
    engine: Engine, clock: ManualClock, catch_up: str, started: list[str]
) -> None:
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="every5", catch_up=catch_up)
    clock.set(_at(9, 7))  # ticks 08:05 ... 09:05 were missed (13 of them)
    created = await engine.fire_schedules()
    if catch_up == "all":
        assert len(created) == 13 and created[:2] == started
    else:
        assert created == started
    assert (await engine.get_schedule("every5")).next_at == _at(9, 10)
    assert await engine.fire_schedules() == []  # nothing more, whatever the policy


async def test_skip_still_fires_a_tick_that_is_only_a_little_late(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="s", catch_up="skip")
    clock.set(_at(8, 5, 30))
    assert await engine.fire_schedules() == ["s.20270115T080500Z"]


async def test_time_zones_keep_local_time(engine: Engine, clock: ManualClock) -> None:
    s = await engine.schedule_start(
        "nightly", "0 2 * * *", schedule_id="paris", timezone="Europe/Paris"
    )
    assert s.next_at == datetime(2027, 1, 16, 1, 0, tzinfo=UTC).timestamp()  # 02:00 CET
    daily = await engine.schedule_start("nightly", "@daily", schedule_id="daily")
    assert daily.next_at == datetime(2027, 1, 16, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"cron": "every day"}, InvalidSchedule, "cron"),
        ({"cron": "61 * * * *"}, InvalidSchedule, "cron"),
        ({"cron": "0 0 31 2 *"}, InvalidSchedule, "cron"),  # never fires
        ({"timezone": "Mars/Olympus"}, InvalidSchedule, "timezone"),
        ({"catch_up": "sometimes"}, InvalidSchedule, "catch_up"),
        ({"schedule_id": "has space"}, InvalidSchedule, "schedule_id"),
        ({"schedule_id": "x" * 190}, InvalidSchedule, "schedule_id"),
        ({"input": ["not", "an", "object"]}, InvalidSchedule, "input"),
        ({"input": {"x": float("nan")}}, InvalidInput, None),
        ({"workflow_type": "nope"}, UnknownWorkflowType, None),
    ],
)
async def test_bad_schedules_are_refused_with_typed_errors_and_store_nothing(
    engine: Engine, kwargs: dict[str, object], error: type[Exception], field: str | None
) -> None:
    args: dict[str, object] = {
        "workflow_type": "nightly",
        "cron": "*/5 * * * *",
        "schedule_id": "s1",
        **kwargs,
    }
    with pytest.raises(error) as raised:
        await engine.schedule_start(**args)  # type: ignore[arg-type]
    if field is not None:
        assert getattr(raised.value, "details", {}).get("field") == field
    assert await engine.schedules() == []


async def test_declare_again_replace_pause_resume_remove(
    engine: Engine, clock: ManualClock
) -> None:
    first = await engine.schedule_start("nightly", "*/5 * * * *", {"a": 1}, schedule_id="s")
    again = await engine.schedule_start("nightly", "*/5 * * * *", {"a": 1}, schedule_id="s")
    assert again == first  # declared as it is: unchanged
    changed = await engine.schedule_start("nightly", "0 * * * *", {"a": 2}, schedule_id="s")
    assert (changed.cron, changed.input, changed.next_at) == ("0 * * * *", {"a": 2}, _at(9, 0))
    assert [s.id for s in await engine.schedules()] == ["s"]
    paused = await engine.pause_schedule("s")
    assert paused.paused
    clock.set(_at(11, 30))
    assert await engine.fire_schedules() == []  # paused: nothing fires
    resumed = await engine.resume_schedule("s")
    assert not resumed.paused and resumed.next_at == _at(12, 0)  # the paused ticks skipped
    await engine.unschedule("s")
    with pytest.raises(ScheduleNotFound):
        await engine.unschedule("s")
    with pytest.raises(ScheduleNotFound):
        await engine.pause_schedule("s")
    assert await engine.schedules() == []


async def test_a_refused_start_is_recorded_and_the_schedule_moves_on(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="s")
    # Another type already took the id of the 08:05 tick: that start is refused.
    await engine.start("other", {}, workflow_id="s.20270115T080500Z")
    clock.set(_at(8, 5))
    assert await engine.fire_schedules() == []
    s = await engine.get_schedule("s")
    assert s.next_at == _at(8, 10) and s.last_error and "workflow_exists" in s.last_error


async def test_tenant_schedules_start_workflows_in_their_tenant(
    engine: Engine, clock: ManualClock
) -> None:
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="acme:s", tenant="acme")
    with pytest.raises(InvalidSchedule):
        await engine.schedule_start("nightly", "* * * * *", schedule_id="acme:t", tenant="zeta")
    clock.set(_at(8, 5))
    [wid] = await engine.fire_schedules()
    assert wid == "acme:s.20270115T080500Z"
    assert (await engine.get(wid)).tenant == "acme"
    assert [s.id for s in await engine.schedules(tenant="acme")] == ["acme:s"]
    assert await engine.schedules(tenant="other") == []


async def test_a_worker_fires_due_ticks_by_its_clock(engine: Engine, clock: ManualClock) -> None:
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="s")
    worker = Worker(engine)
    assert await worker.run_until_idle() == 0
    clock.set(_at(8, 5))
    assert await worker.run_until_idle() == 1  # started, then its handler ran
    [row] = await engine.list_workflows()
    assert row.state == "done"
    # A worker without the type leaves the schedule to the workers that have it.
    clock.set(_at(8, 10))
    elsewhere = Worker(Engine(engine.store, [_machine("other")], clock=clock))
    await elsewhere.run_until_idle()
    assert len(await engine.list_workflows()) == 1


# -- limits ----------------------------------------------------------------------------------


# -- a tick starts its own workflow or fails loudly, on its declarer's behalf (issue 22) -------


@pytest.mark.parametrize(
    ("actor", "input", "why"),
    [
        ("agent-7", {"n": 1}, "made by 'agent-7'"),  # another caller, the same input
        ("schedule:s for al", {"n": 666}, "another input"),  # the schedule's actor, not input
        ("schedule:s for mallory", {"n": 1}, "made by 'schedule:s for mallory'"),
    ],
)
async def test_a_tick_whose_id_holds_a_workflow_it_did_not_start_fails_loudly(
    engine: Engine,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
    actor: str,
    input: dict[str, int],
    why: str,
) -> None:
    s = await engine.schedule_start(
        "nightly", "*/5 * * * *", {"n": 1}, schedule_id="s", actor="al"
    )
    tick = tick_workflow_id(s, _at(8, 5))
    # Taken before the tick (the trusted Python API may; the surfaces refuse such ids).
    await engine.start("nightly", input, workflow_id=tick, actor=actor)
    clock.set(_at(8, 5))
    with caplog.at_level(logging.ERROR, logger="statewright.engine.schedules"):
        assert await engine.fire_schedules() == []
    after = await engine.get_schedule("s")
    assert after.next_at == _at(8, 10)  # moved on...
    assert after.last_workflow_id is None  # ... not counting that workflow as its tick
    assert after.last_error is not None and "did not start" in after.last_error
    assert why in after.last_error
    [record] = [r for r in caplog.records if getattr(r, "action", "") == "schedule_tick_taken"]
    assert record.levelno == logging.ERROR and record.workflow_id == tick  # type: ignore[attr-defined]
    assert (await engine.get(tick)).context == input  # untouched


async def test_a_tick_started_before_schedules_kept_their_creator_still_counts(
    engine: Engine, clock: ManualClock
) -> None:
    # A tick started by the previous release (its actor was "schedule:<id>"), whose worker
    # died before it advanced the schedule: after the upgrade it is still that tick's.
    s = await engine.schedule_start(
        "nightly", "*/5 * * * *", {"n": 1}, schedule_id="s", actor="al"
    )
    tick = tick_workflow_id(s, _at(8, 5))
    await engine.start("nightly", {"n": 1}, workflow_id=tick, actor="schedule:s")
    clock.set(_at(8, 6))
    assert await engine.fire_schedules() == []
    after = await engine.get_schedule("s")
    assert (after.last_workflow_id, after.last_error) == (tick, None)


async def test_a_schedule_keeps_its_declarer_and_its_ticks_name_them(
    engine: Engine, store: Store, clock: ManualClock
) -> None:
    first = await engine.schedule_start(
        "nightly", "*/5 * * * *", {"a": 1}, schedule_id="s", actor="al"
    )
    assert first.created_by == "al"
    # Declared again as it is (by a deploy, say): unchanged, its declarer too.
    again = await engine.schedule_start(
        "nightly", "*/5 * * * *", {"a": 1}, schedule_id="s", actor="ci"
    )
    assert again == first and (await store.get_schedule("s")) == first
    # A new definition is its new declarer's.
    changed = await engine.schedule_start(
        "nightly", "*/5 * * * *", {"a": 2}, schedule_id="s", actor="bo"
    )
    assert changed.created_by == "bo" and (await store.get_schedule("s")) == changed
    clock.set(_at(8, 5))
    [wid] = await engine.fire_schedules()
    [start] = (await engine.history(wid))[:1]
    assert (start.event, start.actor, start.payload) == ("$start", "schedule:s for bo", {"a": 2})
    # Declared without an actor (the Python API's default): the tick's actor is as it was.
    await engine.schedule_start("nightly", "*/5 * * * *", schedule_id="anon")
    clock.set(_at(8, 10))
    ticks = await engine.fire_schedules()
    [anon] = [w for w in ticks if w.startswith("anon.")]
    assert (await engine.history(anon))[0].actor == "schedule:anon"


async def test_schedules_are_listed_a_page_at_a_time(engine: Engine, store: Store) -> None:
    for sid, tenant in (("a", "default"), ("acme:b", "acme"), ("c", "default"), ("d", "default")):
        await engine.schedule_start("nightly", "@daily", schedule_id=sid, tenant=tenant)
    assert [s.id for s in await store.list_schedules()] == ["a", "acme:b", "c", "d"]
    assert [s.id for s in await store.list_schedules(limit=2)] == ["a", "acme:b"]
    assert [s.id for s in await store.list_schedules(after="acme:b")] == ["c", "d"]
    assert [s.id for s in await store.list_schedules("default", after="a", limit=2)] == [
        "c",
        "d",
    ]
    assert [s.id for s in await engine.schedules("default", after="c", limit=5)] == ["d"]

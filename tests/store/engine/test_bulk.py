"""Bulk actions by filter on every store (issue 28, item 3): a dry run writes nothing; a real
run applies the action once to each match, logged with the actor and reason; running the
same operation again applies nothing twice; callers need the operator or admin role and see
only their tenant's workflows."""

from __future__ import annotations

import pytest

from statewright import Engine, InvalidInput, Machine, MachineBuilder, ManualClock, WorkflowType
from statewright.access import Access
from statewright.access.principal import Principal
from statewright.engine.bulk import BulkFilter
from statewright.errors import Forbidden
from statewright.store.protocol import FullStore as Store
from statewright.types import WorkflowFilter


def machine() -> Machine:
    return (
        MachineBuilder("job")
        .state("queued", initial=True)
        .state("running")
        .state("done", terminal=True)
        .state("cancelled", terminal=True)
        .event("go")
        .event("finish")
        .event("cancel")
        .transition("go", "queued", "running")
        .transition("finish", "running", "done")
        .transition("cancel", "queued", "cancelled")
        .transition("cancel", "running", "cancelled")
        .build()
    )


def engine_on(store: Store) -> Engine:
    return Engine(store, [WorkflowType(machine())], clock=ManualClock())


async def _seed(engine: Engine, n: int, tenant: str | None = None) -> list[str]:
    made = []
    for i in range(n):
        wid = f"{tenant}-{i}" if tenant else f"j{i}"
        row = (await engine.start("job", {}, workflow_id=wid, tenant=tenant or "default")).row
        made.append(row.id)
        engine.clock.advance(1)  # type: ignore[attr-defined]
    return made


async def test_dry_run_counts_and_samples_and_writes_nothing(store: Store) -> None:
    engine = engine_on(store)
    ids = await _seed(engine, 7)
    await engine.send("j0", "go")
    seq = await store.history("j1", 0, 100)
    done = await engine.bulk(
        "cancel",
        BulkFilter(type="job", state="queued"),
        reason="incident 7",
        actor="ops",
        dry_run=True,
        sample=3,
        batch=2,
    )
    assert (done.matched, done.applied, done.dry_run) == (6, 0, True)
    assert done.sample == ids[1:4]
    assert [(await engine.get(i)).state for i in ids] == ["running"] + ["queued"] * 6
    assert await store.history("j1", 0, 100) == seq


async def test_real_run_applies_once_and_a_rerun_replays(store: Store) -> None:
    engine = engine_on(store)
    ids = await _seed(engine, 5)
    await engine.send("j4", "go")
    await engine.send("j4", "finish")  # finished: not matched (live only)
    done = await engine.bulk(
        "cancel",
        BulkFilter(type="job"),
        reason="incident 7",
        actor="ops",
        operation_id="op1",
        batch=2,
    )
    counts = (done.matched, done.applied, done.replayed, done.skipped, done.failed)
    assert counts == (4, 4, 0, 0, 0)
    for wid in ids[:4]:
        last = (await engine.history(wid))[-1]
        assert (last.event, last.actor) == ("cancel", "ops")
        assert last.payload == {"reason": "incident 7"}
    engine.clock.advance(5)  # type: ignore[attr-defined]
    # Everything matched is cancelled: a rerun over all workflows replays, never re-applies.
    again = await engine.bulk(
        "cancel",
        BulkFilter(type="job", terminal=None),
        reason="incident 7",
        actor="ops",
        operation_id="op1",
    )
    assert (again.applied, again.replayed, again.skipped) == (0, 4, 1)
    for wid in ids[:4]:
        assert [r.event for r in await engine.history(wid)].count("cancel") == 1


async def test_move_resume_retry_fork_and_filters(store: Store) -> None:
    engine = engine_on(store)
    await _seed(engine, 3)
    moved = await engine.bulk(
        "move",
        BulkFilter(state="queued", entered_before=engine.clock.now() - 1.5),
        to_state="running",
        reason="skip",
        actor="root",
        operation_id="m1",
    )
    assert (moved.matched, moved.applied) == (2, 2)
    assert (await engine.get("j0")).state == "running"
    assert (await engine.get("j2")).state == "queued"
    engine.clock.advance(5)  # type: ignore[attr-defined]
    none = await engine.bulk("cancel", BulkFilter(version=2), reason="r", actor="ops")
    assert none.matched == 0
    resumed = await engine.bulk("resume", BulkFilter(state="running"), reason="r", actor="ops")
    assert (resumed.matched, resumed.skipped, resumed.applied) == (2, 2, 0)  # none parked
    assert all(why.startswith("not_parked: ") for why in resumed.errors.values())
    retried = await engine.bulk("retry", BulkFilter(state="running"), reason="r", actor="ops")
    assert retried.applied == 2
    assert (await engine.history("j0"))[-1].event == "$resume"
    cutoff = engine.clock.now()  # (a manual clock: the forks are made at this very instant)
    queued = BulkFilter(state="queued", entered_before=cutoff)
    forked = await engine.bulk("fork", queued, reason="r", actor="ops")
    assert forked.entered_before == cutoff
    assert forked.applied == 1
    engine.clock.advance(5)  # type: ignore[attr-defined]
    forked_again = await engine.bulk(  # the first run's cutoff: not the fork it made
        "fork",
        BulkFilter(state="queued", entered_before=forked.entered_before),
        reason="r",
        actor="ops",
    )
    assert (forked_again.matched, forked_again.applied, forked_again.replayed) == (1, 0, 1)
    with pytest.raises(InvalidInput):
        await engine.bulk("explode", BulkFilter(), reason="r", actor="ops")
    with pytest.raises(InvalidInput):
        await engine.bulk("move", BulkFilter(), reason="r", actor="ops")
    with pytest.raises(InvalidInput):
        await engine.bulk("cancel", BulkFilter(), reason=" ", actor="ops")
    with pytest.raises(InvalidInput):
        await engine.bulk("cancel", BulkFilter(), reason="r", actor="ops", operation_id="a b")


async def test_access_needs_an_operator_and_scopes_to_the_tenant(store: Store) -> None:
    engine = engine_on(store)
    await _seed(engine, 3, tenant="acme")
    await _seed(engine, 2, tenant="other")
    viewer = Access(engine, Principal("vic", frozenset({"viewer"}), "acme"))
    with pytest.raises(Forbidden, match="operator or admin"):
        await viewer.bulk("cancel", BulkFilter(), reason="r", dry_run=True)
    op = Access(engine, Principal("olga", frozenset({"operator"}), "acme"))
    with pytest.raises(Forbidden, match="admin"):
        await op.bulk("move", BulkFilter(), to_state="running", reason="r")
    done = await op.bulk("cancel", BulkFilter(tenant="other"), reason="r", operation_id="t1")
    assert (done.matched, done.applied) == (3, 3)
    assert all(":" not in i for i in done.sample)
    assert {r.state for r in await store.list_workflows(WorkflowFilter(tenant="other"))} == {
        "queued"
    }
    acme = await store.list_workflows(WorkflowFilter(tenant="acme"))
    assert {r.state for r in acme} == {"cancelled"}
    last = (await engine.history(acme[0].id))[-1]
    assert (last.event, last.actor) == ("cancel", "olga")


async def test_a_type_whose_machine_lacks_its_cancel_event_is_skipped(store: Store) -> None:
    engine = Engine(store, [WorkflowType(machine(), cancel_event="stop")], clock=ManualClock())
    await engine.start("job", {}, workflow_id="s1")
    done = await engine.bulk("cancel", BulkFilter(), reason="r", actor="ops")
    assert (done.matched, done.skipped, done.failed) == (1, 1, 0)
    assert "stop" in done.errors["s1"]
    assert (await engine.get("s1")).state == "queued"


async def test_resume_and_retry_by_parked_reason(store: Store) -> None:
    from tests.store.engine.test_parked import _parked

    engine, clock, _ = await _parked(store)  # p-unknown: step_outcome_unknown; p-fatal: fatal
    clock.advance(5)
    fatal = BulkFilter(parked_reason="fatal_error")
    dry = await engine.bulk("resume", fatal, reason="printer fixed", actor="ops", dry_run=True)
    assert (dry.matched, dry.sample) == (1, ["p-fatal"])
    done = await engine.bulk("resume", fatal, reason="printer fixed", actor="ops")
    assert (done.applied, (await engine.get("p-fatal")).parked) == (1, None)
    # A plain resume of a step whose outcome is unknown is refused: skipped, not failed.
    unknown = BulkFilter(parked=True)
    refused = await engine.bulk("resume", unknown, reason="r", actor="ops", operation_id="u1")
    assert (refused.matched, refused.skipped, refused.failed) == (1, 1, 0)
    assert "p-unknown" in refused.errors
    retried = await engine.bulk("retry", unknown, reason="r", actor="ops", operation_id="u2")
    assert retried.applied == 1
    last = (await engine.history("p-unknown"))[-1]
    assert (last.event, last.payload) == ("$resume", {"reason": "r", "reconcile": True})

"""The store contract: every backend must pass this suite unchanged."""

from __future__ import annotations

import asyncio

import pytest

from statewright.errors import InvalidInput, StoreError, VersionConflict, WorkflowNotFound
from statewright.store import Store
from statewright.types import CancelRequest, Lease, StepFinish, TimerSpec
from tests.store.contract.writes import T0, defer, move, new


async def test_create_writes_row_and_first_log_entry(store: Store) -> None:
    row, created = await store.create_workflow(new(run_at=T0))
    assert created
    assert (row.state, row.version, row.context, row.next_due_at) == ("a", 1, {"n": 1}, T0)
    [entry] = await store.history("w1")
    assert (entry.version, entry.from_state, entry.to_state, entry.event) == (
        1,
        None,
        "a",
        "$start",
    )
    assert entry.context_patch == {"n": 1}


async def test_create_is_idempotent(store: Store) -> None:
    await store.create_workflow(new())
    row, created = await store.create_workflow(new(context={"other": True}))
    assert not created
    assert row.context == {"n": 1}
    assert len(await store.history("w1")) == 1


async def test_transition_is_cas_plus_log_append(store: Store) -> None:
    await store.create_workflow(new())
    row = await store.apply_transition(move("w1", 1))
    assert (row.state, row.version, row.context) == ("b", 2, {"n": 2})
    assert row.state_entered_at == T0 + 1
    log = await store.history("w1")
    assert [e.version for e in log] == [1, 2]
    assert (log[1].from_state, log[1].to_state, log[1].payload) == ("a", "b", {"p": 1})


async def test_stale_version_conflicts_and_changes_nothing(store: Store) -> None:
    await store.create_workflow(new())
    await store.apply_transition(move("w1", 1))
    with pytest.raises(VersionConflict) as info:
        await store.apply_transition(move("w1", 1, to="c"))
    assert (info.value.expected, info.value.actual) == (1, 2)
    row = await store.get_workflow("w1")
    assert row is not None and (row.state, row.version) == ("b", 2)
    assert len(await store.history("w1")) == 2


async def test_two_writers_racing_on_one_version_exactly_one_wins(store: Store) -> None:
    await store.create_workflow(new())
    results = await asyncio.gather(
        *(store.apply_transition(move("w1", 1, to=f"s{i}")) for i in range(8)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, VersionConflict) for e in losers)
    log = await store.history("w1")
    assert [e.version for e in log] == [1, 2]
    assert log[1].to_state == winners[0].state


async def test_group_commit_isolates_a_failing_write(store: Store) -> None:
    for i in range(10):
        await store.create_workflow(new(f"w{i}"))
    writes = [move(f"w{i}", 1) for i in range(10)] + [move("w3", 7)]
    results = await asyncio.gather(
        *(store.apply_transition(w) for w in writes), return_exceptions=True
    )
    assert all(not isinstance(r, BaseException) for r in results[:10])
    assert isinstance(results[10], VersionConflict)
    for i in range(10):
        assert [e.version for e in await store.history(f"w{i}")] == [1, 2]


async def test_unknown_workflow(store: Store) -> None:
    with pytest.raises(WorkflowNotFound):
        await store.apply_transition(move("nope", 1))
    assert await store.get_workflow("nope") is None
    with pytest.raises(WorkflowNotFound):
        await store.post_input("nope", "x", {}, T0)


async def test_non_json_payload_is_invalid_input_and_changes_nothing(store: Store) -> None:
    await store.create_workflow(new())
    with pytest.raises(InvalidInput):
        await store.apply_transition(move("w1", 1, payload={"bad": object()}))
    row = await store.get_workflow("w1")
    assert row is not None and row.version == 1
    assert len(await store.history("w1")) == 1


async def test_timers_set_next_due_and_are_cleared_on_leaving(store: Store) -> None:
    await store.create_workflow(
        new(timers=(TimerSpec(T0 + 50, "late"), TimerSpec(T0 + 10, "soon")))
    )
    row = await store.get_workflow("w1")
    assert row is not None and row.next_due_at == T0 + 10
    assert [t.event for t in await store.timers("w1")] == ["soon", "late"]
    # a self-transition keeps the timers except the fired one
    soon = (await store.timers("w1"))[0]
    row = await store.apply_transition(
        move("w1", 1, to="a", clear_timers=False, fired_timer_id=soon.id)
    )
    assert [t.event for t in await store.timers("w1")] == ["late"]
    assert row.next_due_at == T0 + 50
    # leaving the state clears them; new ones come with the target; run_at can be earlier
    row = await store.apply_transition(
        move("w1", 2, add_timers=(TimerSpec(T0 + 99, "x"),), run_at=T0 + 5)
    )
    assert [t.event for t in await store.timers("w1")] == ["x"]
    assert row.next_due_at == T0 + 5
    row = await store.apply_transition(move("w1", 3, to="c"))
    assert await store.timers("w1") == [] and row.next_due_at is None


async def test_claim_due_leases_only_due_unleased_live_work(store: Store) -> None:
    await store.create_workflow(new("due", run_at=T0))
    await store.create_workflow(new("later", run_at=T0 + 100))
    await store.create_workflow(new("idle"))
    await store.create_workflow(new("done", run_at=T0, terminal=True))
    claimed = await store.claim_due("w-1", T0, 30, 10)
    assert [r.id for r in claimed] == ["due"]
    assert claimed[0].lease_owner == "w-1" and claimed[0].lease_expires_at == T0 + 30
    assert claimed[0].lease == Lease("w-1", 1)  # the first claim's fencing token
    assert await store.claim_due("w-2", T0, 30, 10) == []
    assert [r.id for r in await store.claim_due("w-2", T0 + 100, 30, 10)] == ["later"]
    assert await store.claim_due("w-3", T0, 30, 10, types=["other"]) == []


async def test_leases_renew_expire_break_and_release(store: Store) -> None:
    await store.create_workflow(new("a1", run_at=T0))
    await store.create_workflow(new("a2", run_at=T0))
    claimed = {r.id: r for r in await store.claim_due("w-1", T0, 30, 10)}
    assert await store.lease_owners() == ["w-1"]
    assert {r.id for r in await store.leased_by("w-1")} == {"a1", "a2"}
    assert await store.renew_leases("w-1", {"a1": claimed["a1"].fence}, T0 + 60) == ["a1"]
    assert [r.id for r in await store.expired_leases(T0 + 45)] == ["a2"]
    assert await store.break_leases("w-1", ["a2"], expired_before=T0 + 10) == 0  # not yet
    assert await store.break_leases("w-1", ["a2"], expired_before=T0 + 45) == 1
    await store.release_lease("a1", Lease("someone-else", claimed["a1"].fence))
    await store.release_lease("a1", Lease("w-1", claimed["a1"].fence + 1))  # another claim's
    row = await store.get_workflow("a1")
    assert row is not None and row.lease_owner == "w-1"
    await store.release_lease("a1", Lease("w-1", claimed["a1"].fence))
    assert await store.lease_owners() == []
    # a transition releases the lease with it
    await store.claim_due("w-2", T0, 30, 10)
    row = await store.apply_transition(move("a1", 1))
    assert row.lease_owner is None


async def test_defer_records_attempt_without_transition(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    [claimed] = await store.claim_due("w-1", T0, 30, 10)
    row = await store.defer(
        defer(
            "w1",
            1,
            attempts=2,
            total_attempts=4,
            next_due_at=T0 + 8,
            last_error="boom",
            lease=claimed.lease,
        )
    )
    assert (row.version, row.attempts, row.next_due_at, row.last_error) == (1, 2, T0 + 8, "boom")
    assert (row.total_attempts, row.parked) == (4, None)
    assert row.lease_owner is None
    assert len(await store.history("w1")) == 1
    with pytest.raises(VersionConflict):
        await store.defer(defer("w1", 5, attempts=3))
    row = await store.defer(defer("w1", 1, attempts=2, parked="fatal_error", last_error="x"))
    assert (row.parked, row.total_attempts, row.next_due_at) == ("fatal_error", 4, None)
    row = await store.apply_transition(move("w1", 1))
    assert row.parked is None  # any transition ends the parking


async def test_step_ledger(store: Store) -> None:
    await store.create_workflow(new())
    rec = await store.step_begin("w1:pay", "w1", "pay", T0)
    assert (rec.status, rec.attempts) == ("executing", 1)
    rec = await store.step_begin("w1:pay", "w1", "pay", T0 + 1)  # found executing: a re-run
    assert (rec.status, rec.attempts) == ("executing", 2)
    rec = await store.step_finish(StepFinish("w1:pay", 2, "done", {"charge": 7}, at=T0 + 2))
    assert (rec.status, rec.result, rec.finished_at) == ("done", {"charge": 7}, T0 + 2)
    again = await store.step_begin("w1:pay", "w1", "pay", T0 + 3)
    assert again == rec  # done stays done
    assert await store.get_step("w1:none") is None
    assert [s.key for s in await store.steps("w1")] == ["w1:pay"]
    with pytest.raises(StoreError):
        await store.step_finish(StepFinish("w1:none", 1, "done", at=T0))


async def test_step_open_begins_only_a_new_step_with_no_cancel_pending(store: Store) -> None:
    from statewright.errors import LeaseLost

    await store.create_workflow(new(run_at=T0))
    [claimed] = await store.claim_due("w-1", T0, 30, 10)
    lease = claimed.lease
    opened = await store.step_open("w1:pay", "w1", "pay", T0, lease)
    assert opened.begun and opened.cancel is None and opened.record is not None
    assert (opened.record.status, opened.record.attempts) == ("executing", 1)
    assert await store.get_step("w1:pay") == opened.record
    # Found executing (a crash, say): reported, not begun again; step_begin decides.
    again = await store.step_open("w1:pay", "w1", "pay", T0 + 1, lease)
    assert not again.begun and again.record == opened.record and again.cancel is None
    # A pending cancel request: reported, and nothing is begun.
    await store.request_cancel("w1", CancelRequest("stop", "ops", T0, 1, None))
    stopped = await store.step_open("w1:ship", "w1", "ship", T0 + 2, lease)
    assert not stopped.begun and stopped.record is None
    assert stopped.cancel is not None and stopped.cancel.reason == "stop"
    assert await store.get_step("w1:ship") is None
    # Another claim's lease: refused, nothing written.
    await store.create_workflow(new("w2", run_at=T0))
    [other] = await store.claim_due("w-2", T0, 30, 10)
    assert other.lease is not None
    stale = Lease("w-2", other.lease.fence + 1)
    with pytest.raises(LeaseLost):
        await store.step_open("w2:pay", "w2", "pay", T0, stale)
    assert await store.get_step("w2:pay") is None
    with pytest.raises(WorkflowNotFound):
        await store.step_open("nope:pay", "nope", "pay", T0)
    unfenced = await store.step_open("w2:pay", "w2", "pay", T0)  # no lease: not a worker's
    assert unfenced.begun


async def test_inbox(store: Store) -> None:
    await store.create_workflow(new())
    first, created = await store.post_input("w1", "doc", {"page": 1}, T0)
    assert created
    await store.post_input("w1", "note", {"x": 1}, T0 + 1)
    item = await store.next_input("w1")
    assert item is not None and item.id == first.id and item.payload == {"page": 1}
    item = await store.next_input("w1", skip=[first.id])  # reading consumes nothing
    assert item is not None and item.name == "note"
    item = await store.next_input("w1", "note")
    assert item is not None and item.name == "note"
    assert await store.next_input("w1", "doc", skip=[first.id]) is None


async def test_transition_consumes_inbox_atomically(store: Store) -> None:
    await store.create_workflow(new())
    item, _ = await store.post_input("w1", "answer", {"ok": True}, T0)
    other, _ = await store.post_input("w1", "other", {}, T0)
    await store.apply_transition(move("w1", 1, consume_inbox_ids=(item.id, other.id)))
    assert await store.next_input("w1") is None
    item2, _ = await store.post_input("w1", "answer", {"ok": False}, T0)
    with pytest.raises(StoreError):  # already consumed: the whole transition fails
        await store.apply_transition(move("w1", 2, consume_inbox_ids=(item2.id, item.id)))
    row = await store.get_workflow("w1")
    assert row is not None and row.version == 2
    assert await store.next_input("w1") == item2  # not consumed by the failed transition
    row = await store.defer(defer("w1", 2, consume_inbox_ids=(item2.id,)))
    assert await store.next_input("w1") is None


async def test_parking_never_silences_pending_timers(store: Store) -> None:
    await store.create_workflow(new(run_at=T0, timers=(TimerSpec(T0 + 60, "timeout"),)))
    row = await store.defer(defer("w1", 1, last_error="x"))
    assert row.next_due_at == T0 + 60
    row = await store.defer(defer("w1", 1, next_due_at=T0 + 5, last_error="x"))
    assert row.next_due_at == T0 + 5


@pytest.mark.parametrize(
    "write",
    [
        {},
        {"to": "a", "clear_timers": False, "fired_timer_id": None},
        {"release_lease": False},
        {"add_timers": (TimerSpec(T0 + 7, "t"),), "run_at": T0 + 9},
        {"terminal": True, "attempts": 3, "last_error": "e", "context": {"t": (1, 2)}},
    ],
)
async def test_a_transition_returns_exactly_the_stored_row(
    store: Store, write: dict[str, object]
) -> None:
    await store.create_workflow(new(run_at=T0, timers=(TimerSpec(T0 + 60, "timeout"),)))
    [claimed] = await store.claim_due("w-1", T0, 30, 10)
    await store.request_cancel("w1", CancelRequest("why", "ops", T0, 1, "k-1"))
    await store.record_progress("w1", {"done": 1}, T0)
    after = await store.apply_transition(move("w1", 1, lease=claimed.lease, **write))  # type: ignore[arg-type]
    assert after == await store.get_workflow("w1")


async def test_cancel_requests_stay_until_the_workflow_ends(store: Store) -> None:
    await store.create_workflow(new("w1"))
    await store.create_workflow(new("w2"))
    request = CancelRequest("customer asked", "erin", T0 + 0.5, 1, "cancel-7")
    row = await store.request_cancel("w1", request)
    assert row.cancel_requested == "customer asked" and row.cancel == request
    assert await store.cancel_requests(["w1", "w2", "nope"]) == {"w1": request}
    row = await store.apply_transition(move("w1", 1))
    assert row.cancel == request  # still pending after a transition
    row = await store.apply_transition(move("w1", 2, to="end", terminal=True))
    assert row.cancel is None and row.cancel_requested is None
    assert await store.cancel_requests(["w1"]) == {}
    row = await store.request_cancel("w1", CancelRequest("too late"))  # ended: no request
    assert row.cancel is None
    with pytest.raises(WorkflowNotFound):
        await store.request_cancel("nope", CancelRequest("x"))


async def test_a_transition_makes_a_pending_cancel_request_due(store: Store) -> None:
    # A worker's write into a state without a handler, the worker killed before it delivers
    # the request that came while it held the workflow: a claim must find the request.
    await store.create_workflow(new("w1", run_at=T0))
    [claimed] = await store.claim_due("w-1", T0, 30, 10)
    await store.request_cancel("w1", CancelRequest("stop", "ops", T0, 1, None))
    row = await store.apply_transition(move("w1", 1, lease=claimed.lease))
    assert row.lease_owner is None and row.next_due_at == T0 + 1
    assert [r.id for r in await store.claim_due("w-2", T0 + 1, 30, 10)] == ["w1"]
    # Without a request (or at a terminal state) nothing becomes due.
    await store.create_workflow(new("w2"))
    assert (await store.apply_transition(move("w2", 1))).next_due_at is None


async def test_progress_is_kept_within_a_state_and_cleared_on_leaving(store: Store) -> None:
    await store.create_workflow(new())
    await store.record_progress("w1", {"done": 3, "of": 10}, T0)
    row = await store.get_workflow("w1")
    assert row is not None and row.progress == {"done": 3, "of": 10}
    row = await store.apply_transition(move("w1", 1, to="a", clear_timers=False))
    assert row.progress == {"done": 3, "of": 10}  # self-transition: same state
    row = await store.apply_transition(move("w1", 2, to="b"))
    assert row.progress is None
    with pytest.raises(WorkflowNotFound):
        await store.record_progress("nope", {}, T0)


async def test_wait_for_work_wakes_on_new_work_or_times_out(store: Store) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.wait_for_work(0.05)
    assert loop.time() - started >= 0.04  # nothing happened: the timeout
    waiter = asyncio.create_task(store.wait_for_work(10))
    await asyncio.sleep(0.05)
    await store.create_workflow(new(run_at=T0))
    await asyncio.wait_for(waiter, 5)  # woken long before its timeout

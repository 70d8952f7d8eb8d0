"""The store contract of the exactly-once runtime, on every backend: fencing of every write a
worker makes, take-over of lapsed leases, the step ledger's attempts, idempotency keys on
transitions and inputs, and the inbox's rules."""

from __future__ import annotations

import pytest

from statewright.errors import (
    IdempotencyKeyReused,
    LeaseLost,
    StepDone,
    StepNotFound,
    VersionConflict,
    WorkflowBusy,
    WorkflowFinished,
    WorkflowNotFound,
)
from statewright.store import Store
from statewright.types import Lease, StepFinish
from tests.store.contract.writes import T0, defer, move, new


async def _claimed(store: Store, wid: str = "w1", worker: str = "w-1", now: float = T0) -> Lease:
    [row] = await store.claim_due(worker, now, 30, 1)
    assert row.id == wid and row.lease is not None
    return row.lease


async def test_every_claim_gets_a_new_fencing_token(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    first = await _claimed(store)
    assert await store.break_leases("w-1", ["w1"]) == 1
    second = await _claimed(store, worker="w-2")
    assert second.fence == first.fence + 1
    taken = await store.take_over("w1", "w-2", "w-3", T0 + 30)
    assert taken is not None and taken.lease == Lease("w-3", second.fence + 1)


async def test_a_write_under_a_lease_that_is_gone_is_refused_and_changes_nothing(
    store: Store,
) -> None:
    await store.create_workflow(new(run_at=T0))
    old = await _claimed(store)
    await store.break_leases("w-1", ["w1"], expired_before=T0 + 31)  # lapsed: recovered
    with pytest.raises(LeaseLost):
        await store.apply_transition(move("w1", 1, lease=old))
    new_claim = await _claimed(store, worker="w-2")
    for write in (
        store.apply_transition(move("w1", 1, lease=old)),
        store.defer(defer("w1", 1, attempts=1, lease=old)),
        store.record_progress("w1", {"done": 1}, T0, old),
        store.step_begin("w1:pay", "w1", "pay", T0, old),
    ):
        with pytest.raises(LeaseLost):
            await write
    row = await store.get_workflow("w1")
    assert row is not None and (row.version, row.progress, row.lease) == (1, None, new_claim)
    assert await store.steps("w1") == [] and len(await store.history("w1")) == 1
    assert await store.renew_leases("w-1", {"w1": old.fence}, T0 + 90) == []
    assert await store.renew_leases("w-2", {"w1": old.fence}, T0 + 90) == []  # old token
    assert await store.renew_leases("w-2", {"w1": new_claim.fence}, T0 + 90) == ["w1"]
    after = await store.apply_transition(move("w1", 1, lease=new_claim))
    assert (after.version, after.lease_owner) == (2, None)  # applied, lease released


async def test_a_version_conflict_under_a_live_lease_is_a_conflict(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    lease = await _claimed(store)
    await store.apply_transition(move("w1", 1, release_lease=False))  # an external event
    with pytest.raises(VersionConflict):
        await store.apply_transition(move("w1", 1, to="c", lease=lease))
    with pytest.raises(VersionConflict):  # while a worker holds it, if asked
        await store.apply_transition(move("w1", 2, to="c", require_unleased=True))
    row = await store.get_workflow("w1")
    assert row is not None and (row.state, row.version) == ("b", 2)


async def test_take_over_only_of_the_lease_as_found(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    lease = await _claimed(store)
    assert await store.take_over("w1", "w-1", "w-9", T0 + 99, expired_before=T0 + 10) is None
    assert await store.take_over("w1", "w-other", "w-9", T0 + 99) is None
    taken = await store.take_over("w1", "w-1", "w-9", T0 + 99, expired_before=T0 + 31)
    assert taken is not None and taken.lease_owner == "w-9" and taken.fence == lease.fence + 1


async def test_step_begin_is_fenced_but_a_done_step_is_always_answered(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    lease = await _claimed(store)
    rec = await store.step_begin("w1:pay", "w1", "pay", T0, lease)
    assert (rec.status, rec.attempts, rec.fence) == ("executing", 1, lease.fence)
    done = await store.step_finish(StepFinish("w1:pay", 1, "done", {"id": 7}, at=T0), lease)
    await store.break_leases("w-1")
    again = await store.step_begin("w1:pay", "w1", "pay", T0 + 1, lease)  # lease gone, but done
    assert again == done and again.result == {"id": 7}
    with pytest.raises(WorkflowNotFound):
        await store.step_begin("nope:pay", "nope", "pay", T0)


async def test_a_late_finish_never_overwrites_a_newer_attempt(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    old = await _claimed(store)
    await store.step_begin("w1:pay", "w1", "pay", T0, old)
    await store.break_leases("w-1")
    new_claim = await _claimed(store, worker="w-2")
    second = await store.step_begin("w1:pay", "w1", "pay", T0 + 1, new_claim)
    assert second.attempts == 2
    late = StepFinish("w1:pay", 1, "done", {"from": "old"}, at=T0 + 2)
    with pytest.raises(LeaseLost):
        await store.step_finish(late, old)
    with pytest.raises(LeaseLost):  # even a writer without a lease: attempt 1 is over
        await store.step_finish(late)
    rec = await store.get_step("w1:pay")
    assert rec is not None and (rec.status, rec.attempts, rec.result) == ("executing", 2, None)
    failed = StepFinish("w1:pay", 2, "failed", error="TimeoutError", outcome="unknown", at=T0)
    rec = await store.step_finish(failed, new_claim)
    assert (rec.status, rec.outcome, rec.error) == ("failed", "unknown", "TimeoutError")
    third = await store.step_begin("w1:pay", "w1", "pay", T0 + 3, new_claim)
    assert (third.status, third.attempts, third.outcome) == ("executing", 3, None)


async def test_an_operator_resolves_a_step_only_when_no_worker_holds_it(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    lease = await _claimed(store)
    await store.step_begin("w1:pay", "w1", "pay", T0, lease)
    with pytest.raises(WorkflowBusy):  # a worker holds the workflow
        await store.resolve_step("w1:pay", "done", {"id": 1}, None, "checked", T0)
    await store.break_leases("w-1")
    rec = await store.resolve_step("w1:pay", "done", {"id": 1}, None, "checked", T0)
    assert (rec.status, rec.result, rec.error) == ("done", {"id": 1}, "checked")
    with pytest.raises(StepDone):  # done stays done
        await store.resolve_step("w1:pay", "failed", None, "not_applied", "oops", T0)
    with pytest.raises(StepNotFound):
        await store.resolve_step("w1:nope", "done", None, None, "x", T0)


async def test_an_idempotency_key_is_applied_once_per_workflow(store: Store) -> None:
    await store.create_workflow(new())
    await store.create_workflow(new("w2"))
    assert await store.transition_by_key("w1", "k-1") is None
    await store.apply_transition(move("w1", 1, idempotency_key="k-1"))
    rec = await store.transition_by_key("w1", "k-1")
    assert rec is not None and (rec.version, rec.event, rec.idempotency_key) == (2, "go", "k-1")
    with pytest.raises(IdempotencyKeyReused):
        await store.apply_transition(move("w1", 2, to="c", idempotency_key="k-1"))
    row = await store.get_workflow("w1")
    assert row is not None and (row.state, row.version) == ("b", 2)
    await store.apply_transition(move("w2", 1, idempotency_key="k-1"))  # another workflow
    assert [e.idempotency_key for e in await store.history("w1")] == [None, "k-1"]


async def test_inputs_with_keys_to_live_workflows_only(store: Store) -> None:
    await store.create_workflow(new())
    item, created = await store.post_input("w1", "doc", {"n": 1}, T0, idempotency_key="i-1")
    again, created_again = await store.post_input(
        "w1", "doc", {"n": 1}, T0 + 1, idempotency_key="i-1"
    )
    assert created and not created_again and again == item and item.idempotency_key == "i-1"
    await store.apply_transition(move("w1", 1, to="end", terminal=True))
    with pytest.raises(WorkflowFinished) as info:
        await store.post_input("w1", "doc", {"n": 2}, T0)
    assert info.value.state == "end"
    # The retry of an input posted before the workflow ended still finds it.
    found, created = await store.post_input("w1", "doc", {"n": 1}, T0, idempotency_key="i-1")
    assert found == item and not created
    with pytest.raises(WorkflowNotFound):
        await store.post_input("nope", "doc", {}, T0)


async def test_a_key_names_one_request_an_event_or_an_input_not_both(store: Store) -> None:
    # The README: the same Idempotency-Key with another request is idempotency_key_reused.
    await store.create_workflow(new())
    await store.apply_transition(move("w1", 1, idempotency_key="k-ev"))
    with pytest.raises(IdempotencyKeyReused) as info:
        await store.post_input("w1", "doc", {"n": 1}, T0, idempotency_key="k-ev")
    assert "event 'go' (version 2)" in info.value.message
    assert await store.next_input("w1") is None  # nothing posted
    item, _ = await store.post_input("w1", "doc", {"n": 1}, T0, idempotency_key="k-in")
    with pytest.raises(IdempotencyKeyReused) as info:
        await store.transition_by_key("w1", "k-in")
    assert f"input 'doc' #{item.id}" in info.value.message
    # A key stays free on another workflow, and a retry of each request still finds it.
    await store.create_workflow(new("w2"))
    assert await store.transition_by_key("w2", "k-in") is None
    assert (await store.post_input("w2", "doc", {}, T0, idempotency_key="k-ev"))[1] is True
    found = await store.transition_by_key("w1", "k-ev")
    assert found is not None and found.version == 2
    assert await store.post_input("w1", "doc", {"n": 1}, T0, idempotency_key="k-in") == (
        item,
        False,
    )


async def test_an_input_wakes_an_idle_workflow_in_its_state(store: Store) -> None:
    await store.create_workflow(new("idle"))  # no run time: idle
    await store.create_workflow(new("parked"))
    await store.defer(defer("parked", 1, parked="fatal_error"))
    await store.create_workflow(new("backoff", run_at=T0 + 100))
    await store.defer(defer("backoff", 1, attempts=2, next_due_at=T0 + 100))
    await store.create_workflow(new("moved"))
    for wid in ("idle", "parked", "backoff", "moved"):
        await store.post_input(
            wid, "doc", {}, T0 + 5, wake_in_state="a" if wid != "moved" else "z"
        )
    due = {r.id: r.next_due_at for r in await store.claim_due("w-1", T0 + 5, 30, 10)}
    assert due == {"idle": T0 + 5}

"""Per-type claim limits on every store (the core's ``claim_due`` with ``limits``): the concurrency
limit and the token bucket in the claim, lapsed leases freeing the budget."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest

from statewright import Engine, MachineBuilder, Next, Worker, WorkflowType
from statewright.clock import ManualClock
from statewright.errors import DefinitionError
from statewright.store import Store
from statewright.store.protocol import FullStore
from statewright.types import TypeLimit

T0 = datetime(2027, 1, 15, 8, 3, tzinfo=UTC).timestamp()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def _machine(name: str) -> WorkflowType:
    machine = (
        MachineBuilder(name)
        .state("running", initial=True)
        .state("done", terminal=True)
        .event("finish")
        .transition("finish", "running", "done")
        .build()
    )
    return WorkflowType(machine, handlers={"running": lambda run: Next("finish")})


def _limited(name: str, **limits: float) -> WorkflowType:
    base = _machine(name)
    return WorkflowType(base.machine, handlers=base.handlers, **limits)  # type: ignore[arg-type]


async def _due(engine: Engine, type_: str, n: int) -> None:
    for i in range(n):
        await engine.start(type_, {}, workflow_id=f"{type_}-{i}")


async def test_max_concurrent_holds_across_claimers_and_lapsed_leases_free_it(
    store: Store, clock: ManualClock
) -> None:
    engine = Engine(
        cast(FullStore, store),
        [_limited("limited", max_concurrent=2), _machine("free")],
        clock=clock,
    )
    await _due(engine, "limited", 5)
    await _due(engine, "free", 3)
    limits = {"limited": TypeLimit(max_concurrent=2)}
    types = ["limited", "free"]
    a = await store.claim_due("a", T0, 30, 10, types, limits)
    assert sorted(r.type for r in a) == ["free"] * 3 + ["limited"] * 2
    assert await store.claim_due("b", T0, 30, 10, types, limits) == []
    # One finishes (its lease is given back): one more may run.
    held = next(r for r in a if r.type == "limited")
    assert held.lease is not None
    await store.release_lease(held.id, held.lease)
    [one] = await store.claim_due("b", T0 + 1, 30, 10, types, limits)
    assert one.type == "limited"
    # A frozen worker's leases lapse: they stop counting once expired.
    later = T0 + 31
    again = await store.claim_due("c", later, 30, 10, types, limits)
    assert len(again) == 2 and {r.type for r in again} == {"limited"}


async def test_max_per_second_is_a_token_bucket_in_the_store(
    store: Store, clock: ManualClock
) -> None:
    engine = Engine(cast(FullStore, store), [_limited("rated", max_per_second=2.0)], clock=clock)
    await _due(engine, "rated", 20)
    limits = {"rated": TypeLimit(max_per_second=2.0)}

    async def claim(worker: str, at: float) -> int:
        return len(await store.claim_due(worker, at, 30, 10, ["rated"], limits))

    assert await claim("a", T0) == 2  # the burst: one second's worth
    assert await claim("b", T0) == 0  # another worker, same instant: the bucket is shared
    assert await claim("a", T0 + 0.5) == 1
    assert await claim("b", T0 + 0.6) == 0
    assert await claim("a", T0 + 100) == 2  # a quiet spell refills only up to the burst
    assert await claim("b", T0 + 99) == 0  # a clock behind adds nothing


async def test_worker_honours_its_types_limits(store: Store, clock: ManualClock) -> None:
    engine = Engine(cast(FullStore, store), [_limited("limited", max_concurrent=1)], clock=clock)
    await _due(engine, "limited", 3)
    worker = Worker(engine, concurrency=8)
    assert worker.limits == {"limited": TypeLimit(max_concurrent=1)}
    assert await worker.run_once() == 1
    assert await worker.run_until_idle() == 2


async def test_unlimited_types_keep_the_plain_claim(store: Store, clock: ManualClock) -> None:
    engine = Engine(cast(FullStore, store), [_machine("free")], clock=clock)
    assert Worker(engine).limits is None


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrent": 0},
        {"max_concurrent": 1.5},
        {"max_concurrent": True},
        {"max_per_second": -1.0},
        {"max_per_second": float("inf")},
        {"burst": 5.0},
        {"max_per_second": 1.0, "burst": 0.5},
    ],
)
def test_bad_limits_are_definition_errors(limits: dict[str, float]) -> None:
    with pytest.raises(DefinitionError) as raised:
        _limited("t", **limits)
    assert raised.value.to_dict()["code"] == "definition_invalid"

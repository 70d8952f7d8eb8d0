"""The store contract for the trace context stored with a workflow (every backend)."""

from __future__ import annotations

import pytest

from statewright.errors import LeaseLost
from statewright.store import Store
from statewright.types import Lease
from tests.store.contract.writes import T0, defer, move, new

A = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
B = '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'


async def test_the_trace_is_written_with_the_start_and_kept_or_replaced_by_transitions(
    store: Store,
) -> None:
    row, _ = await store.create_workflow(new(trace=A))
    assert row.trace == A
    assert (await store.get_workflow("w1")).trace == A  # type: ignore[union-attr]
    after = await store.apply_transition(move("w1", 1))  # made outside a trace: kept
    assert after.trace == A
    after = await store.apply_transition(move("w1", 2, to="c", from_state="b", trace=B))
    assert after.trace == B
    assert (await store.get_workflow("w1")).trace == B  # type: ignore[union-attr]
    # A deferral (no transition) leaves it.
    kept = await store.defer(defer("w1", 3, attempts=1))
    assert kept.trace == B


async def test_a_refused_transition_writes_no_trace(store: Store) -> None:
    await store.create_workflow(new(run_at=T0))
    [claimed] = await store.claim_due("me", T0, 30.0, 10)
    assert claimed.trace is None
    stale = Lease("me", claimed.fence + 1)
    with pytest.raises(LeaseLost):
        await store.apply_transition(move("w1", 1, lease=stale, trace=A))
    assert (await store.get_workflow("w1")).trace is None  # type: ignore[union-attr]

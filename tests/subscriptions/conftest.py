"""An engine on each store (SQLite, a real PostgreSQL) with a small order machine whose
handlers emit messages (``run.emit``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statewright import Engine, MachineBuilder, ManualClock, Next, WorkflowType
from statewright.store import SQLiteStore
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

T0 = 1_800_000_000.0


def order_machine() -> Any:
    return (
        MachineBuilder("shop_order")
        .state("placed", initial=True)
        .state("packing")
        .state("shipped", terminal=True)
        .state("failed", terminal=True)
        .event("pack")
        .event("packed")
        .event("fail")
        .transition("pack", "placed", "packing")
        .transition("packed", "packing", "shipped")
        .transition("fail", "placed", "failed")
        .transition("fail", "packing", "failed")
        .build()
    )


async def pack(run: Any) -> Next:
    run.emit("order.packed", {"order": run.id, "items": run.context.get("items", 1)})
    run.emit("audit", {"who": "packer"})
    return Next("packed")


def order_type() -> WorkflowType:
    return WorkflowType(order_machine(), handlers={"packing": pack})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "subs.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    eng = Engine(store, [order_type()], clock=clock)
    async with eng:
        yield eng

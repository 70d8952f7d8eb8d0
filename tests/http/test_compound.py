"""A machine with compound states over HTTP: the type lists its leaves (never a compound state)
with the compound states around each, a workflow shows its leaf's path, and the diagram draws
the nesting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from statewright import Engine, ManualClock, SQLiteStore, WorkflowType
from statewright.http import create_app
from tests.http.conftest import auth, registry
from tests.unit.test_compound import shop_machine


@pytest.fixture
async def shop_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    engine = Engine(
        SQLiteStore(tmp_path / "shop.db"),
        [WorkflowType(shop_machine())],
        clock=ManualClock(1_800_000_000.0),
    )
    async with engine:
        app = create_app(engine, registry(), manage_engine=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
            yield c


async def test_compound_states_over_http(shop_client: httpx.AsyncClient) -> None:
    r = await shop_client.get("/v1/types/shop", headers=auth("agent"))
    assert r.status_code == 200, r.text
    states = {s["name"]: s for s in r.json()["states"]}
    assert list(states) == [
        "active.cart",
        "active.checkout.paying",
        "active.checkout.confirming",
        "paid",
        "cancelled",
    ]
    assert states["active.checkout.paying"]["within"] == ["active", "active.checkout"]
    assert states["active.cart"]["initial"] and states["paid"]["within"] == []

    r = await shop_client.post(
        "/v1/workflows", json={"type": "shop", "id": "s-1"}, headers=auth("agent")
    )
    assert r.status_code in (200, 201), r.text
    assert r.json()["state"] == "active.cart"
    assert r.json()["summary"] == {"trail": "+active;+cart;"}  # the entry actions ran
    r = await shop_client.post(
        "/v1/workflows/s-1/events", json={"event": "next"}, headers=auth("agent")
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "active.checkout.paying"
    assert set(r.json()["allowed_events"]) == {"next", "back", "restart", "cancel"}

    r = await shop_client.get(
        "/v1/types/shop/diagram?current=active.checkout.paying", headers=auth("viewer")
    )
    assert r.status_code == 200
    assert "    state active {" in r.text and "        state s1 {" in r.text

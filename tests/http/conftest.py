"""One app per test over each store: the HTTP suite runs on SQLite and on PostgreSQL.

Tokens (tenant ``default`` unless named): ``agent`` (roles agent), ``system`` (system),
``boss`` (approver, operator), ``viewer`` (viewer), ``other`` (agent+approver in tenant
``globex``), ``admin`` (admin, approver, every tenant).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from statewright import Engine, ManualClock, SQLiteStore
from statewright.access import TokenRegistry
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from order_fulfilment import order_type as order_type  # noqa: E402  (re-exported)
from refund_approval import refund_type as refund_type  # noqa: E402  (re-exported)

TOKENS = {
    "agent": ("agent-token-1", "agent-7", ["agent"], "default"),
    "system": ("system-token-1", "billing-service", ["system"], "default"),
    "boss": ("boss-token-1", "alice", ["approver", "operator"], "default"),
    "viewer": ("viewer-token-1", "auditor", ["viewer"], "default"),
    "other": ("other-token-1", "mallory", ["agent", "approver"], "globex"),
    "admin": ("admin-token-1", "root", ["admin", "approver"], "*"),
}


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


def registry() -> TokenRegistry:
    r = TokenRegistry()
    for token, actor, roles, tenant in TOKENS.values():
        r.add(token, actor, roles, tenant)
    return r


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "http.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    eng = Engine(store, [agent_task_type(), order_type(), refund_type()], clock=clock)
    async with eng:
        yield eng


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine, registry(), manage_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c

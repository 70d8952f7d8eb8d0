"""Shaped views over HTTP, on both stores: the type's summary on the workflow views, and the
keys the type redacts shown only to operators and admins, on every read that carries context,
payloads or results (workflow view, context, history, steps, listings, transitions, stream).
Summaries are redacted for everyone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from statewright import Engine, ManualClock, SQLiteStore, Worker
from statewright.http import create_app
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.http.conftest import auth, registry
from tests.mcp.redact_app import CARD, DECLINED_CARD, HIDDEN, SECRET_REF, SECRETS, context
from tests.mcp.redact_app import TYPES as PAYMENT_TYPES


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "http.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, PAYMENT_TYPES, clock=clock) as eng:
        yield eng


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(engine, registry(), manage_engine=False)
    app.state.stream_poll_interval = 0.02
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://statewright") as c:
        yield c


async def charged(engine: Engine) -> None:
    await engine.start("payment", context(), workflow_id="p-ok", actor="t")
    await engine.start("payment", context(DECLINED_CARD), workflow_id="p-bad", actor="t")
    await Worker(engine).run_until_idle()
    assert (await engine.get("p-ok")).state == "awaiting_warehouse"
    assert (await engine.get("p-bad")).state == "declined"


READS = (
    "/v1/workflows/p-ok",
    "/v1/workflows/p-bad",
    "/v1/workflows/p-ok/context",
    "/v1/workflows/p-bad/context",
    "/v1/workflows/p-ok/history",
    "/v1/workflows/p-bad/history",
    "/v1/workflows/p-ok/steps",
    "/v1/workflows/p-bad/steps",
    "/v1/workflows",
    "/v1/transitions",
    # Long-polling GETs (tests/http/test_longpoll.py): the same view, redacted the same way.
    "/v1/workflows/p-ok?wait_for_state=declined&timeout=0",
    "/v1/workflows/p-bad?after_version=0",
)


async def read_all(client: httpx.AsyncClient, who: str) -> dict[str, str]:
    out = {}
    for path in READS:
        r = await client.get(path, headers=auth(who))
        assert r.status_code == 200, (path, r.text)
        out[path] = r.text
    total = len((await client.get("/v1/transitions", headers=auth("admin"))).json()["items"])
    r = await client.get(f"/v1/stream?limit={total}", headers=auth(who))
    assert r.status_code == 200 and r.text.count("event: transition") == total
    out["/v1/stream"] = r.text
    return out


async def test_readers_never_see_redacted_keys_operators_do(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await charged(engine)
    for who in ("agent", "viewer", "system"):
        for path, text in (await read_all(client, who)).items():
            for secret in SECRETS:
                assert secret not in text, (who, path, text)
            assert "stripe_secret_ref" not in text, (who, path, text)
        ctx = (await client.get("/v1/workflows/p-ok/context", headers=auth(who))).json()
        assert ctx["customer"] == {"name": "Ada", "card": {"exp": "12/30"}}
        assert ctx["receipt"] == {}  # receipt.card is redacted
        assert ctx["_internal"] == HIDDEN  # "_" keys are only left out of summaries
        steps = (await client.get("/v1/workflows/p-bad/steps", headers=auth(who))).json()
        assert steps["items"][0]["error"] == "FatalError: card [redacted] was declined"

    for who in ("boss", "admin"):  # operator, admin: everything but the summaries
        texts = await read_all(client, who)
        for path in READS[2:8]:
            assert SECRET_REF in texts[path] or DECLINED_CARD in texts[path], (who, path)
        assert CARD in texts["/v1/stream"] and SECRET_REF in texts["/v1/transitions"]
        ctx = (await client.get("/v1/workflows/p-ok/context", headers=auth(who))).json()
        assert ctx == (await engine.get("p-ok")).context
        view = (await client.get("/v1/workflows/p-bad", headers=auth(who))).json()
        assert DECLINED_CARD in view["last_error"]
        for secret in SECRETS:
            assert secret not in json.dumps(view["summary"]) + view["summary_text"]


async def test_the_workflow_view_carries_the_types_summary(
    client: httpx.AsyncClient, engine: Engine
) -> None:
    await charged(engine)
    await engine.start("payment_plain", context(), workflow_id="plain", actor="t")
    await engine.start("payment_broken", context(), workflow_id="broken", actor="t")
    for who in ("agent", "admin"):
        view = (await client.get("/v1/workflows/p-ok", headers=auth(who))).json()
        assert view["summary_text"] == "Payment of 149.99 EUR captured; waiting for the warehouse"
        assert view["summary"] == {"amount": 149.99, "card_seen": False}
        listed = (await client.get("/v1/workflows?type=payment", headers=auth(who))).json()
        assert {w["summary_text"] for w in listed["items"]} == {
            "Payment of 149.99 EUR captured; waiting for the warehouse",
            "Payment of 149.99 EUR pending",
        }
        # No hook, and a hook that raises: the default summary, without "_" and redacted keys.
        for wid in ("plain", "broken"):
            view = (await client.get(f"/v1/workflows/{wid}", headers=auth(who))).json()
            assert view["summary_text"] is None
            assert set(view["summary"]) == {"amount", "currency", "customer"}

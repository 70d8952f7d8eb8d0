"""Schemathesis over the app's whole OpenAPI document, on SQLite.

Every operation gets generated requests (valid and invalid: schemathesis's examples, coverage
and fuzzing phases) as the admin token (every tenant, every non-approval event, approvals) and
as an agent (one tenant, few events). Checked on each response: no 5xx, the status code, the
content type, the headers and the body as documented, schema-valid requests accepted, 405s
with a correct ``Allow``. Path ids are sometimes those of seeded workflows (in several states
and two tenants), so the happy paths are reached too, not only 404s.

The stream (``/v1/stream``) never ends by itself: schemathesis cuts it at its request timeout
and checks the events it got. Bounded: derandomized, ``MAX_EXAMPLES`` per operation.

``negative_data_rejection`` is left out: it decides from the case as generated, and here the
Authorization header the test adds (and hypothesis's shrinking, schemathesis#4332) can turn a
"negative" case into a valid request; the API's refusals of bad input (unknown query
parameters and body fields, wrong types, bad ids) are asserted one by one in test_api.py.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import settings
from hypothesis import strategies as st
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import negative_data_rejection

from statewright import Engine, ManualClock, SQLiteStore
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from tests.http.conftest import auth, order_type, refund_type, registry

MAX_EXAMPLES = 25
STREAM_TIMEOUT = 0.3
"""Seconds a stream is read before it is cut (the stream polls every 0.02 s here)."""

# Seeded before the run: (token, type, id, events to fire as admin).
SEEDS: list[tuple[str, str, str, list[tuple[str, dict[str, Any]]]]] = [
    ("agent", "agent_task", "seed-planned", []),
    ("agent", "agent_task", "seed-running", [("start", {})]),
    ("agent", "agent_task", "seed-paused", [("start", {}), ("request_approval", {})]),
    ("agent", "agent_task", "seed-done", [("start", {}), ("complete", {})]),
    ("system", "order_fulfilment", "seed-order", []),
    (
        "system",
        "refund_approval",
        "seed-refund",
        [
            ("validated", {}),
            (
                "policy_checked",
                {
                    "amount_cents": 9_000,
                    "auto_approve_under_cents": 5_000,
                    "hard_limit_cents": 100_000,
                },
            ),
        ],
    ),
    ("other", "agent_task", "seed-globex", [("start", {})]),
]
SEEDED_IDS = [seed[2] for seed in SEEDS]
TYPE_NAMES = ["agent_task", "order_fulfilment", "refund_approval"]


DB = Path(tempfile.gettempdir()) / f"statewright-schemathesis-{uuid.uuid4().hex}" / "st.db"
"""Created when the app starts (on the first request), removed by the ``app`` fixture."""
APP = create_app(
    Engine(
        SQLiteStore(DB),
        [agent_task_type(), order_type(), refund_type()],
        clock=ManualClock(1_800_000_000.0),
    ),
    registry(),
)
APP.state.stream_poll_interval = 0.02

schema = schemathesis.openapi.from_dict(APP.openapi())
schema.app = APP  # what from_asgi does, without starting the app at import


@schema.hook("flatmap_path_parameters")
def _real_ids(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """Half the time, point the path at a seeded workflow or a registered type."""
    if not path_parameters:
        return st.just(path_parameters)
    # Every value a strategy: the others (a step's name) stay as generated.
    real: dict[str, Any] = {k: st.just(v) for k, v in path_parameters.items()}
    if "workflow_id" in real:
        real["workflow_id"] = st.sampled_from(SEEDED_IDS)
    if "name" in real:
        real["name"] = st.sampled_from(TYPE_NAMES)
    if not {"workflow_id", "name"} & set(real):
        return st.just(path_parameters)
    return st.one_of(st.just(path_parameters), st.fixed_dictionaries(real))


@pytest.fixture(scope="module")
def app() -> Iterator[FastAPI]:
    """The app, seeded. Schemathesis's ASGI client runs it in its own event loop thread, and
    runs its lifespan there too (which opens the engine; closed by ``shutdown_lifespans``)."""
    try:
        with asgi.get_client(APP) as client:
            for who, type_, wid, events in SEEDS:
                body = {"type": type_, "id": wid}
                r = client.post("/v1/workflows", json=body, headers=auth(who))
                assert r.status_code == 201, r.text
                for event, payload in events:
                    r = client.post(
                        f"/v1/workflows/{wid}/events",
                        json={"event": event, "payload": payload},
                        headers=auth("admin"),
                    )
                    assert r.status_code == 200, r.text
        yield APP
    finally:
        asgi.shutdown_lifespans()
        shutil.rmtree(DB.parent, ignore_errors=True)


@pytest.mark.parametrize("who", ["admin", "agent"])
@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
)
def test_openapi_contract(case: schemathesis.Case, app: FastAPI, who: str) -> None:
    """``app`` (seeded) is what ``schema.app`` points the requests at."""
    streaming = case.operation.path == "/v1/stream"
    case.call_and_validate(
        headers=auth(who),
        timeout=STREAM_TIMEOUT if streaming else 10.0,
        excluded_checks=[negative_data_rejection],
    )

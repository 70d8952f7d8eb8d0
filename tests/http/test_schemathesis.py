"""Schemathesis over the app's whole OpenAPI document, on SQLite.

Every operation gets generated requests (valid and invalid: schemathesis's examples, coverage
and fuzzing phases) as the admin token (every tenant, every non-approval event, approvals), and
the examples and fuzzing phases as an agent (one tenant, few events). The coverage phase's
1,314 boundary cases run as the admin only: as an agent too they doubled the file's cost, and
what an agent may not do is asserted one by one in test_auth.py and test_api.py. Checked on
each response: no 5xx, the status code, the content type, the headers and the body as
documented, schema-valid requests accepted, 405s with a correct ``Allow``. Path ids are
sometimes those of seeded workflows (in several states and two tenants), so the happy paths are
reached too, not only 404s.

The stream (``/v1/stream``) never ends by itself: schemathesis cuts it at its request timeout
and checks the events it got. Bounded: derandomized, ``MAX_EXAMPLES`` fuzzing cases per
operation and role: 3 by default, 12 under ``--torture`` (tests/torture.py). The fuzzing
phase is the repeated random try; by default every operation still gets, per role, its
explicit examples and 3 generated cases (about 100 per role: each operation's valid and
invalid shapes, seeded ids half the time), and as the admin all 1,314 coverage cases, whose
number does not depend on ``MAX_EXAMPLES``. The 12 of ``--torture`` (about 380 generated
cases per role) cost 20 CPU-seconds more.

The app runs with a small body limit (``BODY_LIMIT``). Hostile bodies are added as explicit
cases, checked the same way: every operation that takes a body, sent one over the limit,
answers the documented 413; JSON values nested 100, 256 and 10,000 levels deep in the fields
that take any JSON (``input``, ``payload``, a step's ``result``) get a 4xx JSON error as
documented, never a 5xx, and the workflow's reads still answer as documented afterwards.
``positive_data_acceptance`` is left out for those: such bodies are schema-valid (JSON Schema
cannot say "at most 1 MiB" or "at most 64 levels") and refused on purpose.

``negative_data_rejection`` is left out: it decides from the case as generated, and here the
Authorization header the test adds (and hypothesis's shrinking, schemathesis#4332) can turn a
"negative" case into a valid request; the API's refusals of bad input (unknown query
parameters and body fields, wrong types, bad ids) are asserted one by one in test_api.py.
"""

from __future__ import annotations

import json
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
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.pytest._test_builder import build_operation_test
from schemathesis.python import asgi
from schemathesis.python._constants.orchestrator import make_constants_value_source
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from schemathesis.specs.openapi.schemas import OpenApiSchema

from statewright import Engine, ManualClock, SQLiteStore, paging
from statewright.engine.builtin import agent_task_type
from statewright.http import create_app
from tests.http.conftest import auth, order_type, refund_type, registry
from tests.torture import examples

MAX_EXAMPLES = examples(12, 3)
BODY_LIMIT = 64 * 1024
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
STORE_IDS = {"seed-globex": "globex:seed-globex"}
"""Ids that callers seeing every tenant (admin) give tenant-qualified (statewright.ids)."""
SEEDED_IDS = [seed[2] for seed in SEEDS] + list(STORE_IDS.values())
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
    max_body_bytes=BODY_LIMIT,
    max_wait=0.05,  # long-polling GETs: answered at once, whatever timeout is generated
)
APP.state.stream_poll_interval = 0.02

ASGI_APP: Any = APP
"""The app for schemathesis's ASGI client, which types an app's callable with ``dict`` where
Starlette's has ``MutableMapping``: the same call at run time."""


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


def _schema(config: SchemathesisConfig | None = None) -> OpenApiSchema:
    loaded = schemathesis.openapi.from_dict(APP.openapi(), config=config)
    loaded.app = APP  # what from_asgi does, without starting the app at import
    loaded.hook("flatmap_path_parameters")(_real_ids)
    return loaded


schema = _schema()
"""The document as schemathesis reads it: cases are built from it (the hostile bodies)."""


@pytest.fixture(scope="module")
def app() -> Iterator[FastAPI]:
    """The app, seeded. Schemathesis's ASGI client runs it in its own event loop thread, and
    runs its lifespan there too (which opens the engine; closed by ``shutdown_lifespans``)."""
    try:
        with asgi.get_client(ASGI_APP) as client:
            for who, type_, wid, events in SEEDS:
                body = {"type": type_, "id": wid}
                r = client.post("/v1/workflows", json=body, headers=auth(who))
                assert r.status_code == 201, r.text
                for event, payload in events:
                    r = client.post(
                        f"/v1/workflows/{STORE_IDS.get(wid, wid)}/events",
                        json={"event": event, "payload": payload},
                        headers=auth("admin"),
                    )
                    assert r.status_code == 200, r.text
        yield APP
    finally:
        asgi.shutdown_lifespans()
        shutil.rmtree(DB.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[asgi.ASGIClient]:
    """One session for every request of the module. Given no session, schemathesis's ASGI
    transport builds one per request (a ``requests.Session`` and its adapters); and
    ``trust_env`` off spares each request the proxy and netrc look-ups in the environment
    (``os.environ`` walked twice a request), which an in-process app never uses. The app sets
    no cookies, so nothing is carried from one request to the next."""
    with asgi.get_client(ASGI_APP) as session:
        session.trust_env = False
        yield session


SETTINGS = settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None)


def _call_and_validate(case: schemathesis.Case[Any], who: str, session: asgi.ASGIClient) -> None:
    streaming = case.operation.path == "/v1/stream"
    # (A generated cursor is schema-valid base64url that no page returned: 409 invalid_cursor,
    # which the document says, not a 422 for a request the schema admits.)
    case.call_and_validate(
        session=session,
        headers=auth(who),
        timeout=STREAM_TIMEOUT if streaming else 10.0,
        excluded_checks=[negative_data_rejection],
    )


OPERATIONS = [
    f"{method.upper()} {path}"
    for path, item in APP.openapi()["paths"].items()
    for method in item
    if method in {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
]


@pytest.fixture(scope="module")
def schemas(app: FastAPI) -> dict[str, tuple[Any, FeedbackSources]]:
    """Per role: the schema and schemathesis's feedback (the constants it draws values from)."""
    agent = _schema(SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}}))
    return {
        who: (loaded, FeedbackSources(constants_value_source=make_constants_value_source(loaded)))
        for who, loaded in (("admin", schema), ("agent", agent))
    }


@pytest.mark.parametrize("who", ["admin", "agent"])
@pytest.mark.parametrize("label", OPERATIONS)
def test_openapi_contract(
    schemas: dict[str, tuple[Any, FeedbackSources]],
    client: asgi.ASGIClient,
    label: str,
    who: str,
) -> None:
    """One operation's schemathesis test, built here rather than by ``schema.parametrize()``:
    that builds every operation's explicit and coverage cases at collection, on every xdist
    worker (6 CPU-seconds each), for tests only one of them runs. The same builder
    (``build_operation_test``, what ``parametrize`` and schemathesis's lazy schemas call)
    with the same seed per operation. It is a private name (pinned: schemathesis 4): the
    public way to build at run time, a lazy schema (``schemathesis.pytest.from_fixture``),
    fails under pytest 9.2, as it sets ``request.node._nodeid``, which pytest no longer has."""
    loaded, feedback = schemas[who]
    method, path = label.split(" ", 1)
    checked = 0

    def check(case: schemathesis.Case[Any], who: str) -> None:
        nonlocal checked
        checked += 1
        _call_and_validate(case, who, client)

    test = build_operation_test(
        config=loaded.config,
        operation=loaded[path][method],
        test_func=check,
        given_kwargs={},
        feedback=feedback,
        explicit_settings=SETTINGS,
    )
    test(who=who)
    assert checked > 0, f"schemathesis made no case for {label}"  # a builder that does nothing


# -- hostile bodies ------------------------------------------------------------------------

BODY_OPERATIONS = sorted(
    (path, method.upper())
    for path, item in APP.openapi()["paths"].items()
    for method, operation in item.items()
    if "requestBody" in operation
)
PATH_VALUES = {"workflow_id": "seed-running", "step": "charge"}
# A valid body for each, but for the field that takes any JSON value (``None``: no such field).
BODIES: dict[tuple[str, str], tuple[dict[str, Any], str | None]] = {
    ("/v1/workflows", "POST"): ({"type": "agent_task"}, "input"),
    ("/v1/workflows/{workflow_id}/events", "POST"): ({"event": "block"}, "payload"),
    ("/v1/workflows/{workflow_id}/inputs", "POST"): ({"name": "note"}, "payload"),
    ("/v1/workflows/{workflow_id}/steps/{step}/resolve", "POST"): (
        {"verdict": "applied", "reason": "checked by hand"},
        "result",
    ),
    ("/v1/workflows/{workflow_id}/cancel", "POST"): ({"reason": "no longer needed"}, None),
    ("/v1/approvals", "POST"): ({"workflow_id": "seed-paused", "decision": "approve"}, None),
    ("/v1/workflows/{workflow_id}/resume", "POST"): ({"reason": "fixed upstream"}, None),
    ("/v1/workflows/{workflow_id}/timers", "POST"): ({"event": "fail", "after": 60}, "payload"),
    ("/v1/workflows/{workflow_id}/fork", "POST"): ({"reason": "start over"}, None),
    ("/v1/workflows/{workflow_id}/move", "POST"): (
        {"state": "running", "reason": "by hand"},
        None,
    ),
    ("/v1/workflows/{workflow_id}/context", "PATCH"): (
        {"patch": {"note": "x"}, "reason": "fixed by hand"},
        "patch",
    ),
    ("/v1/schedules", "POST"): ({"id": "s", "type": "agent_task", "cron": "* * * * *"}, "input"),
    ("/v1/subscriptions", "POST"): ({"name": "s", "url": "http://h.example/x"}, None),
    ("/v1/bulk", "POST"): ({"action": "cancel", "reason": "incident", "dry_run": True}, None),
}
ANY_JSON = [op for op in BODY_OPERATIONS if BODIES[op][1] is not None]
READS = [
    "/v1/workflows/{workflow_id}",
    "/v1/workflows/{workflow_id}/context",
    "/v1/workflows/{workflow_id}/history",
    "/v1/workflows",
    "/v1/transitions",
]


def test_every_operation_with_a_body_has_hostile_cases() -> None:
    assert sorted(BODIES) == BODY_OPERATIONS
    assert len(ANY_JSON) == 7


def hostile_case(operation: tuple[str, str], body: bytes) -> schemathesis.Case[Any]:
    path, method = operation
    names = {p.name for p in schema[path][method].path_parameters}
    return schema[path][method].Case(
        path_parameters={k: v for k, v in PATH_VALUES.items() if k in names},
        body=body,  # bytes: sent as they are
        media_type="application/json",
    )


def nested(depth: int, shape: str) -> bytes:
    """A JSON value ``depth`` levels deep, written out (``json.dumps`` recurses, and stops
    long before 10,000 levels)."""
    if shape == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    return b"[" * depth + b"1" + b"]" * depth


@pytest.mark.parametrize("operation", BODY_OPERATIONS, ids="{0[1]} {0[0]}".format)
def test_a_body_over_the_limit_is_refused_413_as_documented(
    client: asgi.ASGIClient, operation: tuple[str, str]
) -> None:
    fields, _ = BODIES[operation]
    body = json.dumps({**fields, "pad": "x" * BODY_LIMIT}).encode()
    assert len(body) > BODY_LIMIT
    response = hostile_case(operation, body).call_and_validate(
        session=client,
        headers=auth("admin"),
        excluded_checks=[negative_data_rejection, positive_data_acceptance],
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"] == {
        "code": "payload_too_large",
        "message": f"the request body is over the limit of {BODY_LIMIT} bytes",
        "limit": BODY_LIMIT,
    }


@pytest.mark.parametrize("shape", ["object", "array"])
@pytest.mark.parametrize("depth", [100, 256, 10_000])
@pytest.mark.parametrize("operation", ANY_JSON, ids="{0[1]} {0[0]}".format)
def test_deep_json_gets_a_4xx_json_error_never_a_5xx(
    client: asgi.ASGIClient, operation: tuple[str, str], depth: int, shape: str
) -> None:
    fields, field = BODIES[operation]
    assert field is not None
    value = nested(depth, shape)
    if field != "result":  # input and payload are objects: the deep value goes inside
        value = b'{"deep":' + value + b"}"
    body = json.dumps(fields).encode()[:-1] + b', "' + field.encode() + b'": ' + value + b"}"
    assert len(body) < BODY_LIMIT  # refused for its depth, not its size
    response = hostile_case(operation, body).call_and_validate(
        session=client,
        headers=auth("admin"),
        excluded_checks=[negative_data_rejection, positive_data_acceptance],
    )
    # Whatever got stored stays readable: the reads of the workflow answer as documented.
    wid = response.json()["id"] if response.status_code == 201 else PATH_VALUES["workflow_id"]
    for path in READS:
        names = {p.name for p in schema[path]["GET"].path_parameters}
        read = schema[path]["GET"].Case(path_parameters={"workflow_id": wid} if names else {})
        read.call_and_validate(
            session=client, headers=auth("admin"), excluded_checks=[negative_data_rejection]
        )
    # The documented JSON error (call_and_validate checked the status, type and shape).
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["code"], response.text


# -- the document's edges, where it and the engine must agree ---------------------------------

OPENAPI = APP.openapi()
TEXTS = ["", " ", "\u00a0\t", "\x1c", "\x85", "\ufeff", "\u2028x", "x", "x" * 1000]
TEXTS += ["x" * 1001, "x" * 10_000]
TEXTS += ["x" * 10_001]
# (method, path, a valid body, the text field tried with every value of TEXTS)
EDGES: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/v1/workflows/{workflow_id}/resume", {}, "reason"),
    ("POST", "/v1/workflows/{workflow_id}/fork", {}, "reason"),
    ("POST", "/v1/workflows/{workflow_id}/move", {"state": "running"}, "reason"),
    ("PATCH", "/v1/workflows/{workflow_id}/context", {"patch": {"a": 1}}, "reason"),
    (
        "POST",
        "/v1/workflows/{workflow_id}/steps/{step}/resolve",
        {"verdict": "not_applied"},
        "reason",
    ),
    ("POST", "/v1/approvals", {"workflow_id": "edge-1", "decision": "approve"}, "approver"),
    ("POST", "/v1/workflows/{workflow_id}/timers", {"after": 60}, "event"),
    ("POST", "/v1/workflows/{workflow_id}/cancel", {}, "reason"),  # last: it ends edge-1
]


def _validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema validator of ``schema``, its ``$ref``s resolved in the document."""
    import jsonschema

    return jsonschema.Draft202012Validator({**schema, "components": OPENAPI["components"]})


def _body_schema(method: str, path: str) -> dict[str, Any]:
    schema: dict[str, Any] = OPENAPI["paths"][path][method.lower()]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    return schema


def test_a_schema_valid_value_is_never_refused_as_invalid_input(
    client: asgi.ASGIClient,
) -> None:
    """What the document admits, the server takes (a 2xx, or a 404/409 about the workflow,
    never 422), and what it refuses is 422: reasons (the engine's 1,000-character limit, and
    text with nothing but whitespace), an approver's name, a timer's event (its default key),
    and cursors (base64url that no page returned is 409 invalid_cursor, not 422)."""
    edge = {"type": "agent_task", "id": "edge-1"}
    r = client.post("/v1/workflows", json=edge, headers=auth("admin"))
    assert r.status_code == 201, r.text
    checked = 0
    for method, template, body, field in EDGES:
        valid = _validator(_body_schema(method, template))
        path = template.format(workflow_id="edge-1", step="charge")
        for text in TEXTS:
            sent = {**body, field: text}
            admitted = valid.is_valid(sent)
            r = client.request(method, path, json=sent, headers=auth("admin"))
            assert r.status_code < 500, r.text
            if admitted:
                assert r.status_code != 422, (path, field, text[:20], r.text)
            else:
                assert r.status_code == 422, (path, field, text[:20], r.text)
            checked += admitted
    assert checked >= len(EDGES) * 3  # (the limits are not all refusing)

    workflows = OPENAPI["paths"]["/v1/workflows"]["get"]["parameters"]
    cursor = next(p for p in workflows if p["name"] == "cursor")["schema"]
    good = paging.encode(1_800_000_000.0, "seed-running")
    for value, status in (
        (good, 200),
        ("bm90IGpzb24", 409),  # base64url of "not json"
        (paging.encode(1.5), 409),
        ("not a cursor", 422),
        ("A" * 2001, 422),
    ):
        assert _validator(cursor).is_valid(value) == (status != 422), value
        for path in ("/v1/workflows", "/v1/stuck", "/v1/workflows/edge-1/steps"):
            r = client.get(path, params={"cursor": value}, headers=auth("admin"))
            if status == 200 and path == "/v1/stuck":
                good_stuck = paging.encode("agent_task", "running", 1.0, "x")
                r = client.get(path, params={"cursor": good_stuck}, headers=auth("admin"))
            assert r.status_code == status, (path, value, r.text)
            if status == 409:
                assert r.json()["error"]["code"] == "invalid_cursor"

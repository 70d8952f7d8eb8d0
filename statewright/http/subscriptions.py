"""``/v1/subscriptions``: transition webhooks and Python consumers (see
:mod:`statewright.engine.subscriptions`; who may: :mod:`statewright.access.subscriptions`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from statewright.access import subscriptions as subs
from statewright.http.api import _ERRORS
from statewright.http.deps import AccessDep, KnownQuery
from statewright.http.inputs import BodyIn
from statewright.http.jsonbody import JSONBody
from statewright.store.subscriptions import Subscription, SubscriptionFilter

router = APIRouter(
    prefix="/v1", responses=_ERRORS, dependencies=[KnownQuery], tags=["subscriptions"]
)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="The subscription's name.")]
Names = list[Annotated[str, Field(min_length=1, max_length=200)]]


class FilterIn(BodyIn):
    model_config = ConfigDict(extra="forbid")

    types: Names = Field(default_factory=list, max_length=100)
    states: Names = Field(default_factory=list, max_length=100, description="States entered.")
    events: Names = Field(default_factory=list, max_length=100)
    terminal: bool = Field(default=False, description="Only transitions into a terminal state.")
    topics: Names = Field(
        default_factory=list,
        max_length=100,
        description="Only messages emitted under these topics, each delivered on its own.",
    )
    tenant: str | None = Field(default=None, max_length=200)


class SubscriptionIn(BodyIn):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "failures",
                    "url": "https://hooks.example.com/statewright",
                    "filter": {"states": ["failed"]},
                    "secret": "s3cret",
                }
            ]
        },
    )

    name: str = Field(pattern=NAME_PATTERN)
    filter: FilterIn = Field(default_factory=FilterIn)
    url: str | None = Field(default=None, max_length=2000, description="The webhook's URL.")
    consumer: bool = Field(default=False, description="Read by a Python Consumer instead.")
    headers: dict[str, Annotated[str, Field(max_length=4000)]] = Field(
        default_factory=dict, max_length=20, description="Extra request headers."
    )
    secret: str | None = Field(
        default=None,
        max_length=200,
        description="Signs each body: `X-Statewright-Signature: sha256=<hex HMAC-SHA256>`.",
    )
    paused: bool = False
    start: int | None = Field(
        default=None,
        ge=0,
        description="A new subscription hands on from after this log seq (0: the whole log); "
        "default: from now.",
    )


class SubscriptionOut(BaseModel):
    name: str
    filter: dict[str, Any]
    url: str | None
    consumer: bool
    headers: list[str] = Field(description="The extra headers' names (values never shown).")
    signed: bool = Field(description="Whether a secret signs the bodies (never shown).")
    paused: bool
    cursor: int = Field(description="The log seq up to which it was handed on.")
    created_at: float
    updated_at: float


class SubscriptionList(BaseModel):
    items: list[SubscriptionOut]


class SubscriptionRemoved(BaseModel):
    removed: bool


@router.post(
    "/subscriptions",
    response_model=SubscriptionOut,
    status_code=201,
    summary="Operators: declare a transition webhook or consumer subscription",
    description="Creates the subscription, or changes the one of that name (its cursor kept). "
    "Needs the operator or admin role, with a token that sees every tenant. 409 "
    "`invalid_subscription` for both or neither of `url` and `consumer`, a URL that is not "
    "http(s).",
)
async def declare(body: SubscriptionIn, access: AccessDep) -> Response:
    subs.may_manage(access)
    f = body.filter
    sub = Subscription(
        body.name,
        SubscriptionFilter(
            types=tuple(f.types),
            states=tuple(f.states),
            events=tuple(f.events),
            terminal=f.terminal,
            topics=tuple(f.topics),
            tenant=f.tenant,
        ),
        url=body.url,
        consumer=body.consumer,
        headers=body.headers,
        secret=body.secret,
        paused=body.paused,
    )
    return JSONBody((await subs.declare(access, sub, body.start)).to_json(), 201)


@router.get("/subscriptions", response_model=SubscriptionList, summary="Operators: every one")
async def listing(access: AccessDep) -> Response:
    return JSONBody({"items": [r.to_json() for r in await subs.listing(access)]})


@router.get("/subscriptions/{name}", response_model=SubscriptionOut, summary="Operators: one")
async def get_subscription(name: Name, access: AccessDep) -> Response:
    return JSONBody((await subs.get(access, name)).to_json())


@router.delete(
    "/subscriptions/{name}", response_model=SubscriptionRemoved, summary="Operators: remove one"
)
async def remove(name: Name, access: AccessDep) -> Response:
    await subs.remove(access, name)
    return JSONBody({"removed": True})


@router.post(
    "/subscriptions/{name}/pause",
    response_model=SubscriptionOut,
    summary="Operators: pause one (new log entries wait)",
)
async def pause(name: Name, access: AccessDep) -> Response:
    return JSONBody((await subs.set_paused(access, name, True)).to_json())


@router.post(
    "/subscriptions/{name}/resume",
    response_model=SubscriptionOut,
    summary="Operators: resume one from where it paused",
)
async def resume(name: Name, access: AccessDep) -> Response:
    return JSONBody((await subs.set_paused(access, name, False)).to_json())

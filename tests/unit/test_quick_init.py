"""``quick_init``: a frozen dataclass built by it behaves as ``dataclass(frozen=True)``'s own
``__init__`` would have built it."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from statewright.types import Lease, TimerSpec, TransitionWrite, quick_init


@dataclasses.dataclass(frozen=True)
class Plain:
    a: int
    b: str = "b"
    c: dict[str, Any] = dataclasses.field(default_factory=dict)


@quick_init
@dataclasses.dataclass(frozen=True)
class Quick:
    a: int
    b: str = "b"
    c: dict[str, Any] = dataclasses.field(default_factory=dict)


def test_it_builds_what_the_dataclass_init_builds() -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, "x"), {}),
        ((), {"a": 1, "c": {"k": 1}}),
    ]
    for args, kwargs in calls:
        assert dataclasses.asdict(Quick(*args, **kwargs)) == dataclasses.asdict(
            Plain(*args, **kwargs)
        )
    assert Quick(1).c is not Quick(1).c  # a fresh default per instance
    assert str(inspect.signature(Quick)) == str(inspect.signature(Plain))


def test_wrong_calls_fail_as_they_would() -> None:
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick(1, d=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Quick(1, "x", {}, 4)  # type: ignore[call-arg]


def test_the_records_stay_frozen_comparable_and_replaceable() -> None:
    w = TransitionWrite("w", 1, "a", "b", "go", {}, "me", 1.0, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.to_state = "c"  # type: ignore[misc]
    assert w == TransitionWrite("w", 1, "a", "b", "go", {}, "me", 1.0, {})
    assert dataclasses.replace(w, to_state="c").to_state == "c"
    assert hash(Lease("me", 3)) == hash(Lease("me", 3))
    assert TimerSpec(1.0, "e").payload == {}


def test_it_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError, match="__post_init__"):
        quick_init(Checked)

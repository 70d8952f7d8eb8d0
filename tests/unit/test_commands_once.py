"""Each command is written once: one engine method per command (no twins that differ only in
what they return), Access naming the engine's own function with its rule, and no surface
reaching past Access for the engine or its store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import statewright
from statewright.access import Access, Principal
from statewright.access.guard import command
from statewright.clock import ManualClock
from statewright.definition.machine import MachineBuilder
from statewright.engine import Engine, Posted, Started
from statewright.engine.core import part
from statewright.engine.transitions import Dispatched
from statewright.errors import Forbidden, IllegalTransition
from statewright.store import SQLiteStore

TWINS = ("create", "dispatch", "decide_ex", "cancel_ex", "put_input")
"""Removed: each was a second method for a command, differing only in what it returned."""

DOOR = (
    MachineBuilder("door")
    .state("closed", initial=True)
    .state("open")
    .state("gone", terminal=True)
    .event("open", roles=["keeper"])
    .event("close")
    .event("approval_granted", approval=True)
    .event("approval_denied", approval=True)
    .event("cancel")
    .transition("open", "closed", "open")
    .transition("close", "open", "closed")
    .transition("approval_granted", "closed", "gone")
    .transition("approval_denied", "closed", "closed")
    .transition("cancel", "closed", "gone")
    .build()
)


def test_one_method_per_command() -> None:
    for twin in TWINS:
        assert not hasattr(Engine, twin), f"Engine.{twin} is back"
        assert not hasattr(Access, twin), f"Access.{twin} is back"


def test_access_names_the_engines_own_command() -> None:
    """Every command Access offers is the function the engine forwards to: one definition
    (arguments, docstring, errors), two fronts."""
    commands = {k: v for k, v in vars(Access).items() if isinstance(v, command)}
    assert {"send", "decide", "cancel", "post_input", "resume", "fork", "move_to"} <= set(commands)
    for name, guarded in commands.items():
        if name == "cancel_timer":  # Access raises TimerNotFound where the engine says False
            continue
        forwarded = vars(Engine)[name]
        assert isinstance(forwarded, part)
        assert guarded.fn is forwarded.fn, name


async def test_the_richer_return_carries_the_row(tmp_path: Path) -> None:
    async with Engine(SQLiteStore(tmp_path / "db"), [DOOR], clock=ManualClock()) as engine:
        started = await engine.start("door", workflow_id="d1")
        assert isinstance(started, Started)
        assert (started.row.state, started.created) == ("closed", True)
        again = await engine.start("door", workflow_id="d1")
        assert (again.row.version, again.created) == (1, False)

        sent = await engine.send("d1", "open", idempotency_key="k1")
        assert isinstance(sent, Dispatched)
        assert (sent.row.state, sent.replayed, sent.applied) == ("open", False, True)
        assert (await engine.send("d1", "open", idempotency_key="k1")).replayed

        sent = await engine.send("d1", "close")
        decided = await engine.decide("d1", False, approver="ann", idempotency_key="k2")
        assert isinstance(decided, Dispatched)
        assert (decided.row.state, decided.row.version) == ("closed", sent.row.version + 1)
        assert (await engine.approve("d1", "ann")).row.state == "gone"

        await engine.start("door", workflow_id="d2")
        posted = await engine.post_input("d2", "note", {"n": 1}, idempotency_key="k3")
        assert isinstance(posted, Posted) and posted.created
        retried = await engine.post_input("d2", "note", {"n": 1}, idempotency_key="k3")
        assert (retried.item.id, retried.created) == (posted.item.id, False)

        cancelled = await engine.cancel("d2", reason="no longer needed", actor="ops")
        assert isinstance(cancelled, Dispatched)
        assert (cancelled.row.state, cancelled.replayed) == ("gone", False)


async def test_access_applies_the_rules_of_each_command_the_same_way(tmp_path: Path) -> None:
    async with Engine(SQLiteStore(tmp_path / "db"), [DOOR], clock=ManualClock()) as engine:
        await engine.start("door", workflow_id="d1", tenant="acme")
        await engine.start("door", workflow_id="acme:d2", tenant="acme")
        agent = Access(engine, Principal("bot", frozenset({"agent"}), "acme"))
        keeper = Access(engine, Principal("kim", frozenset({"keeper", "approver"}), "acme"))
        viewer = Access(engine, Principal("vic", frozenset({"viewer"}), "acme"))

        with pytest.raises(Forbidden, match="needs one of the roles: keeper"):
            await agent.send("d2", "open")
        with pytest.raises(Forbidden, match="needs the operator or admin role"):
            await keeper.resume("d2", reason="try again")
        with pytest.raises(Forbidden, match="is read-only"):
            await viewer.post_input("d2", "note", {})
        with pytest.raises(TypeError, match="takes no actor"):
            await keeper.send("d2", "open", actor="someone-else")

        # A refusal names only the events this caller may fire, by the id it knows.
        with pytest.raises(IllegalTransition) as refused:
            await agent.send("d2", "close")
        assert (refused.value.workflow_id, refused.value.allowed) == ("d2", ["cancel"])

        sent = await keeper.send("d2", "open")
        assert (sent.row.id, sent.row.state) == ("acme:d2", "open")
        assert (await engine.history("acme:d2"))[-1].actor == "kim"  # the caller, always
        # The approver defaults to the caller.
        await keeper.send("d2", "close")
        approved = await keeper.decide("d2", True)
        assert approved.row.state == "gone"
        assert (await engine.history("acme:d2"))[-1].payload == {"approver": "kim"}


SURFACES = ["http", "mcp_server", "cli"]


def _reaches_past(path: Path) -> list[str]:
    """``access.engine...`` and ``<anything>.engine.store`` / ``engine.store`` reads."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        chain = ast.unparse(node)
        if chain.startswith("access.engine.") or chain.endswith("engine.store"):
            found.append(f"{path.name}:{node.lineno}: {chain}")
    return found


def test_no_surface_reaches_past_access() -> None:
    root = Path(statewright.__file__).parent
    allowed = {
        # wiring, not reads: the store's path for `statewright info`, /ready's ping
        "loading.py",
        "health.py",
    }
    found = [
        hit
        for surface in SURFACES
        for path in sorted((root / surface).glob("*.py"))
        if path.name not in allowed
        for hit in _reaches_past(path)
    ]
    assert found == []

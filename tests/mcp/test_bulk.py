"""The MCP ``bulk_action`` tool (issue 28, item 3), through the SDK's in-memory client.

Offered to operators and admins only (the agent, the default stdio caller, and a viewer do
not see it, and calling it anyway is an unknown tool); ``move`` only to admins. Without
``dry_run`` it is a dry run: counted and sampled, nothing changed. The real run, with the dry
run's operation id, cancels each match once (a log entry with the caller and the reason, in
its tenant only); the same operation id again applies nothing twice. On both stores, and over
stdio, where the default caller (the agent) does not get it and ``--role operator`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from mcp import Client

from statewright import Engine, SQLiteStore
from statewright.access import LOCAL_AGENT, Principal
from statewright.engine.builtin import agent_task_type
from statewright.mcp_server import build_catalogue, create_server
from statewright.store.postgres import PostgresStore
from statewright.store.protocol import FullStore as Store
from tests.mcp.conftest import TOKENS, data, history, stdio_session, tool_error

TOOL = "bulk_action"
ROOT = Principal("root", frozenset({"admin"}), "acme")


def principal(who: str) -> Principal:
    _, actor, roles, tenant = TOKENS[who]
    return Principal(actor, frozenset(roles), tenant)


def client(engine: Engine, who: Principal) -> Client:
    return Client(create_server(engine, who, poll_interval=0.05))


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path / "sw.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"))
    async with Engine(store, [agent_task_type()]) as eng:
        yield eng


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where the stdio server's stderr goes (printed, so a failing test shows it)."""
    with (tmp_path / "server.log").open("w+") as log:
        yield log
        log.seek(0)
        print(log.read())


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[Engine]:
    async with Engine(SQLiteStore(tmp_path / "sw.db"), [agent_task_type()]) as eng:
        yield eng


async def _tasks(engine: Engine, n: int) -> None:
    for i in range(n):
        await engine.start("agent_task", {"goal": "g"}, workflow_id=f"b{i}", tenant="acme")
    await engine.start("agent_task", {"goal": "g"}, workflow_id="g1", tenant="globex")


async def _state(engine: Engine, wid: str) -> str:
    return (await engine.get(wid)).state


async def test_only_operators_and_admins_get_the_tool(sqlite_engine: Engine) -> None:
    def tools(who: Principal) -> dict[str, object]:
        return {t.name: t for t in build_catalogue(sqlite_engine, who).tools()}

    for who in (LOCAL_AGENT, principal("agent"), principal("viewer")):
        assert TOOL not in tools(who), who
    ops = tools(principal("ops"))[TOOL]
    schema = ops.input_schema  # type: ignore[attr-defined]
    assert schema["properties"]["dry_run"]["default"] is True
    assert schema["required"] == ["action", "reason"]
    assert "move" not in schema["properties"]["action"]["enum"]  # moving by hand: admins
    assert "to_state" not in schema["properties"]
    admin = tools(ROOT)[TOOL].input_schema  # type: ignore[attr-defined]
    assert "move" in admin["properties"]["action"]["enum"] and "to_state" in admin["properties"]

    await _tasks(sqlite_engine, 1)
    async with client(sqlite_engine, principal("agent")) as c:
        args = {"action": "cancel", "reason": "let me", "dry_run": False}
        assert tool_error(await c.call_tool(TOOL, args))["code"] == "unknown_tool"
    assert await _state(sqlite_engine, "b0") == "planned"


async def test_dry_run_by_default_then_the_real_run_cancels_each_once(engine: Engine) -> None:
    await _tasks(engine, 4)
    where = {"type": "agent_task", "state": "planned"}
    async with client(engine, principal("ops")) as c:
        dry = data(await c.call_tool(TOOL, {"action": "cancel", "filter": where, "reason": "x"}))
        assert (dry["dry_run"], dry["matched"], dry["applied"]) == (True, 4, 0)
        assert sorted(dry["sample"]) == ["b0", "b1", "b2", "b3"]  # its tenant's, by its ids
        assert dry["operation_id"] in dry["done"] and "nothing was changed" in dry["done"]
        assert await _state(engine, "b2") == "planned"

        real = {
            "action": "cancel",
            "filter": where,
            "reason": "incident 42",
            "dry_run": False,
            "operation_id": dry["operation_id"],
        }
        done = data(await c.call_tool(TOOL, real))
        assert (done["matched"], done["applied"], done["replayed"], done["failed"]) == (
            4,
            4,
            0,
            0,
        ), done
        again = data(await c.call_tool(TOOL, real | {"filter": {"type": "agent_task"}}))
        assert (again["applied"], again["skipped"], again["failed"]) == (0, 0, 0), again
    for i in range(4):
        log = await engine.history(f"b{i}")
        bulk = [t for t in log if t.idempotency_key == f"bulk:{dry['operation_id']}:cancel"]
        assert len(bulk) == 1, log
        assert (bulk[0].actor, bulk[0].payload) == ("warehouse", {"reason": "incident 42"})
        assert (await engine.get(f"b{i}")).terminal
    assert await _state(engine, "g1") == "planned"  # another tenant's: untouched


async def test_the_same_operation_id_again_is_replayed(sqlite_engine: Engine) -> None:
    # A retry leaves each workflow live (due again): a second run of the same operation
    # matches them again, and applies only to the one it did not do before.
    await _tasks(sqlite_engine, 3)
    real = {
        "action": "retry",
        "filter": {"type": "agent_task"},
        "reason": "incident 43",
        "dry_run": False,
        "operation_id": "op-43",
    }
    async with client(sqlite_engine, principal("boss")) as c:
        first = data(await c.call_tool(TOOL, real))
        await sqlite_engine.start("agent_task", {"goal": "g"}, workflow_id="b9", tenant="acme")
        second = data(await c.call_tool(TOOL, real))
    assert (first["matched"], first["applied"], first["replayed"]) == (3, 3, 0), first
    assert (second["matched"], second["applied"], second["replayed"]) == (4, 1, 3), second
    for wid in ("b0", "b1", "b2", "b9"):
        log = await sqlite_engine.history(wid)
        assert [t.idempotency_key for t in log].count("bulk:op-43:retry") == 1, log


async def test_over_stdio_only_a_granted_operator_gets_it(tmp_path: Path, errlog: TextIO) -> None:
    db = tmp_path / "sw.db"
    async with stdio_session(db, None, None, errlog) as s:  # the local agent: least privilege
        assert TOOL not in {t.name for t in (await s.list_tools()).tools}
        data(await s.call_tool("start_workflow", {"type": "agent_task", "input": {"goal": "g"}}))
    async with stdio_session(db, None, None, errlog, roles=("operator",)) as s:
        assert TOOL in {t.name for t in (await s.list_tools()).tools}
        args = {"action": "cancel", "filter": {"type": "agent_task"}, "reason": "stdio"}
        dry = data(await s.call_tool(TOOL, args))
        assert (dry["dry_run"], dry["matched"], dry["applied"]) == (True, 1, 0)
        real = args | {"dry_run": False, "operation_id": dry["operation_id"]}
        done = data(await s.call_tool(TOOL, real))
        assert (done["matched"], done["applied"]) == (1, 1), done
    [wid] = dry["sample"]
    last = (await history(db, wid, tenant="default"))[-1]
    assert (last.event, last.actor, last.payload) == ("cancel", "local-agent", {"reason": "stdio"})


async def test_bad_arguments_are_refused_and_change_nothing(sqlite_engine: Engine) -> None:
    await _tasks(sqlite_engine, 2)
    base = {"action": "cancel", "reason": "x", "dry_run": False}
    bad: list[dict[str, Any]] = [
        base | {"dry_run": "yes"},
        base | {"filter": {"colour": "red"}},
        base | {"filter": {"older_than": -1}},
        base | {"filter": {"entered_before": "now"}},
        base | {"filter": ["agent_task"]},
        base | {"operation_id": "no spaces"},
        base | {"reason": " "},
        base | {"action": "explode"},
        base | {"sample": 1000},
        base | {"extra": 1},
        {"action": "cancel"},
    ]
    async with client(sqlite_engine, principal("ops")) as c:
        for args in bad:
            assert tool_error(await c.call_tool(TOOL, args))["code"] == "invalid_input", args
        moved = base | {"action": "move", "to_state": "done"}
        assert tool_error(await c.call_tool(TOOL, moved))["code"] == "forbidden"
    for i in range(2):
        assert await _state(sqlite_engine, f"b{i}") == "planned"


async def test_an_admin_moves_in_bulk(sqlite_engine: Engine) -> None:
    await _tasks(sqlite_engine, 2)
    args = {
        "action": "move",
        "filter": {"type": "agent_task", "state": "planned"},
        "to_state": "paused",
        "reason": "hold them",
    }
    async with client(sqlite_engine, ROOT) as c:
        assert tool_error(await c.call_tool(TOOL, args | {"to_state": None}))["code"] == (
            "invalid_input"
        )
        dry = data(await c.call_tool(TOOL, args))
        assert (dry["matched"], dry["applied"]) == (2, 0)
        assert await _state(sqlite_engine, "b0") == "planned"
        done = data(await c.call_tool(TOOL, args | {"dry_run": False}))
        assert (done["matched"], done["applied"], done["failed"]) == (2, 2, 0), done
    for wid in ("b0", "b1"):
        assert await _state(sqlite_engine, wid) == "paused"
        last = (await sqlite_engine.history(wid))[-1]
        assert (last.actor, last.payload["reason"]) == ("root", "hold them")
    assert await _state(sqlite_engine, "g1") == "planned"


async def test_a_fork_called_again_with_the_dry_runs_cutoff_forks_no_fork(
    sqlite_engine: Engine,
) -> None:
    await _tasks(sqlite_engine, 2)
    args: dict[str, Any] = {
        "action": "fork",
        "filter": {"type": "agent_task", "state": "planned"},
        "reason": "again",
    }
    async with client(sqlite_engine, principal("ops")) as c:
        dry = data(await c.call_tool(TOOL, args))
        where = args["filter"] | {"entered_before": dry["entered_before"]}
        real = args | {"filter": where, "dry_run": False, "operation_id": dry["operation_id"]}
        done = data(await c.call_tool(TOOL, real))
        again = data(await c.call_tool(TOOL, real))
        after = data(await c.call_tool(TOOL, args))
    assert (done["matched"], done["applied"]) == (2, 2), done
    assert (again["matched"], again["applied"], again["replayed"]) == (2, 0, 2), again
    assert after["matched"] == 4  # the forks, in the same state, left out by the cutoff


async def test_the_filter_takes_search_attributes(tmp_path: Path) -> None:
    """A type's search attributes narrow a bulk action as they narrow ``list_workflows``
    (the schema lists the declared names); an undeclared name changes nothing."""
    from statewright import MachineBuilder, WorkflowType

    order = (
        MachineBuilder("order")
        .state("open", initial=True)
        .state("cancelled", terminal=True)
        .event("cancel")
        .transition("cancel", "open", "cancelled")
        .build()
    )
    wtype = WorkflowType(order, search_attributes=("customer",))
    async with Engine(SQLiteStore(tmp_path / "s.db"), [wtype]) as engine:
        for i, who in enumerate(("ada", "ada", "bob")):
            await engine.start("order", {"customer": who}, workflow_id=f"o{i}", tenant="acme")
        tool = {t.name: t for t in build_catalogue(engine, ROOT).tools()}[TOOL]
        search = tool.input_schema["properties"]["filter"]["properties"]["search"]
        assert "customer" in search["description"]
        async with client(engine, ROOT) as mcp:
            bad = {"action": "cancel", "reason": "r", "filter": {"search": {"nobody": 1}}}
            refused = tool_error(await mcp.call_tool(TOOL, bad))
            assert refused["code"] == "unknown_search_attribute", refused
            args: dict[str, Any] = {
                "action": "cancel",
                "reason": "customer left",
                "filter": {"type": "order", "search": {"customer": "ada"}},
            }
            dry = data(await mcp.call_tool(TOOL, args))
            assert (dry["matched"], sorted(dry["sample"])) == (2, ["o0", "o1"])
            real = args | {"dry_run": False, "operation_id": dry["operation_id"]}
            assert data(await mcp.call_tool(TOOL, real))["applied"] == 2
        states = [await _state(engine, f"o{i}") for i in range(3)]
        assert states == ["cancelled", "cancelled", "open"]


async def test_terminal_takes_finished_workflows(sqlite_engine: Engine) -> None:
    """Live workflows unless ``terminal`` says otherwise: true the finished ones, null both."""
    await _tasks(sqlite_engine, 3)
    await sqlite_engine.cancel("b0", reason="gone", actor="test")
    async with client(sqlite_engine, principal("ops")) as c:

        async def sample(**f: Any) -> list[str]:
            args = {"action": "fork", "reason": "again", "filter": {"type": "agent_task", **f}}
            return sorted(data(await c.call_tool(TOOL, args))["sample"])

        assert await sample() == ["b1", "b2"]
        assert await sample(terminal=True) == ["b0"]
        assert await sample(terminal=None) == ["b0", "b1", "b2"]
        bad = {"action": "fork", "reason": "r", "filter": {"terminal": "yes"}}
        assert tool_error(await c.call_tool(TOOL, bad))["code"] == "invalid_input"

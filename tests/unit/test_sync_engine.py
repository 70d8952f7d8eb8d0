"""SyncEngine: every engine operation without await, typed as the engine's."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from mypy import api as mypy_api

from statewright import Engine, SQLiteStore, SyncEngine
from statewright.definition.builtin import agent_task_machine
from statewright.engine.core import part
from statewright.sync import blocking, forwarded

REPO = Path(__file__).resolve().parents[2]


def test_every_engine_operation_is_on_the_sync_engine_with_its_signature() -> None:
    operations = {name: op for name, op in vars(Engine).items() if isinstance(op, part)}
    wrapped = {
        name: op for name, op in vars(SyncEngine).items() if isinstance(op, blocking | forwarded)
    }
    assert sorted(wrapped) == sorted(operations)
    for name, op in operations.items():
        kind = blocking if inspect.iscoroutinefunction(op.fn) else forwarded
        assert isinstance(wrapped[name], kind), name
    with SyncEngine(Engine(SQLiteStore(":memory:"), [agent_task_machine()])) as eng:
        engine = eng.engine
        for name in operations:
            assert inspect.signature(getattr(eng, name)) == inspect.signature(
                getattr(engine, name)
            ), name
            assert getattr(eng, name).__doc__ == getattr(engine, name).__doc__, name


def test_a_script_runs_the_engine_without_await() -> None:
    with SyncEngine(Engine(SQLiteStore(":memory:"), [agent_task_machine()])) as eng:
        started = eng.start("agent_task", {"goal": "triage"}, workflow_id="t1")
        assert (started.row.state, eng.send("t1", "start").row.state) == ("planned", "running")
        assert eng.get("t1").version == 2
        assert [r.event for r in eng.history("t1")] == ["$start", "start"]
        assert eng.is_stuck(eng.get("t1")) is False  # a part that is not async
        assert eng.store is eng.engine.store and eng.types == eng.engine.types
        assert eng.run_until_idle() == 1  # the worker took the running workflow once


def test_mypy_checks_a_scripts_calls(tmp_path: Path) -> None:
    """The wrapper is typed: a wrong argument, a wrong use of the result and a misspelt
    operation are type errors (they were Any through ``__getattr__``)."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """\
            from statewright import Engine, SQLiteStore, SyncEngine
            from statewright.types import WorkflowRow

            with SyncEngine(Engine(SQLiteStore(":memory:"))) as eng:
                row: WorkflowRow = eng.get("t1")
                version: str = eng.get("t1").version
                eng.get(1)
                eng.gett("t1")
                reveal_type(eng.history)
            """
        )
    )
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            str(REPO / "pyproject.toml"),
            str(script),
        ]
    )
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(script))]
    assert status == 1, (out, err)
    assert lines == [
        'error: Incompatible types in assignment (expression has type "int", variable has type '
        '"str")  [assignment]',
        'error: Argument 1 has incompatible type "int"; expected "str"  [arg-type]',
        'error: "SyncEngine" has no attribute "gett"; maybe "get"?  [attr-defined]',
        'note: Revealed type is "def (workflow_id: str, after_version: int =, limit: int | None ='
        ') -> list[statewright.types.TransitionRecord]"',
    ], out

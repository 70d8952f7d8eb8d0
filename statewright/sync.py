"""A plain synchronous entry for scripts: every async Engine method, called without await.

Derived from the async API (one implementation, no twin methods): each call runs the
coroutine on one private event loop that lives as long as the wrapper.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

from statewright.engine.core import Engine
from statewright.engine.worker import Worker


class SyncEngine:
    """Wraps an :class:`~statewright.engine.Engine`; use as a context manager.

    Example:
        >>> from statewright import Engine, SQLiteStore
        >>> from statewright.definition.builtin import agent_task_machine
        >>> with SyncEngine(Engine(SQLiteStore(":memory:"), [agent_task_machine()])) as eng:
        ...     wf = eng.start("agent_task", {"goal": "triage"}, workflow_id="t1")
        ...     eng.send("t1", "start").row.state
        'running'
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._runner = asyncio.Runner()

    def run(self, coro: Any) -> Any:
        """Run any coroutine on this wrapper's loop."""
        return self._runner.run(coro)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.engine, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(attr(*args, **kwargs))

        return call

    def run_until_idle(self, **worker_options: Any) -> int:
        """Run a worker until nothing is due; returns how many workflows it processed."""
        return int(self.run(Worker(self.engine, **worker_options).run_until_idle()))

    def __enter__(self) -> SyncEngine:
        self.run(self.engine.open())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self.engine.close())
        finally:
            self._runner.close()

"""The :class:`SyncRun` handed to synchronous handlers: a :class:`~statewright.engine.steps.Run`
whose methods block.

Synchronous handlers run in the worker's thread pool; each method here hands its coroutine to
the worker's event loop (a :class:`~statewright.engine.usercalls.Trampoline`) and waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statewright.engine.commands import Started
from statewright.engine.ledger import StepKey
from statewright.engine.steps import Input, Run
from statewright.engine.usercalls import Trampoline
from statewright.engine.workflow_type import Reconciler


class SyncRun:
    """The :class:`Run` of a synchronous handler, with blocking methods.

    Synchronous handlers run in the worker's thread pool, so a blocking call never stops the
    heartbeat or the other workflows. Their step actions and reconcile hooks run in the
    handler's own thread. Calling these methods from the event loop's thread is an error.
    """

    def __init__(self, run: Run, loop: asyncio.AbstractEventLoop) -> None:
        self._run = run
        self._trampoline = Trampoline(loop)
        run._call_user = self._trampoline.call

    @property
    def run(self) -> Run:
        return self._run

    def __getattr__(self, name: str) -> Any:
        # Plain attributes and properties (workflow, id, state, context, partial,
        # fencing_token, cancel_request, key, now, save_partial, taken) come from the Run.
        return getattr(self._run, name)

    def step(
        self,
        name: str,
        action: Callable[[StepKey], Any],
        *,
        safe_to_repeat: bool = False,
        reconcile: Reconciler | None = None,
        timeout: float | None = None,
        compensate: Callable[[StepKey, Any], Any] | None = None,
    ) -> Any:
        """:meth:`Run.step`, blocking."""
        return self._trampoline.run(
            self._run.step(
                name,
                action,
                safe_to_repeat=safe_to_repeat,
                reconcile=reconcile,
                timeout=timeout,
                compensate=compensate,
            )
        )

    def transaction(
        self, name: str, fn: Callable[[Any], Any], *, tables: Iterable[str] = ()
    ) -> None:
        """:meth:`Run.transaction` (it writes nothing now, so nothing to block on)."""
        self._run.transaction(name, fn, tables=tables)

    def check_cancel(self) -> None:
        """:meth:`Run.check_cancel`, blocking."""
        self._trampoline.run(self._run.check_cancel())

    def start_child(
        self, workflow_type: str, key: str, input: Mapping[str, Any] | None = None
    ) -> Started:
        """:meth:`Run.start_child`, blocking."""
        started: Started = self._trampoline.run(self._run.start_child(workflow_type, key, input))
        return started

    def progress(self, **fields: Any) -> None:
        """:meth:`Run.progress`, blocking."""
        self._trampoline.run(self._run.progress(**fields))

    def next_input(self, name: str | None = None) -> Input | None:
        """:meth:`Run.next_input`, blocking."""
        return self._trampoline.run(self._run.next_input(name))

    def sleep(self, seconds: float) -> None:
        """:meth:`Run.sleep`, blocking until it returns or suspends (raises
        :class:`~statewright.engine.suspend.Suspended`: let it propagate)."""
        self._trampoline.run(self._run.sleep(seconds))

    def wait_input(
        self,
        name: str | None = None,
        *,
        timeout: float | None = None,
        hold: float = 0.0,
        poll_interval: float = 0.5,
    ) -> Input | None:
        """:meth:`Run.wait_input`, blocking (a suspension raises
        :class:`~statewright.engine.suspend.Suspended`: let it propagate)."""
        return self._trampoline.run(
            self._run.wait_input(name, timeout=timeout, hold=hold, poll_interval=poll_interval)
        )


__all__ = ["SyncRun"]

"""How a run calls user code (step actions, reconcile hooks): ``async def`` on the event loop,
anything else in a thread, each bounded by its timeout; and the trampoline that lets a
synchronous handler serve its own actions in its own thread while it waits for the loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
from collections.abc import Awaitable, Callable, Coroutine
from inspect import CO_COROUTINE
from types import FunctionType
from typing import Any, TypeVar

from statewright.engine.looplag import user_code
from statewright.errors import DeadlineExceeded

T = TypeVar("T")

UserCall = Callable[[Callable[..., Any], tuple[Any, ...], "float | None", str], Awaitable[Any]]
"""How a run calls user code: ``(fn, args, timeout, label) -> result``."""


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (``async def``, also behind a partial or as
    an object's ``async def __call__``)."""
    if type(fn) is FunctionType and fn.__code__.co_flags & CO_COROUTINE:
        return True  # the usual case, answered without inspect's unwrapping
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object's async __call__
    )


class Trampoline:
    """Runs a synchronous handler's calls into its :class:`Run` (coroutines) on the loop,
    and the user code they call back (actions, reconcile hooks) in the handler's own thread.

    Why: a sync handler holds one pool thread while it waits; running its actions on another
    pool thread could starve the pool (every thread a handler waiting for an action). Here the
    handler's thread serves its own actions while it waits for the loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """In the handler's thread: run ``coro`` on the loop, serving its callbacks here."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("a SyncRun method was called on an event loop's thread")
        future = asyncio.run_coroutine_threadsafe(self._wrap(coro), self.loop)
        while True:
            try:
                kind, item = self._queue.get(timeout=0.5)
            except queue.Empty:
                if future.done() and self._queue.empty():
                    return future.result()  # raises what the coroutine raised
                continue
            if kind == "done":
                return future.result()
            fn, args, reply = item
            try:
                value = fn(*args)
            except BaseException as exc:
                self.loop.call_soon_threadsafe(_reply, reply, None, exc)
            else:
                self.loop.call_soon_threadsafe(_reply, reply, value, None)

    async def _wrap(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return await coro
        finally:
            self._queue.put(("done", None))

    async def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None, label: str
    ) -> Any:
        """On the loop: run ``fn(*args)`` in the handler's thread."""
        reply: asyncio.Future[Any] = self.loop.create_future()
        self._queue.put(("call", (fn, args, reply)))
        return await bounded(reply, timeout, label)


async def bounded(future: asyncio.Future[Any], timeout: float | None, label: str) -> Any:
    """The result of user code's ``future``, waited for up to ``timeout`` seconds; past it,
    :class:`DeadlineExceeded` (a thread cannot be stopped: its late result is dropped). A
    plain function that returned a coroutine has it awaited, watched like async user code."""
    try:
        done, _ = await asyncio.wait({future}, timeout=timeout)
    finally:
        if not future.done():
            future.cancel()
    if future not in done:
        raise DeadlineExceeded(f"{label} ran past its timeout of {timeout:g}s")
    result = future.result()
    if inspect.isawaitable(result):
        result = await user_code(label, result)
    return result


def _reply(reply: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if reply.done():  # timed out meanwhile: the late result is dropped
        return
    if exc is not None:
        reply.set_exception(exc)
    else:
        reply.set_result(value)

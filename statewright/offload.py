"""Large reads without stalling the event loop, and with a bound on the memory they take.

Decoding and encoding JSON is CPU work that holds the thread doing it: one page of large log
entries (up to 256 KiB each) costs tens to hundreds of milliseconds each way. On the event
loop that time is taken from every other request the process serves, its probes included
(``/ready`` waited seconds behind eight clients reading large pages). So the stores decode a
read of more than :data:`OFFLOAD_CHARS` of JSON text here, and the HTTP layer encodes its pages
here: on :data:`WORKERS` threads of their own (few: the work is bound by the interpreter lock,
and each more thread competing for it delays the event loop more).

:func:`large_read` bounds how many large reads (a page of the log, the steps, the workflows,
a batch of the SSE stream) are in flight at once in one process (:data:`LARGE_READS`), so the
memory they hold does not grow with the number of clients: each holds at most one chunk of
records and the page it encodes, whatever its size is capped at.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")
T = TypeVar("T")

OFFLOAD_CHARS = 64 * 1024
"""A read whose JSON text is longer than this is decoded off the event loop (shorter ones
cost less than the trip to a thread)."""
WORKERS = 2
"""Threads for the JSON work of large reads and pages."""
LARGE_READS = 2
"""Large reads in flight at once per process (per event loop); more wait their turn."""

_executor: ThreadPoolExecutor | None = None
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="statewright-json")
    return _executor


async def run(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the JSON threads (it must not touch the event loop's objects)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool(), functools.partial(fn, *args))


def text_size(rows: Sequence[Any]) -> int:
    """The characters (or bytes) of text in ``rows`` (sequences of column values): what
    decoding them will cost, roughly."""
    return sum(len(v) for row in rows for v in row if isinstance(v, str | bytes))


async def convert(rows: Sequence[R], fn: Callable[[R], T], size: int) -> list[T]:
    """``[fn(r) for r in rows]``, on the JSON threads when the rows hold more than
    :data:`OFFLOAD_CHARS` of text (``size``, as :func:`text_size` counts it)."""
    if size <= OFFLOAD_CHARS:
        return [fn(r) for r in rows]
    return await run(lambda: [fn(r) for r in rows])


@contextlib.asynccontextmanager
async def large_read() -> AsyncIterator[None]:
    """Hold one of the process's :data:`LARGE_READS` slots for a large read."""
    loop = asyncio.get_running_loop()
    slots = _slots.get(loop)
    if slots is None:
        slots = _slots[loop] = asyncio.Semaphore(LARGE_READS)
    async with slots:
        yield

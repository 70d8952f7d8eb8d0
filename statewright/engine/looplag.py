"""Loop-lag watchdog: notice an async handler that blocks the event loop, and name it.

A handler that calls blocking code (``time.sleep``, a sync HTTP client) freezes the whole
loop: heartbeats stop and HTTP probes hang. :class:`LoopLagMonitor` runs a small ticker task
on the loop and a daemon watchdog thread beside it. When the ticks stop for longer than the
threshold, the thread looks at the loop thread's Python stack, finds the innermost
:func:`user_code` frame and logs a WARNING naming its label, while the stall is going on.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import TypeVar

T = TypeVar("T")


async def user_code(label: str, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` inside a frame the watchdog recognises as user code.

    Args:
        label: What the watchdog reports as the culprit, e.g. ``"handler order/charging wf-17"``.
        awaitable: The handler's or step action's coroutine.

    Returns:
        Whatever ``awaitable`` returns.
    """
    # While the awaitable runs, this coroutine's frame is on the loop thread's stack (a
    # running coroutine's callers are its awaiters), and ``label`` is one of its locals.
    return await awaitable


_USER_CODE = user_code.__code__


@dataclass(frozen=True, slots=True)
class LagReport:
    """One ended stall of the event loop.

    Attributes:
        seconds: How long the loop did not run anything else.
        culprit: The label of the innermost :func:`user_code` running then, or None.
        where: ``"file:line in function"`` of the innermost frame when the stall was seen.
    """

    seconds: float
    culprit: str | None
    where: str


def _blame(thread_id: int) -> tuple[str | None, str]:
    """Culprit label and innermost position on the stack of thread ``thread_id``."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None, "unknown"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    culprit: str | None = None
    walk: FrameType | None = frame
    while walk is not None:
        if walk.f_code is _USER_CODE:
            culprit = str(walk.f_locals.get("label"))
            break
        walk = walk.f_back
    return culprit, where


class LoopLagMonitor:
    """Watch an event loop for stalls; log the blocking handler and report the lag.

    Args:
        threshold: Seconds without a tick that count as a stall worth a WARNING.
        interval: Seconds between ticks on the loop, and between the watchdog's checks.
        on_lag: Called once per ended stall, **from the watchdog thread**: it must be
            thread-safe and quick (prometheus-client metrics are both).
        logger: Where the WARNING goes; ``logging.getLogger(__name__)`` by default.
    """

    def __init__(
        self,
        *,
        threshold: float = 1.0,
        interval: float = 0.1,
        on_lag: Callable[[LagReport], None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._threshold = threshold
        self._interval = interval
        self._on_lag = on_lag
        self._log = logger or logging.getLogger(__name__)
        # The ticker writes and the thread reads these; the lock keeps a tick and the
        # thread's "stall starts here" reset from interleaving.
        self._lock = threading.Lock()
        self._last_tick = 0.0
        self._last_lag = 0.0
        self._max_lag = 0.0
        self._peak = 0.0  # the largest lag since the current stall was seen
        self._stop = threading.Event()
        self._ticker: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._loop_thread_id = 0

    @property
    def max_lag(self) -> float:
        """The largest lag (seconds a tick came late) seen since :meth:`start`."""
        return self._max_lag

    @property
    def last_lag(self) -> float:
        """The lag of the latest tick."""
        return self._last_lag

    @property
    def behind(self) -> float | None:
        """Seconds the next tick is late by now (a stall going on shows here before it ends);
        None when not started. Safe to read from any thread."""
        if self._thread is None:
            return None
        with self._lock:
            return max(0.0, time.monotonic() - self._last_tick - self._interval)

    @property
    def threshold(self) -> float:
        """Seconds without a tick that count as a stall."""
        return self._threshold

    async def start(self) -> None:
        """Start watching the running loop: its ticker task and the watchdog thread."""
        if self._thread is not None:
            raise RuntimeError("LoopLagMonitor is already started")
        self._loop_thread_id = threading.get_ident()
        self._last_tick = time.monotonic()
        self._stop.clear()
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())
        # A thread, because the loop cannot watch itself: while it is blocked, nothing
        # scheduled on it runs, including any check we could schedule there.
        self._thread = threading.Thread(
            target=self._watch, name="statewright-looplag", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        """Stop the ticker and the thread, reporting a stall that just ended. Idempotent."""
        thread, ticker = self._thread, self._ticker
        if thread is None or ticker is None:
            return
        self._thread = self._ticker = None
        self._tick()  # we run on the loop, so it is alive now: a pending stall has ended
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        self._stop.set()
        # Quick: the thread wakes at once from its wait, checks once more and exits.
        thread.join()

    async def __aenter__(self) -> LoopLagMonitor:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            lag = max(0.0, now - self._last_tick - self._interval)
            self._last_tick, self._last_lag = now, lag
            self._max_lag = max(self._max_lag, lag)
            self._peak = max(self._peak, lag)

    def _watch(self) -> None:
        stalled_since: float | None = None  # the last tick before the current stall
        blame: tuple[str | None, str] = (None, "unknown")
        while True:
            stopping = self._stop.wait(self._interval)
            with self._lock:
                last_tick = self._last_tick
                behind = time.monotonic() - last_tick
                started = stalled_since is None and behind > self._threshold + self._interval
                if started:
                    stalled_since, self._peak = last_tick, 0.0
                ended = stalled_since is not None and last_tick != stalled_since
                peak = self._peak
            if started:
                # One snapshot per stall: the stack is what it is, and walking it is not free.
                blame = _blame(self._loop_thread_id)
                self._warn(behind - self._interval, *blame)
            elif ended:
                stalled_since = None
                self._report(LagReport(seconds=peak, culprit=blame[0], where=blame[1]))
            if stopping:
                return

    def _warn(self, blocked_for: float, culprit: str | None, where: str) -> None:
        self._log.warning(
            "event loop blocked for %.1fs by %s at %s",
            blocked_for,
            culprit or "non-handler code",
            where,
            extra={
                "action": "loop_blocked",
                "blocked_for": round(blocked_for, 3),
                "culprit": culprit,
                "where": where,
            },
        )

    def _report(self, report: LagReport) -> None:
        if self._on_lag is None:
            return
        try:
            self._on_lag(report)
        except Exception:  # a broken metrics callback must not kill the watchdog
            self._log.exception("loop lag callback failed")

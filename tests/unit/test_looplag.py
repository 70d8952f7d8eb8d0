"""The loop-lag watchdog names the async handler that blocks the event loop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from statewright.engine import looplag
from statewright.engine.looplag import LagReport, LoopLagMonitor, user_code

pytestmark = pytest.mark.alone  # every test times a stall of the event loop

THREAD_NAME = "statewright-looplag"


class _Stamped(logging.Handler):
    """Records when (monotonic) each record was emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, logging.LogRecord]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record))


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    yield
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]


@pytest.fixture
def stamped() -> Iterator[_Stamped]:
    handler = _Stamped()
    logger = logging.getLogger(looplag.__name__)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def blocking_handler(seconds: float) -> str:
    time.sleep(seconds)  # the bug the watchdog is for
    return "done"


async def test_the_frame_chain_of_a_blocking_coroutine_includes_user_code() -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[str | None, str]] = []
    timer = threading.Timer(0.1, lambda: seen.append(looplag._blame(loop_thread)))
    timer.start()
    assert await user_code("handler demo/x wf-0", blocking_handler(0.3)) == "done"
    timer.join()
    [(culprit, where)] = seen
    assert culprit == "handler demo/x wf-0"
    assert "test_looplag.py:" in where and where.endswith(" in blocking_handler")


async def test_a_blocking_handler_is_named_while_it_blocks(
    caplog: pytest.LogCaptureFixture, stamped: _Stamped
) -> None:
    reports: list[tuple[LagReport, str]] = []
    monitor = LoopLagMonitor(
        threshold=0.5,
        interval=0.1,
        on_lag=lambda r: reports.append((r, threading.current_thread().name)),
    )
    caplog.set_level(logging.WARNING, logger=looplag.__name__)
    async with monitor:
        await asyncio.sleep(0.15)
        result = await user_code("handler demo/charging wf-1", blocking_handler(1.3))
        sleep_ended = time.monotonic()
        await asyncio.sleep(0.3)  # the watchdog sees the next tick and reports
    assert result == "done"

    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage().startswith("event loop blocked")
    assert record.__dict__["action"] == "loop_blocked"
    assert record.__dict__["culprit"] == "handler demo/charging wf-1"
    assert "test_looplag.py:" in record.__dict__["where"]
    assert record.__dict__["where"].endswith(" in blocking_handler")
    assert 0.5 <= record.__dict__["blocked_for"] < 1.3
    [(emitted_at, _)] = [(t, r) for t, r in stamped.seen if r.levelno == logging.WARNING]
    assert emitted_at < sleep_ended  # logged during the stall, not after it

    [(report, thread_name)] = reports
    assert thread_name == THREAD_NAME
    assert 1.0 <= report.seconds < 2.0
    assert report.culprit == "handler demo/charging wf-1"
    assert report.where == record.__dict__["where"]
    assert monitor.max_lag >= 1.0
    assert monitor.last_lag < 0.5


async def test_blocking_outside_user_code_has_no_culprit(caplog: pytest.LogCaptureFixture) -> None:
    reports: list[LagReport] = []
    caplog.set_level(logging.WARNING, logger=looplag.__name__)
    async with LoopLagMonitor(threshold=0.2, interval=0.05, on_lag=reports.append):
        await asyncio.sleep(0.1)
        time.sleep(0.5)
    # No extra await: stop() itself reports a stall that has just ended.
    [record] = caplog.records
    assert record.__dict__["culprit"] is None
    assert "non-handler code" in record.getMessage()
    assert record.__dict__["where"].endswith(" in test_blocking_outside_user_code_has_no_culprit")
    [report] = reports
    assert report.culprit is None and report.seconds >= 0.35


async def test_short_awaits_report_nothing_and_stop_joins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reports: list[LagReport] = []
    caplog.set_level(logging.WARNING, logger=looplag.__name__)
    monitor = LoopLagMonitor(threshold=0.5, interval=0.05, on_lag=reports.append)
    await monitor.start()
    [thread] = [t for t in threading.enumerate() if t.name == THREAD_NAME]
    assert thread.daemon
    with pytest.raises(RuntimeError):
        await monitor.start()
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:
        await user_code("handler demo/idle wf-2", asyncio.sleep(0.01))
    await monitor.stop()
    assert not thread.is_alive()
    await monitor.stop()  # idempotent
    assert reports == []
    assert caplog.records == []
    assert monitor.max_lag < 0.5

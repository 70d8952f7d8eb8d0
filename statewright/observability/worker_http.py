"""``statewright worker --metrics-port``: ``/metrics`` and ``/livez`` of a worker process.

``/metrics`` is the engine's :class:`~statewright.observability.metrics.EngineMetrics` (the
same families ``serve`` exposes: transitions, refusals, retries, step durations, loop stalls,
workflow and stuck counts read from the store at scrape time) plus this worker's own gauges
(:class:`WorkerCollector`). Prometheus adds the ``instance`` label, so the series of separate
workers stay apart; ``statewright_worker_info`` maps an instance to its worker id.

``/livez`` answers 200 while the worker runs and its event loop ticks, 503 (with the reason)
before it runs, while it stops, after it stopped, and while its event loop has not ticked for
longer than the worker's loop-lag threshold (a handler blocking the loop).

The server runs in threads of its own, not on the worker's event loop: a loop stalled by a
blocking handler could not answer a probe at all (the probe would time out with no reason),
and a scrape must not wait behind handlers. prometheus-client's WSGI app renders the registry
(content negotiation, gzip, ``name[]`` filters); the standard library's threading WSGI server
serves it. Only the workflow and stuck counts need the store: the scrape thread asks the event
loop for them and, if the loop does not answer in time, serves the last counts it had.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from statewright.errors import InvalidInput
from statewright.observability.metrics import EngineMetrics, attach_metrics

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

    from statewright.engine.core import Engine
    from statewright.engine.worker import Worker

log = logging.getLogger(__name__)

SCRAPE_GRACE = 1.0
"""Seconds the scrape thread waits for the event loop beyond the store's scrape timeout."""


class WorkerCollector(Collector):
    """This worker's own gauges: who it is, whether it runs, its slots and its loop's lag."""

    def __init__(self, worker: Worker, live: Callable[[], tuple[bool, str]]) -> None:
        self._worker = worker
        self._live = live

    def collect(self) -> Iterable[Metric]:
        w = self._worker
        info = InfoMetricFamily(
            "statewright_worker", "The worker process behind this endpoint (its worker id)."
        )
        info.add_metric([], {"worker_id": w.id})
        yield info
        yield GaugeMetricFamily(
            "statewright_worker_live",
            "1 while /livez answers 200 (the worker runs and its event loop ticks), else 0.",
            value=1.0 if self._live()[0] else 0.0,
        )
        yield GaugeMetricFamily(
            "statewright_worker_in_flight",
            "Workflows this worker is processing now.",
            value=float(len(w.in_flight)),
        )
        yield GaugeMetricFamily(
            "statewright_worker_concurrency",
            "Workflows this worker runs at once at most.",
            value=float(w.concurrency),
        )
        yield GaugeMetricFamily(
            "statewright_worker_processed",
            "Handler runs (and timers fired) this worker finished since it started.",
            value=float(w.processed),
        )
        behind = w.loop_lag.behind
        yield GaugeMetricFamily(
            "statewright_event_loop_lag_seconds",
            "Seconds the worker's event loop is late on its watchdog tick now (0 when it runs "
            "freely; grows while a handler blocks it).",
            value=0.0 if behind is None else behind,
        )

    def describe(self) -> Iterable[Metric]:
        # The names, so that a second worker endpoint on the same engine's registry is refused
        # at registration (ValueError) instead of exposing every family twice.
        return [
            InfoMetricFamily("statewright_worker", ""),
            *(GaugeMetricFamily(name, "") for name in _GAUGES),
        ]


_GAUGES = (
    "statewright_worker_live",
    "statewright_worker_in_flight",
    "statewright_worker_concurrency",
    "statewright_worker_processed",
    "statewright_event_loop_lag_seconds",
)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a hung scraper must not keep the process alive


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape on stderr would drown the worker's own logs


class WorkerEndpoint:
    """Serves ``/metrics`` and ``/livez`` of one worker from background threads.

    Args:
        engine: the engine the worker runs (its metrics are served).
        worker: the worker to report on.
        host / port: where to listen; port 0 picks a free port (see :attr:`address`).
        metrics: the engine's metrics; :func:`attach_metrics` of ``engine`` by default.

    Call :meth:`start` from the event loop the worker runs on, :meth:`running` around the
    worker's run (``/livez`` is 503 outside it), and :meth:`close` at the end.
    """

    def __init__(
        self,
        engine: Engine,
        worker: Worker,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.worker = worker
        self.metrics = metrics if metrics is not None else attach_metrics(engine)
        self.metrics.registry.register(WorkerCollector(worker, self.liveness))
        self._host, self._port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._running = False
        self._stopped = False
        self._metrics_app = make_wsgi_app(self.metrics.registry)

    @property
    def address(self) -> tuple[str, int]:
        """The host and port bound (the real port when 0 was asked for)."""
        if self._server is None:
            raise RuntimeError("the endpoint is not started")
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> tuple[str, int]:
        """Bind and serve in a daemon thread; returns the bound address.

        Raises:
            InvalidInput: the address cannot be bound (in use, not an address of this host).
        """
        self._loop = asyncio.get_running_loop()
        server_class = _Server6 if ":" in self._host else _Server
        try:
            self._server = make_server(
                self._host,
                self._port,
                self._app,
                server_class=server_class,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            raise InvalidInput(
                f"cannot serve worker metrics on {self._host}:{self._port}: {exc.strerror or exc}"
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="statewright-worker-metrics",
            daemon=True,
        )
        self._thread.start()
        return self.address

    def running(self, value: bool) -> None:
        """Mark the worker loop as running (True) or finished (False, for good)."""
        self._running = value
        if not value:
            self._stopped = True

    def close(self) -> None:
        """Stop serving and free the port. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    # -- liveness ------------------------------------------------------------------------------

    def liveness(self) -> tuple[bool, str]:
        """``(live, reason)`` as ``/livez`` reports it."""
        w = self.worker
        if self._stopped:
            return False, "stopped"
        if not self._running:
            return False, "starting"
        if w.stopping:
            return False, "stopping"
        behind = w.loop_lag.behind
        if behind is not None and behind > w.loop_lag.threshold:
            return False, f"event loop stalled for {behind:.1f}s"
        return True, "ok"

    # -- WSGI ----------------------------------------------------------------------------------

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        if path not in ("/metrics", "/livez"):
            return _reply(start_response, "404 Not Found", {"status": "not_found"})
        if method not in ("GET", "HEAD"):
            return _reply(start_response, "405 Method Not Allowed", {"status": "not_allowed"})
        if path == "/livez":
            live, reason = self.liveness()
            if live:
                return _reply(start_response, "200 OK", {"status": "ok"})
            problem = {"status": "unavailable", "reason": reason}
            return _reply(start_response, "503 Service Unavailable", problem)
        self._refresh()
        exposition: Iterable[bytes] = self._metrics_app(environ, start_response)
        return exposition

    def _refresh(self) -> None:
        """Fresh workflow and stuck counts, read on the worker's event loop (the store's
        connections belong to it); on a stalled or closed loop the last counts stay."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            future = asyncio.run_coroutine_threadsafe(self.metrics.refresh(), loop)
        except RuntimeError:  # the loop is closing
            return
        try:
            future.result(self.metrics.scrape_timeout + SCRAPE_GRACE)
        except FutureTimeout:
            future.cancel()
            log.warning(
                "metrics: the event loop did not count workflows in time; serving the last counts",
                extra={"action": "metrics_refresh_late"},
            )
        except Exception:  # cancelled as the loop shuts down: the last counts stay
            log.debug("metrics: refresh abandoned", exc_info=True)


def _reply(start_response: StartResponse, status: str, body: dict[str, str]) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


__all__ = ["WorkerCollector", "WorkerEndpoint"]

"""A real local webhook receiver (http.server in a thread) that records every request."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    key: str
    body: dict[str, Any]
    at: float


def _opened(event: threading.Event) -> threading.Event:
    event.set()
    return event


@dataclass
class Receiver:
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    """Answers to give, in order (then 200)."""
    delay: float = 0.0
    gate: threading.Event = field(default_factory=lambda: _opened(threading.Event()))
    """Every request waits here before it is recorded and answered (clear it to hold them)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keys(self) -> Counter[str]:
        with self.lock:
            return Counter(r.key for r in self.requests)

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.body for r in self.requests]


@contextmanager
def receiver(delay: float = 0.0) -> Iterator[Receiver]:
    rec = Receiver(delay=delay)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            except (ValueError, OSError):
                return  # the sender died mid-request: nothing was delivered
            rec.gate.wait()
            if rec.delay:
                time.sleep(rec.delay)
            with rec.lock:
                # recorded before answering: a sender killed now has had it delivered
                rec.requests.append(
                    Received(self.headers.get("Idempotency-Key", ""), body, time.time())
                )
                status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        # A deliverer sends a whole batch (10) at once: with socketserver's backlog of 5 the
        # kernel dropped the other SYNs, retransmitted a second later, past a 1 s timeout.
        request_queue_size = 64

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a sender killed mid-answer (broken pipe): expected here

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    rec.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        yield rec
    finally:
        rec.gate.set()  # no handler thread left waiting
        server.shutdown()
        server.server_close()

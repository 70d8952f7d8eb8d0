"""The real processes of the subscription acceptance test, each run as
``python -m tests.acceptance.subscriptions.procs <role> ...``:

- ``receive <port> <log> <fail share> <slow share>``: a webhook receiver (http.server) that
  appends every request it answers to ``<log>`` (one JSON line: key, status, body; written
  and flushed *before* the answer, so a sender killed after the answer finds it there), and
  answers 503 to a share of them and slowly (0.3 s) to another share;
- ``deliver <store url>``: the delivering process, :class:`AlertDelivery` pumping the
  subscriptions and delivering (alerts off), short claims and backoff so the test is quick;
- ``consume <store url> <name> <log>``: a Python :class:`Consumer` appending each delivery to
  ``<log>`` (one JSON line: key, workflow id, version) before it is acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from statewright.engine.subscriptions import Consumer
from statewright.observability.delivery import AlertDelivery, Backoff
from statewright.store import store_from_url
from statewright.store.subscriptions import SubscriptionFilter

TYPES = ("shop_order",)


def receive(port: int, log_path: str, fail: float, slow: float) -> None:
    log = open(log_path, "a", encoding="utf-8")
    rng = random.Random()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            except (ValueError, OSError):
                return
            if rng.random() < slow:
                time.sleep(0.3)
            status = 503 if rng.random() < fail else 200
            line = {"key": self.headers.get("Idempotency-Key"), "status": status, "body": body}
            log.write(json.dumps(line) + "\n")
            log.flush()
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 64
        allow_reuse_address = True
        daemon_threads = True

    Server(("127.0.0.1", port), Handler).serve_forever()


async def deliver(url: str) -> None:
    from statewright import Engine

    async with Engine(store_from_url(url), []) as engine:
        d = AlertDelivery(
            engine,
            alerts=False,
            timeout=1.0,
            claim_seconds=2.5,
            poll=0.05,
            max_attempts=1000,
            backoff=Backoff(initial=0.05, maximum=0.5),
            batch=20,
        )
        await d.run()


async def consume(url: str, name: str, log_path: str) -> None:
    store = store_from_url(url)
    await store.open()
    log = open(log_path, "a", encoding="utf-8")
    consumer = Consumer(store, name, SubscriptionFilter(types=TYPES), batch=7, poll=0.05, start=0)
    async for d in consumer:
        line = {"key": d.idempotency_key, "wf": d.body["workflow_id"], "v": d.body["version"]}
        log.write(json.dumps(line) + "\n")
        log.flush()


def main(argv: list[str]) -> None:
    role, *args = argv
    os.environ.setdefault("STATEWRIGHT_LOG_LEVEL", "WARNING")
    if role == "receive":
        receive(int(args[0]), args[1], float(args[2]), float(args[3]))
    elif role == "deliver":
        asyncio.run(deliver(args[0]))
    elif role == "consume":
        asyncio.run(consume(args[0], args[1], args[2]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Waiting for a real server process (``statewright serve``) to answer over HTTP.

One :class:`httpx.Client` polls for the whole wait. ``httpx.get`` makes a client per call, and
each client loads the CA bundle into a new TLS context (about 30 ms of CPU here, even for an
``http://`` URL): polling every 50 ms that way took a third of a core from the server it was
waiting for, and the suite's serve fixtures spent about a CPU-minute per run on it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import httpx


class Process(Protocol):
    """What is waited on: a ``subprocess.Popen`` or a forked child (tests/forkserver.py)."""

    def poll(self) -> int | None: ...


def wait_until_up(
    url: str,
    proc: Process,
    log: Path,
    *,
    path: str = "/livez",
    timeout: float = 60.0,
    every: float = 0.05,
) -> bool:
    """Poll ``url + path`` until it answers 200: True then; False if ``proc`` exited first (a
    caller may retry on another port); raise ``TimeoutError`` with the server's log after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                if client.get(f"{url}{path}").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(every)
    raise TimeoutError(f"no 200 from {url}{path} within {timeout:g}s:\n{log.read_text()}")

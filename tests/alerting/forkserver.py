"""``statewright`` commands as processes forked from one that has imported statewright already.

``python -m statewright.cli ...`` spends about 0.7 s of CPU importing before it does anything;
a test that starts (and SIGKILLs) a command many times spends most of its time there. The fork
server (``python -m tests.alerting.forkserver``, started by :class:`ForkServer`) imports the
CLI, the stores and the alert delivery once, then forks one child per request, which runs
``statewright.cli.main`` with the request's arguments, exactly as ``python -m statewright.cli``
would (same command line, same log, same exit codes), with stdout and stderr appended to a
file and stdin from /dev/null. The same idea as tests/acceptance/crash/zygote.py, for any
``statewright`` command line.

Protocol: one JSON line per request on its stdin, one JSON line per answer on its stdout:

- ``{"op": "spawn", "argv": [...], "log": path}``: fork a child; ``{"pid": n}``.
- ``{"op": "signal", "pid": n, "signal": s}``: send signal ``s`` unless it has exited;
  ``{"sent": bool}``.
- ``{"op": "wait", "pid": n, "timeout": s}``: ``{"code": ...}`` once it exited (as
  ``Popen.returncode``: ``-9`` for SIGKILL), ``{"code": null}`` after ``s`` seconds.
- ``{"op": "quit"}`` (or EOF): SIGKILL every child still running, reap, exit.

``PRELOAD`` is what ``statewright alerts --deliver`` imports (a module it misses is imported
by each child, which costs time, not correctness).

Fork safety as in the crash zygote: the server runs no thread and no event loop (checked before
every fork) and opens no database (children open their own). Only the server signals and reaps
its children, so a pid it signals is never a reused one.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
REAP_INTERVAL = 0.005
PRELOAD = (
    "httpx",
    "pydantic",
    "secrets",
    "typer._adapters",
    "typer._click.decorators",
    "statewright.definition.fingerprint",
    "statewright.cli.main",
    "statewright.cli.alerts",
    "statewright.cli.timers",
    "statewright.observability.alerts",
    "statewright.observability.delivery",
    "statewright.store.sqlite",
    "statewright.store.postgres",
)


# -- the server process ----------------------------------------------------------------------


class _Server:
    def __init__(self, proto_in: int, proto_out: int) -> None:
        self.proto_in = proto_in
        self.proto_out = proto_out
        self.running: set[int] = set()
        self.exited: dict[int, int] = {}

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.proto_out, data) :]

    def reap(self) -> None:
        for pid in list(self.running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.running.discard(pid)
                self.exited[pid] = os.waitstatus_to_exitcode(status)

    def serve(self) -> None:
        buffer = b""
        while True:
            readable, _, _ = select.select([self.proto_in], [], [], REAP_INTERVAL)
            self.reap()
            if not readable:
                continue
            data = os.read(self.proto_in, 1 << 16)
            if not data:
                return  # the test is gone
            buffer += data
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                request = json.loads(line)
                if request["op"] == "quit":
                    return
                try:
                    self.send(self.handle(request))
                except Exception as exc:
                    self.send({"error": f"{type(exc).__name__}: {exc}"})

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "spawn":
            return {"pid": self.spawn(req["argv"], req["log"])}
        if op == "signal":
            self.reap()
            sent = req["pid"] in self.running
            if sent:
                os.kill(req["pid"], req["signal"])
            return {"sent": sent}
        if op == "wait":
            pid, until = req["pid"], time.monotonic() + req["timeout"]
            while True:
                self.reap()
                if pid not in self.running or time.monotonic() >= until:
                    return {"code": self.exited.get(pid)}
                time.sleep(REAP_INTERVAL)
        raise ValueError(f"unknown op {op!r}")

    def spawn(self, argv: list[str], log: str) -> int:
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"the fork server runs {threads} threads: forking is unsafe")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(self.proto_in, self.proto_out, argv, log)  # never returns
        self.running.add(pid)
        return pid

    def shutdown(self) -> None:
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        self.running.clear()


def _child(proto_in: int, proto_out: int, argv: list[str], log: str) -> None:
    code = 70
    try:
        os.close(proto_in)
        os.close(proto_out)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.argv = ["statewright", *argv]
        from statewright.cli.main import main

        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # The protocol gets private descriptors; 0 and 1 point at /dev/null.
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test stops it itself
    server = _Server(proto_in, proto_out)
    server.send({"ready": True, "pid": os.getpid()})
    try:
        server.serve()
    finally:
        server.shutdown()


# -- the test's side -------------------------------------------------------------------------


class ForkServer:
    """The test's handle on a fork server (see the module docstring)."""

    def __init__(self, log: Path, timeout: float = 60.0) -> None:
        self.log = log
        self.timeout = timeout
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self._err: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.alerting.forkserver"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        self._buffer = b""
        self._read(timeout)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        until = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([fd], [], [], max(0.0, until - time.monotonic()))
            if not readable:
                raise RuntimeError(f"the fork server did not answer in {timeout}s{self._tail()}")
            data = os.read(fd, 1 << 16)
            if not data:
                raise RuntimeError(f"the fork server exited ({self.proc.poll()}){self._tail()}")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def _tail(self) -> str:
        self._err.flush()
        text = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return f"\n--- fork server stderr ---\n{text}" if text else ""

    def call(self, request: dict[str, Any], answer_within: float | None = None) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        return self._read(self.timeout if answer_within is None else answer_within)

    def spawn(self, argv: list[str], log: Path) -> Child:
        """``statewright ARGV`` in a forked child, its output appended to ``log``."""
        return Child(self, int(self.call({"op": "spawn", "argv": argv, "log": str(log)})["pid"]))

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.write(b'{"op": "quit"}\n')
                self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._err.close()


class Child:
    """A forked command, with the part of ``subprocess.Popen``'s interface the tests use."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0.0, check=False)

    def wait(self, timeout: float = 60.0, *, check: bool = True) -> int | None:
        """The exit code; raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds
        (``check=False``: returns None then)."""
        if self.returncode is None:
            request = {"op": "wait", "pid": self.pid, "timeout": timeout}
            self.returncode = self.server.call(request, timeout + self.server.timeout)["code"]
        if self.returncode is None and check:
            raise subprocess.TimeoutExpired(f"statewright (pid {self.pid})", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.server.call({"op": "signal", "pid": self.pid, "signal": int(sig)})

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    main()

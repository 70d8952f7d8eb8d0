"""The pytest-xdist workers forked from a zygote that has imported their libraries once.

An xdist worker is a fresh interpreter (execnet's popen gateway: ``python -u -c BOOTSTRAP``,
talking to the controller over its stdin and stdout) that imports pytest and the libraries
the tests use (schemathesis, mcp, playwright, pydantic, fastapi, hypothesis, psycopg...: about
3 of the 8.7 CPU-seconds it spends before its first test), every worker the same modules at
the same time. Under ``-n N`` the controller (``tests/conftest.py``, ``fork_workers``) starts
one zygote for the run, a process that imports them once (:data:`PRELOAD`), and makes each
worker's ``--tx`` ``popen//python=LAUNCHER``: execnet starts the launcher (a Python without
``site``, 0.03 CPU-s) with the worker's arguments and pipes, and the launcher hands its
standard streams, arguments, environment and working folder to the zygote (a unix socket,
``SCM_RIGHTS``). The zygote forks; the child becomes the worker as ``python -u -c BOOTSTRAP``
would have started (below) and the launcher waits for it: it exits with the worker's exit
code, which the zygote reports, and a SIGTERM it gets is passed on to the worker. If the
launcher is killed (execnet SIGKILLs a worker that does not stop), the zygote SIGKILLs the
worker. When the zygote cannot be reached, refuses (see below) or dies before it forked, the
launcher starts the worker as a fresh interpreter (``os.execv``, with a line on stderr): the
run goes on, only slower. If the zygote dies after it forked, the workers run on (the
launchers wait for them by their pidfd). The zygote quits, SIGKILLing any worker it still
has, when the controller closes its stdin: at the end of the run, or when the controller dies.

The child becomes the worker: the launcher's descriptors on 0, 1 and 2; its environment (the
zygote refuses a worker whose interpreter would start differently: other ``PYTHON*``, ``LC_*``
or ``LANG`` variables, other options than ``-u -c``), working folder, ``PYTHONPATH`` first on
``sys.path``; new ``sys.stdin``, ``stdout`` and ``stderr`` like those of ``python -u``; the
signal handlers the interpreter started with; a fresh ``__main__``; then it runs the
bootstrap and exits as an interpreter does (non-daemon threads joined, ``atexit`` handlers,
streams flushed; ``SystemExit``, an uncaught exception's traceback and exit code 1, death by
SIGINT on an uncaught ``KeyboardInterrupt``). It stays in the zygote's process group, which
is the controller's: a Ctrl-C in the terminal reaches the workers directly, as it reaches
fresh ones (so the launcher ignores SIGINT rather than passing on a second one). ``random``
reseeds itself in a forked child; the children share the zygote's hash seed.

What is not preloaded: what pytest rewrites the asserts of in a worker. pytest marks the
modules named by ``-p`` for rewriting (``xdist``, ``pytest_asyncio.plugin``, ``statewright``:
its plugin's entry point) and fails (``PytestAssertRewriteWarning`` under ``filterwarnings =
error``) when one is imported already, so none of them is preloaded, nor test modules or
conftests: the zygote refuses to serve if the preload imported one. (pytest-asyncio is named
by its module in pyproject.toml: its entry point's name, ``asyncio``, marked the standard
library's asyncio, which every library here imports.) The imports run with warnings as errors, as
they would during a worker's collection: a library that warns when imported makes the zygote
refuse too, so the worker meets the warning itself. The warning filters, and
``tempfile.tempdir``, are left as a fresh interpreter has them. Fork safety: the zygote has
no thread (checked before every fork from ``/proc/self/task``), no event loop and no open
descriptor other than its own (checked too); after the imports, everything alive is frozen
out of the garbage collector's sight (``gc.freeze``), as its documentation advises before
forking.

The same file is the zygote (``python -u tests/xdist_zygote.py serve FD MARKED...``) and the
launcher (``python -I -S tests/xdist_zygote.py launch SOCKET -u -c BOOTSTRAP``): its top level
imports only what the launcher needs.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import socket
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any, NoReturn

HELLO_TIMEOUT = 120.0
"""How long a launcher waits for the zygote to take its worker (it answers once it has
imported everything, 3-4 CPU-s, longer on a busy machine): a dead zygote is noticed at once
(the connection is refused or reset), a hung one after this."""

PRELOAD = """
execnet __future__ keyword operator reprlib collections types functools contextlib enum ast
opcode dis importlib warnings re copyreg token tokenize linecache inspect textwrap typing
struct traceback weakref threading shlex hashlib heapq queue _pytest gettext argparse copy
dataclasses fnmatch glob csv email ntpath urllib ipaddress pathlib binascii zlib bz2 lzma
shutil zipfile quopri math bisect random select selectors array socket datetime locale
calendar base64 string tempfile json pluggy iniconfig platform uuid py pygments html
unicodedata pprint numbers decimal bdb signal fcntl subprocess logging pytest unittest difflib
xml pyexpat tomllib packaging concurrent ssl asyncio contextvars typing_extensions
_hypothesis_globals _hypothesis_pytestplugin readline psycopg ctypes
psycopg_binary sysconfig zoneinfo sqlite3 psycopg_pool hypothesis sortedcontainers fractions
gzip pkgutil cmd codeop code pdb cronsim mmap statistics httpx http mimetypes idna click rich
pickle colorsys socketserver wsgiref prometheus_client timeit resource opentelemetry psutil
starlette annotated_doc anyio sniffio fastapi pydantic_core pydantic typing_inspection
annotated_types hmac secrets python_multipart yaml sse_starlette configparser uvicorn
multiprocessing attr attrs rpds referencing jsonschema jsonschema_specifications typer
shellingham playwright greenlet stringprep _markupbase schemathesis jsonschema_rs urllib3
charset_normalizer requests certifi werkzeug markupsafe mcp_types mcp cryptography httpx2
tracemalloc multidict aiohttp yarl propcache netrc aiohappyeyeballs frozenlist aiosignal mypy
""".split()
"""What the zygote imports, in this order: the top-level packages of what a worker has in
``sys.modules`` once it has collected the suite, in the order they were first imported (a
plugin's ``pytest_collection_finish`` wrote ``list(sys.modules)`` from ``pytest -n 1 -k
no_such_test``), less statewright, xdist, the tests, the examples, and what is not importable
by name (Cython's and cffi's internals). Their submodules come with them, mostly: 3.1 CPU-s
here, of which importing every module the worker had would add 0.1. A package missing from
this environment is skipped; a new dependency missing from the list is only slower."""

NOT_PRELOADED = ("statewright", "tests", "xdist", "conftest")
"""Never in the zygote (see the module docstring): it refuses to serve if an import brought
one in."""


# -- the launcher (python -I -S: no site, nothing but the standard library's core) ---------


def _readline(sock: socket.socket, buffer: bytearray) -> bytes:
    """The next line from ``sock`` (without its newline); b"" at EOF."""
    while b"\n" not in buffer:
        data = sock.recv(4096)
        if not data:
            return b""
        buffer += data
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _exit_as(code: int) -> NoReturn:
    """Exit with ``code`` as ``subprocess`` reports it: ``-N`` is death by signal N."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def launch(path: str, args: list[str]) -> NoReturn:
    """Have the zygote at ``path`` fork the worker ``python ARGS`` on this process's standard
    streams and wait for it; or exec ``python ARGS`` when the zygote cannot."""

    def fallback(reason: str) -> NoReturn:
        print(
            f"xdist zygote: {reason}; starting the worker as a fresh interpreter", file=sys.stderr
        )
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as ignored after exec otherwise
        os.execv(sys.executable, [sys.executable, *args])

    # Ctrl-C reaches the worker directly (the terminal signals the whole process group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(args) != 3 or args[:2] != ["-u", "-c"]:
        fallback(f"unexpected interpreter arguments {args[:-1]}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    buffer = bytearray()
    try:
        sock.settimeout(HELLO_TIMEOUT)
        sock.connect(path)
        hello = _readline(sock, buffer)
    except OSError as exc:
        fallback(f"cannot reach the zygote ({exc})")
    if hello != b"hello":
        fallback("the zygote closed the connection")
    request = marshal.dumps((args, dict(os.environ), os.getcwd()))
    try:
        socket.send_fds(sock, [len(request).to_bytes(8, "big")], [0, 1, 2])
        sock.sendall(request)
        sock.settimeout(None)
        answer = _readline(sock, buffer).decode()
    except OSError as exc:
        answer = f"error {exc}"
    kind, _, value = answer.partition(" ")
    if kind == "refused":  # no child: these streams are still this process's alone
        fallback(f"the zygote refused: {value}")
    if kind != "pid":
        print(f"xdist zygote: lost while forking the worker ({answer!r})", file=sys.stderr)
        os._exit(1)
    pid = int(value)
    # The worker holds the pipes to the controller now: the controller sees EOF when it exits.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:  # exited (and reaped) already: the zygote reports its exit code
        pidfd = None

    def forward(signum: int, frame: object) -> None:
        sock.sendall(f"signal {signum}\n".encode())

    signal.signal(signal.SIGTERM, forward)
    try:
        report = _readline(sock, buffer).decode()
    except OSError:
        report = ""
    kind, _, value = report.partition(" ")
    if kind == "exit":
        _exit_as(int(value))
    # The zygote is gone; the worker runs on, orphaned: wait for it, its exit code unknown.
    if pidfd is not None:
        select.select([pidfd], [], [])
    print(f"xdist zygote: died; worker {pid} ended, exit code unknown", file=sys.stderr)
    os._exit(1)


# -- the zygote ----------------------------------------------------------------------------


def _fds() -> set[int]:
    """The open descriptors (less the one that listed them)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:
            continue
        found.add(int(name))
    return found


def _startup_vars(env: dict[str, str]) -> dict[str, str]:
    """The variables that change how an interpreter starts (and that the zygote started with)."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith("PYTHON") and k != "PYTHONPATH") or k.startswith("LC_") or k == "LANG"
    }


def _preload(marked: Iterable[str]) -> None:
    """Import :data:`PRELOAD`; raise if a module pytest would want to rewrite is imported."""
    import gc
    import importlib.util
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in PRELOAD:
            if name not in sys.modules and importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    tempfile.tempdir = None  # the worker's own TMPDIR, should an import have asked for it
    rewritten = [name for name in marked if name in sys.modules]
    if rewritten:
        raise RuntimeError(f"the preload imported {rewritten}, which pytest rewrites")
    imported = [n for n in sys.modules if n.partition(".")[0] in NOT_PRELOADED]
    if imported:
        raise RuntimeError(f"the preload imported {imported[:5]}")
    gc.collect()
    gc.freeze()


def _receive(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the launcher hung up")
        data += chunk
    return bytes(data)


class _Worker:
    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.pid = 0
        self.pidfd = -1


class _Zygote:
    def __init__(self, listener: socket.socket, life: int, streams: list[Any]) -> None:
        self.listener = listener
        self.life = life
        self.streams = streams
        self.signals = {s: signal.getsignal(s) for s in signal.valid_signals()}
        self.env = _startup_vars(dict(os.environ))
        self.path = sys.path[1:]  # the interpreter's, less its '' (``-c``)
        self.by_conn: dict[int, _Worker] = {}
        self.by_pidfd: dict[int, _Worker] = {}
        self.base_fds: set[int] = set()

    def serve(self) -> None:
        self.base_fds = _fds()
        while True:
            waiting = [self.life, self.listener.fileno(), *self.by_conn, *self.by_pidfd]
            readable, _, _ = select.select(waiting, [], [])
            if self.life in readable and not os.read(self.life, 4096):
                return  # the controller closed our stdin: the run is over (or it died)
            for fd in readable:
                if fd == self.listener.fileno():
                    conn, _ = self.listener.accept()
                    self.take(conn)
                elif fd in self.by_pidfd:
                    self.reap(self.by_pidfd[fd])
                elif fd in self.by_conn:
                    self.hear(self.by_conn[fd])

    def take(self, conn: socket.socket) -> None:
        """Fork the worker a launcher asks for (or refuse, when it may start a fresh one)."""
        fds: list[int] = []
        try:
            conn.settimeout(30)
            conn.sendall(b"hello\n")
            header, fds, _, _ = socket.recv_fds(conn, 8, 3)
            header += _receive(conn, 8 - len(header))
            args, env, cwd = marshal.loads(_receive(conn, int.from_bytes(header, "big")))
        except (OSError, EOFError, ValueError) as exc:
            print(f"xdist zygote: a launcher failed: {exc!r}", file=sys.stderr)
            self._close(conn, fds)
            return
        worker = _Worker(conn)
        try:
            self.check(args, env, [conn.fileno(), *fds])
            worker.pid = self.fork(conn, fds, args[2], env, cwd)
        except Exception as exc:
            with contextlib.suppress(OSError):
                conn.sendall(f"refused {exc}\n".encode())
            self._close(conn, fds)
            return
        for fd in fds:
            os.close(fd)
        worker.pidfd = os.pidfd_open(worker.pid)
        self.by_conn[conn.fileno()] = worker
        self.by_pidfd[worker.pidfd] = worker
        with contextlib.suppress(OSError):
            conn.sendall(f"pid {worker.pid}\n".encode())

    def check(self, args: list[str], env: dict[str, str], fds: list[int]) -> None:
        """Refuse to fork a worker that would not be as a fresh one (``fds``: the launcher's
        connection and descriptors)."""
        if len(fds) != 4 or len(args) != 3 or args[:2] != ["-u", "-c"]:
            raise ValueError(f"not a popen worker: {args[:-1]}, {len(fds) - 1} descriptors")
        if _startup_vars(env) != self.env:
            raise ValueError("its interpreter would start in another environment")
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(f"the zygote runs {threads} threads: forking would be unsafe")
        ours = self.base_fds | set(self.by_conn) | set(self.by_pidfd) | set(fds)
        leaked = _fds() - ours
        if leaked:  # something the preload opened would be shared by every worker
            raise RuntimeError(f"the zygote has opened descriptors {sorted(leaked)}")

    def fork(
        self, conn: socket.socket, fds: list[int], code: str, env: dict[str, str], cwd: str
    ) -> int:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            try:
                conn.close()
                self.become_worker(fds, code, env, cwd)
            except BaseException:
                import traceback

                traceback.print_exc()
                os._exit(70)
            _run_as_main(code)
        return pid

    def become_worker(self, fds: list[int], code: str, env: dict[str, str], cwd: str) -> None:
        """In the child: everything ``python -u -c`` would have started with."""
        import builtins
        import io
        import types

        for signum, handler in self.signals.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        self.listener.close()
        os.close(self.life)
        for worker in self.by_conn.values():
            worker.conn.close()
        for pidfd in self.by_pidfd:
            os.close(pidfd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        extra = python_path(env)
        sys.path[:] = ["", *extra, *(p for p in self.path if p not in extra)]
        sys.argv[:] = ["-c"]
        sys.orig_argv[:] = [sys.executable, "-u", "-c", code]
        streams = []
        for fd, old in enumerate(self.streams):
            binary: Any = open(fd, "rb" if fd == 0 else "wb", -1 if fd == 0 else 0, closefd=False)
            getattr(binary, "raw", binary).name = old.name
            text = io.TextIOWrapper(
                binary,
                encoding=old.encoding,
                errors=old.errors,
                newline="\n",
                line_buffering=old.line_buffering,
                write_through=old.write_through,
            )
            text.mode = old.mode  # type: ignore[misc]
            streams.append(text)
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams  # type: ignore[misc]
        main = types.ModuleType("__main__")
        main.__dict__.update(
            __builtins__=builtins,
            __loader__=builtins.__loader__,
            __spec__=None,
            __annotations__={},
            __package__=None,
        )
        sys.modules["__main__"] = main

    def hear(self, worker: _Worker) -> None:
        """A launcher's request (pass on a signal), or its death (SIGKILL its worker)."""
        try:
            data = worker.conn.recv(4096)
        except OSError:
            data = b""
        if not data:  # the launcher is gone (killed): so is its worker
            if worker.pidfd in self.by_pidfd:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(worker.pidfd, signal.SIGKILL)
            del self.by_conn[worker.conn.fileno()]
            worker.conn.close()
            return
        for line in data.decode().splitlines():
            kind, _, value = line.partition(" ")
            if kind == "signal" and worker.pidfd in self.by_pidfd:
                signal.pidfd_send_signal(worker.pidfd, int(value))

    def reap(self, worker: _Worker) -> None:
        _, status = os.waitpid(worker.pid, 0)
        del self.by_pidfd[worker.pidfd]
        os.close(worker.pidfd)
        if worker.conn.fileno() in self.by_conn:
            del self.by_conn[worker.conn.fileno()]
            with contextlib.suppress(OSError):
                worker.conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            worker.conn.close()

    def shutdown(self) -> None:
        for worker in list(self.by_pidfd.values()):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(worker.pidfd, signal.SIGKILL)
            self.reap(worker)

    @staticmethod
    def _close(conn: socket.socket, fds: list[int]) -> None:
        conn.close()
        for fd in fds:
            os.close(fd)


def python_path(env: dict[str, str]) -> list[str]:
    """The folders ``PYTHONPATH`` in ``env`` puts first on an interpreter's ``sys.path``."""
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def exit_status(exc: SystemExit) -> int:
    """The status an interpreter exits with on ``exc`` (a code that is not an int is printed
    to stderr, and the status is 1). Shared with tests/forkserver.py's children."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def _run_as_main(code: str) -> NoReturn:
    """Run ``code`` in ``__main__`` and exit as ``python -c code`` would."""
    import atexit
    import threading

    status = 0
    interrupted = False
    try:
        exec(compile(code, "<string>", "exec"), sys.modules["__main__"].__dict__)
    except SystemExit as exc:
        status = exit_status(exc)
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        traceback = exc.__traceback__.tb_next if exc.__traceback__ else None  # from <string>
        sys.excepthook(type(exc), exc, traceback)
        status = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                status = status or 120
    if interrupted:
        _exit_as(-signal.SIGINT)
    os._exit(status)


def serve(listen_fd: int, marked: list[str]) -> None:
    """The zygote: import, then fork the workers that launchers on ``listen_fd`` ask for."""
    streams = [sys.stdin, sys.stdout, sys.stderr]  # as a worker's would be: same flags, same env
    sys.path[0] = ""  # as ``python -c`` has it, during the imports too
    life = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # nothing imported may read the controller's pipe, or print to it
    os.dup2(devnull, 1)
    os.close(devnull)
    zygote = _Zygote(socket.socket(fileno=listen_fd), life, streams)
    # Ctrl-C reaches the whole process group: the controller stops the zygote itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _preload(marked)
    except Exception as exc:
        print(f"xdist zygote: not serving: {exc!r}", file=sys.stderr)
        sys.exit(1)
    try:
        zygote.serve()
    finally:
        zygote.shutdown()


# -- the controller's side ----------------------------------------------------------------


class Zygote:
    """The controller's handle on the run's zygote."""

    def __init__(self, folder: Path, marked: Iterable[str]) -> None:
        import shlex
        import subprocess

        script = os.path.abspath(__file__)
        path = str(folder / "zygote.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(64)
            command = [sys.executable, "-u", script, "serve", str(listener.fileno()), *marked]
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                pass_fds=[listener.fileno()],
            )
        finally:
            listener.close()  # the zygote's alone: once it dies, connecting fails at once
        self.launcher = shlex.join([sys.executable, "-I", "-S", script, "launch", path])

    def specs(self, workers: int) -> list[str]:
        """``--tx`` for ``workers`` workers forked from this zygote."""
        return [f"popen//python={self.launcher}"] * workers

    def stop(self) -> None:
        """Close its stdin: it SIGKILLs any worker still running and exits."""
        import subprocess

        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def plain_popen(tx: list[str]) -> bool:
    """Whether ``tx`` is what ``-n N`` makes (N plain popen workers), not a ``--tx`` of the
    user's own."""
    return bool(tx) and all(spec == "popen" for spec in tx)


if __name__ == "__main__":
    if sys.argv[1] == "launch":
        launch(sys.argv[2], sys.argv[3:])
    serve(int(sys.argv[2]), sys.argv[3:])

"""A bounded pool of daemon threads for synchronous user code (handlers, step actions, hooks).

Why not :class:`concurrent.futures.ThreadPoolExecutor`: its threads are joined when the
interpreter exits, so one handler stuck in a call that never returns would keep a stopped
worker process alive forever. The worker gives up on such a call (a deadline, a lost lease)
and the lease moves on; the thread must not hold the process hostage. Otherwise this is the
same design: threads start on demand up to ``max_workers`` and take work from one queue.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class UserCodePool(Executor):
    """Runs callables in up to ``max_workers`` daemon threads.

    Attributes:
        busy: how many threads are running user code now (including calls the worker gave
            up on that have not returned yet).
    """

    def __init__(self, max_workers: int, name: str = "statewright-user") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.name = name
        self.busy = 0
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` was called (the pool takes no more work)."""
        return self._shutdown

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot run user code after the pool was shut down")
            future: Future[T] = Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                with self._lock:
                    self.busy += 1
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                finally:
                    with self._lock:
                        self.busy -= 1
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; with ``wait``, join the threads (one stuck in user code is not
        waited for beyond the caller's patience: it is a daemon)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()

"""Pages of stored records (the log, the steps, workflows, a batch of the SSE stream): read a
chunk at a time, encoded off the event loop, within a byte budget, and only
:data:`statewright.offload.LARGE_READS` at once per process.

What a page costs, at most: one chunk of records as read (:data:`CHUNK`, fewer once the
records' size is known) and its encoded items (the budget plus one item). A page waits for a
slot before its first read, so that many clients reading large pages at once do not make the
process grow with their number, and encoding happens on the JSON threads, so that the event
loop keeps answering everyone else (probes first of all) meanwhile. (Only what a read's first
:data:`~statewright.offload.OFFLOAD_CHARS` cost is encoded on the loop: a small page entire.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from starlette.responses import Response

from statewright import jsonvalue, offload

C = TypeVar("C")
R = TypeVar("R")

PAGE_BYTES = 4 * 1024 * 1024
"""A page of the log or the steps stops once its items pass this many bytes (and it holds at
least one): with values of up to 256 KiB each, 1,000 of them must not make one response."""
CHUNK = 101
"""Records read from the store at a time while filling a page (bounds the memory held); a
page of the default 100 is one read."""
FIRST_CHUNK = 17
"""The first read of a page of more than 100 (already several reads): as many records of the
largest size (256 KiB each for a value, a log entry has two) as fill a page, and one more.
Later reads take as many as the page still has room for at the records' average size."""


@dataclass
class Page(Generic[C]):
    """Encoded items, the cursor after the last one, and whether more follow."""

    cursor: C
    texts: list[str] = field(default_factory=list)
    keys: list[C] = field(default_factory=list)
    size: int = 0
    more: bool = False

    def want(self, limit: int, budget: int | None, first: int | None = None) -> int:
        """How many records to read next: one more than fit (are there more?), and once the
        items' size is known, no more than the budget still takes at their average size.
        ``first``: the first read's size, when the caller knows better (the stream: what
        its previous batch held)."""
        n = min(CHUNK, limit - len(self.texts) + 1)
        if budget is not None and not self.texts:
            if first is not None:
                n = min(n, max(first, 2))
            elif limit > CHUNK - 1:
                n = min(n, FIRST_CHUNK)
        if budget is not None and self.texts and self.size:
            n = min(n, max(1, (budget - self.size) * len(self.texts) // self.size + 2))
        return n

    def take(
        self,
        batch: list[R],
        start: int,
        key: Callable[[R], C],
        view: Callable[[R], Any],
        limit: int,
        budget: int | None,
        most: int | None = None,
    ) -> tuple[bool, int]:
        """Encode the records of ``batch`` from ``start`` until the page is full, or until
        this call encoded more than ``most`` characters; whether the page is full, and where
        it stopped. (Run on the JSON threads, ``view`` must not touch the event loop's
        objects.)"""
        encoded = 0
        for i in range(start, len(batch)):
            if len(self.texts) == limit or (
                budget is not None and self.texts and self.size > budget
            ):
                return True, i
            if most is not None and encoded > most:
                return False, i
            text = jsonvalue.dumps(view(batch[i]), ensure_ascii=False)
            self.texts.append(text)
            self.size += len(text)
            encoded += len(text)
            self.cursor = key(batch[i])
            self.keys.append(self.cursor)
        return False, len(batch)


async def budgeted(
    fetch: Callable[[C, int], Awaitable[list[R]]],
    cursor: C,
    key: Callable[[R], C],
    view: Callable[[R], Any],
    limit: int,
    budget: int | None = PAGE_BYTES,
    first: int | None = None,
) -> Page[C]:
    """Up to ``limit`` records after ``cursor``, each encoded (depth-proof), until the page
    passes ``budget`` bytes (None: no budget, for records whose views are small); ``first``:
    how many to read first (see :meth:`Page.want`)."""
    page: Page[C] = Page(cursor)
    async with offload.large_read():
        while True:
            want = page.want(limit, budget, first)
            batch = await fetch(page.cursor, want)
            # A small batch is encoded in place (a trip to a thread would cost more than it);
            # what follows its first OFFLOAD_CHARS goes to the JSON threads.
            most = offload.OFFLOAD_CHARS
            full, done = page.take(batch, 0, key, view, limit, budget, most)
            if not full and done < len(batch):
                full, done = await offload.run(page.take, batch, done, key, view, limit, budget)
            if full:
                page.more = True
                return page
            if len(batch) < want:
                return page


def _body(texts: list[str], rest: dict[str, Any]) -> bytes:
    tail = jsonvalue.dumps(rest, ensure_ascii=False)[1:]
    body = '{"items":[' + ",".join(texts) + "]" + ("," + tail if tail != "}" else "}")
    return body.encode("utf-8")


async def response(page: Page[Any], rest: dict[str, Any]) -> Response:
    """``{"items": [...], **rest}`` from the page's items, already encoded."""
    if page.size > offload.OFFLOAD_CHARS:
        content = await offload.run(_body, page.texts, rest)
    else:
        content = _body(page.texts, rest)
    return Response(content, media_type="application/json")

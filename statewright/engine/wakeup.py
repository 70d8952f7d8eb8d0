"""Waiting for the store's wake-ups without losing one.

A wake-up only reaches waiters already waiting. So listen first, then look (claim, read the
inbox, check for cancel requests), then wait: a wake-up sent while looking ends the wait at
once instead of being lost until the next poll.
"""

from __future__ import annotations

import asyncio

from statewright.store.protocol import Store


async def listen(store: Store, timeout: float) -> asyncio.Task[None]:
    """Start ``store.wait_for_work(timeout)`` now; await the task after looking."""
    waiter = asyncio.create_task(store.wait_for_work(max(0.0, timeout)))
    await asyncio.sleep(0)  # let it subscribe before the caller looks
    return waiter

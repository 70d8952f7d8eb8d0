"""Fake external services for the examples, each honouring idempotency keys.

Like a real payment API (Stripe's ``Idempotency-Key``), a request repeated with the same key
gets the first answer back and changes nothing more; ``calls`` counts how often a key was
sent. Records live in memory, or in a small SQLite file of their own so that they survive a
killed worker process (``statewright demo`` reads them afterwards to prove that each key was
charged once).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from statewright import Applied, FatalError, NotApplied


def ref(prefix: str, key: str) -> str:
    """A stable id derived from an idempotency key: ``ch_3f2a...``."""
    return f"{prefix}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


class KeyedRecords:
    """Answers recorded under idempotency keys, in memory or in an SQLite file's ``table``."""

    def __init__(self, path: str | os.PathLike[str] | None, table: str) -> None:
        self.path = None if path is None else os.fspath(path)
        self.table = table
        self._memory: dict[str, dict[str, Any]] = {}
        if self.path is not None:
            with self._db() as db:
                db.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} (key TEXT PRIMARY KEY, kind TEXT,"
                    " amount_cents INTEGER, result TEXT NOT NULL, calls INTEGER NOT NULL)"
                )

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path or ":memory:", timeout=10.0, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
        finally:
            conn.close()

    def record(self, key: str, kind: str, amount_cents: int, result: dict[str, Any]) -> Any:
        """Store ``result`` under ``key`` unless the key is known; return the first answer."""
        if self.path is None:
            entry = self._memory.setdefault(
                key, {"kind": kind, "amount_cents": amount_cents, "result": result, "calls": 0}
            )
            entry["calls"] += 1
            return entry["result"]
        with self._db() as db:
            row = db.execute(
                f"INSERT INTO {self.table} VALUES (?, ?, ?, ?, 1)"
                " ON CONFLICT (key) DO UPDATE SET calls = calls + 1 RETURNING result",
                (key, kind, amount_cents, json.dumps(result)),
            ).fetchone()
        return json.loads(row["result"])

    def all(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every record: key, kind, amount_cents, result, calls."""
        if self.path is None:
            rows = [{"key": k, **v} for k, v in sorted(self._memory.items())]
        else:
            with self._db() as db:
                rows = [
                    {**dict(r), "result": json.loads(r["result"])}
                    for r in db.execute(f"SELECT * FROM {self.table} ORDER BY key")
                ]
        return [r for r in rows if kind is None or r["kind"] == kind]

    def lookup(self, key: str) -> Applied | NotApplied:
        """A reconcile hook: did a request with this key go through, and with what answer?"""
        found = [r for r in self.all() if r["key"] == key]
        return Applied(found[0]["result"]) if found else NotApplied()


class PaymentDeclined(FatalError):
    """The card issuer declined the payment."""

    code = "payment_declined"


class FakePaymentGateway(KeyedRecords):
    """A card processor.

    Args:
        path: SQLite file for its records; None keeps them in memory.
        latency: seconds the capture answer takes *after* the charge is made: the window in
            which a crash leaves the caller not knowing whether it was charged.
        limit_cents: larger authorizations are declined.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        latency: float = 0.0,
        limit_cents: int = 500_000,
    ) -> None:
        super().__init__(path, "gateway")
        self.latency = latency
        self.limit_cents = limit_cents

    @classmethod
    def from_env(cls) -> FakePaymentGateway:
        """Configured by ``STATEWRIGHT_EXAMPLE_PAYMENTS_DB`` and ``..._PAYMENTS_LATENCY``.

        ``statewright demo`` sets them to run the order example in a separate worker process
        that shares the gateway's records with the demo.
        """
        return cls(
            os.environ.get("STATEWRIGHT_EXAMPLE_PAYMENTS_DB"),
            latency=float(os.environ.get("STATEWRIGHT_EXAMPLE_PAYMENTS_LATENCY", "0")),
        )

    async def authorize(self, key: str, amount_cents: int) -> dict[str, str]:
        if amount_cents > self.limit_cents:
            raise PaymentDeclined(f"amount {amount_cents} is over the card limit")
        auth: dict[str, str] = self.record(
            key, "authorize", amount_cents, {"authorization_id": ref("auth", key)}
        )
        return auth

    async def capture(self, key: str, authorization_id: str, amount_cents: int) -> dict[str, str]:
        charge: dict[str, str] = self.record(
            key, "capture", amount_cents, {"charge_id": ref("ch", key)}
        )
        await asyncio.sleep(self.latency)  # the money moved; the answer is slow to come back
        return charge

    def charges(self) -> list[dict[str, Any]]:
        return self.all("capture")


class FakePaymentsAPI(KeyedRecords):
    """Pays refunds out."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(path, "payouts")

    def payout(self, key: str, amount_cents: int) -> dict[str, str]:
        paid: dict[str, str] = self.record(
            key, "payout", amount_cents, {"payout_id": ref("po", key)}
        )
        return paid

    def payouts(self) -> list[dict[str, Any]]:
        return self.all("payout")


class FakeWarehouse:
    """Stock and fulfilment (in memory)."""

    def __init__(self) -> None:
        self.reservations: dict[str, dict[str, Any]] = {}
        self.released: set[str] = set()

    def reserve(self, key: str, sku: str, quantity: int) -> dict[str, str]:
        rid = ref("res", key)
        self.reservations.setdefault(rid, {"sku": sku, "quantity": quantity})
        return {"reservation_id": rid}

    def release(self, reservation_id: str) -> dict[str, str]:
        self.released.add(reservation_id)
        return {"released": reservation_id}

    def create_fulfilment(self, key: str, reservation_id: str) -> dict[str, str]:
        return {"fulfilment_id": ref("ful", key)}


class FakeNotifier:
    """E-mail (in memory); one message per key."""

    def __init__(self) -> None:
        self.sent: dict[str, tuple[str, str]] = {}

    def send(self, key: str, to: str, text: str) -> dict[str, str]:
        self.sent.setdefault(key, (to, text))
        return {"message_key": key}

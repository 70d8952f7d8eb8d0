"""What ``statewright demo`` proves at the end, each as a named pass/fail check."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statewright.cli.demo_crash import Crash
from statewright.engine import Engine
from statewright.errors import ReplayMismatch
from statewright.types import WorkflowFilter

PAID = {"payment_captured", "fulfillment_triggered", "shipped", "delivered", "closed", "refunded"}
"""Order states past the capture: the order must have been charged exactly once."""
EXPECTED = {
    "order-1001": "closed", "order-1002": "closed", "order-1003": "refunded",
    "order-1004": "cancelled", "order-1005": "cancelled",
    "refund-small": "done", "refund-approved": "done", "refund-denied": "rejected",
    "refund-timeout": "failed", "refund-huge": "rejected", "refund-invalid": "rejected",
}  # fmt: skip


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


async def run_checks(
    engine: Engine,
    crash: Crash,
    orders: Mapping[str, Mapping[str, Any]],
    gateway: Any,
    payments: Any,
) -> tuple[list[Check], list[dict[str, Any]]]:
    """Every check, and one summary row per workflow."""
    rows = await engine.list_workflows(WorkflowFilter(limit=10_000))
    states = {r.id: r.state for r in rows}
    charges = gateway.charges()
    payouts = payments.payouts()
    moved = Counter(m["key"].partition(":")[0] for m in [*charges, *payouts])
    replay_bad: dict[str, str] = {}
    for r in rows:
        try:
            await engine.check(r.id)
        except ReplayMismatch as exc:
            replay_bad[r.id] = exc.message

    checks = [
        Check(
            "the worker process was killed in the middle of a payment step",
            crash.mid_step,
            "" if crash.mid_step else "no charge was in flight when it was killed",
        ),
        Check(
            "every workflow reached a terminal state",
            all(r.terminal for r in rows),
            ", ".join(f"{r.id} is {r.state}" for r in rows if not r.terminal),
        ),
        Check(
            "every workflow ended where its story says",
            _mismatches(states) == [],
            ", ".join(_mismatches(states)),
        ),
        _charged_once(states, orders, charges),
        Check(
            "no payment request was sent twice (interrupted ones were reconciled)",
            all(c["calls"] == 1 for c in [*charges, *payouts]),
            ", ".join(
                f"{c['key']}: {c['calls']} requests"
                for c in [*charges, *payouts]
                if c["calls"] != 1
            ),
        ),
        _paid_out_once(states, payouts),
        Check(
            f"replaying each workflow's log gives its stored row ({len(rows)} checked)",
            not replay_bad,
            "; ".join(replay_bad.values()),
        ),
    ]
    table = [
        {
            "id": r.id,
            "type": r.type,
            "state": r.state,
            "version": r.version,
            "replay_ok": r.id not in replay_bad,
            "charged": moved.get(r.id, 0),
        }
        for r in rows
    ]
    return checks, sorted(table, key=lambda t: (t["type"], t["id"]))


def _mismatches(states: Mapping[str, str]) -> list[str]:
    return [
        f"{wid} is {states.get(wid)}, expected {want}"
        for wid, want in EXPECTED.items()
        if states.get(wid) != want
    ]


def _charged_once(
    states: Mapping[str, str],
    orders: Mapping[str, Mapping[str, Any]],
    charges: list[dict[str, Any]],
) -> Check:
    expected = {
        f"{oid}:capture": orders[oid]["amount_cents"]
        for oid, st in states.items()
        if oid in orders and st in PAID
    }
    count = Counter(c["key"] for c in charges)
    problems = [f"{k} charged {count[k]} times" for k in expected if count[k] != 1]
    problems += [
        f"{c['key']} charged but should not be" for c in charges if c["key"] not in expected
    ]
    problems += [
        f"{c['key']} charged {c['amount_cents']}, not {expected[c['key']]}"
        for c in charges
        if c["key"] in expected and c["amount_cents"] != expected[c["key"]]
    ]
    return Check(
        f"each paid order was charged exactly once ({len(expected)} charges), "
        "cancelled orders never",
        not problems,
        ", ".join(problems),
    )


def _paid_out_once(states: Mapping[str, str], payouts: list[dict[str, Any]]) -> Check:
    expected = {
        f"{rid}:payout" for rid, st in states.items() if rid.startswith("refund-") and st == "done"
    }
    count = Counter(p["key"] for p in payouts)
    problems = [f"{k} paid {count[k]} times" for k in expected if count[k] != 1]
    problems += [f"{k} paid but should not be" for k in count if k not in expected]
    return Check(
        f"each approved refund was paid out exactly once ({len(expected)} payouts), "
        "the others never",
        not problems,
        ", ".join(problems),
    )

"""The operator dashboard in a real Chromium against a real ``statewright serve --worker``.

One refund over the auto-approve limit pauses in ``awaiting_approval`` by itself (the worker in
the service runs it there). An agent's token sees it without approve/deny buttons (and the
API refuses its approval with 403); the approver's token sees the stuck ticket highlighted
(and parked for an operator), opens the refund, sees the diagram with the current state
marked, approves it, and watches it move on with the approval in the history under the
approver's name.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, ConsoleMessage, Locator, Page, Request, expect

from statewright import SQLiteStore
from statewright.types import DeferWrite
from tests.browser.conftest import AGENT, APPROVER, BROWSER_GROUP, ROOT, Caller, Server
from tests.conftest import run_async

pytestmark = BROWSER_GROUP

REFUND = "refund-big-1"
TICKET = "ticket-1"
HOSTILE = '<img src=x onerror="window.__xss = 1">'
CURRENT_FILL = "rgb(253, 230, 138)"  # the diagram's classDef current (#fde68a)
SCREENSHOT = ROOT / "artifacts" / "dashboard.png"
TIMEOUT = 15.0


def _until(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _workflow(api: httpx.Client, wid: str, who: Caller | None = APPROVER) -> dict[str, Any]:
    resp = api.get(f"/v1/workflows/{wid}", headers=who.headers if who else {})
    resp.raise_for_status()
    body: dict[str, Any] = resp.json()
    return body


@dataclass
class Watched:
    """A page, with what it logged and every URL it asked for."""

    page: Page
    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)


@contextmanager
def dashboard(profile: BrowserContext, server: Server, who: Caller | None) -> Iterator[Watched]:
    """A new page (a tab: its sessionStorage, where the dashboard keeps the token, is empty) of
    the package's browser profile on the dashboard, logged in as ``who`` through the token
    field (None: open mode, no token)."""
    page = profile.new_page()
    page.set_default_timeout(TIMEOUT * 1000)
    watched = Watched(page)

    def console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            watched.errors.append(msg.text)

    def request(req: Request) -> None:
        watched.urls.append(req.url)

    page.on("console", console)
    page.on("pageerror", lambda exc: watched.errors.append(f"uncaught: {exc}"))
    page.on("request", request)
    try:
        page.goto(f"{server.url}/")
        expect(page).to_have_url(f"{server.url}/ui/")  # / redirects to the dashboard
        if who is not None:
            expect(page.locator("#banner")).to_contain_text("needs an API token")  # no token yet
            page.fill("#token", who.token)
            page.click("#token-save")
        expect(page.locator("#whoami")).not_to_be_empty()
        expect(page.locator("#banner")).to_be_hidden()
        yield watched
        # Offline: every request went to the service itself (no CDN), and nothing broke
        # except the one refused request made before the token was entered.
        foreign = [u for u in watched.urls if not u.startswith(f"{server.url}/")]
        assert not foreign, f"requests outside the service: {foreign}"
        unexpected = [e for e in watched.errors if "status of 401" not in e]
        assert not unexpected, f"errors in the page: {unexpected}"
    finally:
        page.close()


def history_row(page: Page, event: str, actor: str) -> Locator:
    """The history's one row of ``event``, checked to be ``actor``'s."""
    row = page.locator(f'#history tr.history-row[data-event="{event}"]')
    expect(row).to_have_count(1)
    expect(row.locator(".actor")).to_have_text(actor)
    return row


def _park(server: Server, wid: str, why: str) -> None:
    """Park a workflow for an operator, as a worker would, in the service's own database (in
    a thread of its own: Playwright's sync API marks an event loop running in this one)."""

    async def go() -> None:
        store = SQLiteStore(server.log.with_name("dashboard.db"))
        await store.open()
        try:
            row = await store.get_workflow(wid)
            assert row is not None
            write = DeferWrite(wid, row.version, time.time(), 0, last_error="boom", parked=why)
            await store.defer(write)
        finally:
            await store.close()

    run_async(go)


def _start(
    api: httpx.Client, wid: str, type_: str, input: dict[str, Any], who: Caller | None = AGENT
) -> None:
    body = {"type": type_, "id": wid, "input": input}
    resp = api.post("/v1/workflows", json=body, headers=who.headers if who else {})
    assert resp.status_code == 201, resp.text


def test_approver_approves_a_paused_refund_in_the_dashboard(
    server: Server, profile: BrowserContext, tmp_path: Path
) -> None:
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        refund = {"order_id": "order-9001", "amount_cents": 25_000, "customer": "ada@example.com"}
        _start(api, REFUND, "refund_approval", refund)
        _start(api, TICKET, "support_ticket", {"title": HOSTILE})
        _until(
            "the worker paused the refund",
            lambda: _workflow(api, REFUND)["state"] == "awaiting_approval",
        )
        # The agent looks first (at the refund only): its ticket is stuck after a second,
        # and that second passes meanwhile instead of in a wait of its own.
        _agent_sees_no_decision(profile, server, api)

        _until("the ticket is stuck", lambda: _workflow(api, TICKET)["stuck"] is True)
        _park(server, TICKET, "fatal_error")
        assert _workflow(api, TICKET)["parked"] == "fatal_error"
        assert _workflow(api, REFUND)["stuck"] is False
        _approver_decides(profile, server, api, tmp_path)

        page = api.get(f"/v1/workflows/{REFUND}/history", headers=APPROVER.headers).json()
        assert page["next_cursor"] is None
        granted = [t for t in page["items"] if t["event"] == "approval_granted"]
        assert len(granted) == 1
        assert granted[0]["actor"] == "maria"
        assert granted[0]["payload"] == {"approver": "maria", "comment": "damaged in transit"}


def _agent_sees_no_decision(profile: BrowserContext, server: Server, api: httpx.Client) -> None:
    with dashboard(profile, server, AGENT) as w:
        page = w.page
        expect(page.locator("#whoami")).to_contain_text("may not approve")
        row = page.locator(f'tr.wf-row[data-id="{REFUND}"]')
        expect(row.locator(".state")).to_have_text("awaiting_approval")
        expect(row).not_to_have_class(re.compile(r"\bpaused\b"))
        row.locator("a.wf-link").click()
        expect(page).to_have_url(re.compile(rf"#/workflows/{REFUND}$"))
        expect(page.locator("#wf-state")).to_have_text("awaiting_approval")
        expect(page.locator("#diagram svg g.node.sw-current")).to_contain_text("awaiting_approval")
        expect(page.locator("#no-decision-rights")).to_be_visible()
        expect(page.locator("#history tr.history-row")).to_have_count(3)
        expect(page.locator("#decision")).to_have_count(0)
        expect(page.locator("#approve")).to_have_count(0)
        expect(page.locator("#deny")).to_have_count(0)
    # Not only hidden: the API refuses the agent's approval too, and nothing changed.
    refused = api.post(
        "/v1/approvals",
        json={"workflow_id": REFUND, "decision": "approve"},
        headers=AGENT.headers,
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert _workflow(api, REFUND)["state"] == "awaiting_approval"


def _approver_decides(
    profile: BrowserContext, server: Server, api: httpx.Client, tmp_path: Path
) -> None:
    with dashboard(profile, server, APPROVER) as w:
        page = w.page
        expect(page.locator("#whoami")).to_contain_text("may approve")

        # The overview: counts per type and state, the stuck ticket highlighted.
        expect(page.locator("#stat-stuck .stat-value")).to_have_text("1")
        expect(page.locator("#stat-waiting .stat-value")).to_have_text("1")
        refund_chip = page.locator(
            '.type-card[data-type="refund_approval"] .chip[data-state="awaiting_approval"]'
        )
        expect(refund_chip.locator(".chip-count")).to_have_text("1")
        ticket_chip = page.locator(
            '.type-card[data-type="support_ticket"] .chip[data-state="open"]'
        )
        expect(ticket_chip).to_have_class(re.compile(r"\bstuck\b"))
        ticket_row = page.locator(f'tr.wf-row[data-id="{TICKET}"]')
        expect(ticket_row).to_have_class(re.compile(r"\bstuck\b"))
        expect(ticket_row.locator(".badge-stuck")).to_be_visible()
        expect(ticket_row.locator(".badge-parked")).to_have_text("parked: fatal_error")
        refund_row = page.locator(f'tr.wf-row[data-id="{REFUND}"]')
        expect(refund_row).to_have_class(re.compile(r"\bpaused\b"))
        expect(refund_row).not_to_have_class(re.compile(r"\bstuck\b"))
        expect(refund_row.locator(".badge-paused")).to_have_text("awaiting your decision")
        # The stuck ticket's context is shown as text, never as HTML.
        ticket_row.locator("a.wf-link").click()
        expect(page.locator("#wf-stuck")).to_be_visible()
        expect(page.locator("#wf-parked")).to_have_text("parked: fatal_error")
        expect(page.locator('#summary-table tr[data-key="title"] td')).to_have_text(HOSTILE)
        assert page.locator("#summary img").count() == 0
        assert page.evaluate("() => window.__xss") is None
        page.go_back()

        # The refund's page: diagram with the current state marked, summary, history.
        page.locator(f'tr.wf-row[data-id="{REFUND}"] a.wf-link').click()
        expect(page).to_have_url(re.compile(rf"#/workflows/{REFUND}$"))
        expect(page.locator("#wf-state")).to_have_text("awaiting_approval")
        current = page.locator("#diagram svg g.node.sw-current")
        expect(current).to_have_count(1)
        expect(current).to_contain_text("awaiting_approval")
        fill = current.locator("rect").first.evaluate("el => getComputedStyle(el).fill")
        assert fill == CURRENT_FILL, "the current state is not filled with the highlight"
        others = page.locator("#diagram svg g.node:not(.sw-current) rect")
        assert CURRENT_FILL not in others.evaluate_all(
            "els => els.map(el => getComputedStyle(el).fill)"
        )
        expect(page.locator('#summary-table tr[data-key="order_id"] td')).to_have_text(
            "order-9001"
        )
        expect(page.locator('#summary-table tr[data-key="amount_cents"] td')).to_have_text("25000")
        events = page.locator("#history tr.history-row").evaluate_all(
            "rows => rows.map(r => r.dataset.event)"
        )
        assert events == ["$start", "validated", "policy_checked"]

        # Approve, with a comment.
        page.fill("#decision-comment", "damaged in transit")
        page.click("#approve")
        expect(page.locator("#banner")).to_contain_text("Approved")
        expect(page.locator("#wf-state")).to_have_text(
            re.compile(r"^(paying_out|notifying|done)$")
        )
        granted = history_row(page, "approval_granted", "maria")
        expect(granted.locator(".approver")).to_have_text("approver: maria")
        expect(granted).to_contain_text("damaged in transit")
        expect(granted).to_contain_text("awaiting_approval → paying_out")
        expect(page.locator("#approve")).to_have_count(0)

        # The page follows the workflow to its end (stream or polling) without a reload.
        expect(page.locator("#wf-state")).to_have_text("done")
        expect(page.locator("#diagram svg g.node.sw-current")).to_contain_text("done")
        expect(
            page.locator('#history tr.history-row[data-event="customer_notified"]')
        ).to_have_count(1)
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        shutil.copyfile(tmp_path / "dashboard.png", SCREENSHOT)


def test_open_mode_needs_no_token_and_denies(open_server: Server, profile: BrowserContext) -> None:
    """Without tokens the local caller is an admin and approver: no token to enter, and the
    decision buttons are there; denying rejects the refund under the local actor."""
    with httpx.Client(base_url=open_server.url, timeout=10.0) as api:
        refund = {"order_id": "order-9002", "amount_cents": 45_000, "customer": "bob@example.com"}
        _start(api, "refund-open-1", "refund_approval", refund, who=None)
        _until(
            "the worker paused the refund",
            lambda: _workflow(api, "refund-open-1", None)["state"] == "awaiting_approval",
        )
        with dashboard(profile, open_server, None) as w:
            page = w.page
            expect(page.locator("#whoami")).to_contain_text("open mode")
            row = page.locator('tr.wf-row[data-id="refund-open-1"]')
            expect(row).to_have_class(re.compile(r"\bpaused\b"))
            row.locator("a.wf-link").click()
            page.fill("#decision-comment", "outside the return window")
            page.click("#deny")
            expect(page.locator("#wf-state")).to_have_text("rejected")
            denied = page.locator('#history tr.history-row[data-event="approval_denied"]')
            expect(denied.locator(".actor")).to_have_text("local")
            expect(denied).to_contain_text("outside the return window")
            expect(page.locator("#decision")).to_have_count(0)
        assert _workflow(api, "refund-open-1", None)["state"] == "rejected"


def test_a_long_history_shows_its_latest_transitions(
    open_server: Server, profile: BrowserContext
) -> None:
    """A workflow with 2,500 transitions: its page fetches the latest 1,000 in pages and says
    how many earlier ones it leaves out."""
    with httpx.Client(base_url=open_server.url, timeout=10.0) as api:
        _start(api, "long-1", "support_ticket", {}, who=None)
        db = sqlite3.connect(open_server.log.with_name("dashboard.db"))
        with db:
            at = time.time()
            db.executemany(
                "INSERT INTO transitions (workflow_id, version, from_state, to_state, event,"
                " payload, actor, at) VALUES ('long-1', ?, 'open', 'open', 'noted', '{}', ?, ?)",
                [(v, f"actor-{v}", at) for v in range(2, 2501)],
            )
            db.execute("UPDATE workflows SET version = 2500 WHERE id = 'long-1'")
        db.close()
        assert _workflow(api, "long-1", None)["version"] == 2500
        with dashboard(profile, open_server, None) as w:
            page = w.page
            page.locator('tr.wf-row[data-id="long-1"] a.wf-link').click()
            rows = page.locator("#history tr.history-row")
            expect(rows).to_have_count(1000)
            expect(rows.first).to_have_attribute("data-version", "1501")
            expect(rows.last).to_have_attribute("data-version", "2500")
            expect(page.locator("#history-note")).to_contain_text("1,500 earlier ones")
            pages = [u for u in w.urls if "/history?" in u]
            assert pages and all("limit=1000" in u for u in pages)

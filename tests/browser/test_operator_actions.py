"""Operator actions in the dashboard, in a real Chromium against a real ``statewright serve``.

A support ticket parked for an operator: the agent's token sees no operator panel (and the
API refuses its resume with 403); the operator re-runs its state and forks it from version 1
(the page follows to the fork); the admin moves the original to ``closed``. Every action is a
row of the history under the caller's name, with the reason.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import ADMIN, AGENT, APPROVER, BROWSER_GROUP, Server
from tests.browser.test_dashboard import _park, _start, _workflow, dashboard, history_row

pytestmark = BROWSER_GROUP

TICKET = "ticket-ops-1"


def _history(api: httpx.Client, wid: str) -> list[dict[str, Any]]:
    page = api.get(f"/v1/workflows/{wid}/history", headers=APPROVER.headers).json()
    items: list[dict[str, Any]] = page["items"]
    return items


def test_operator_resumes_forks_and_moves_in_the_dashboard(
    ops_server: Server, profile: BrowserContext
) -> None:
    server = ops_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        _start(api, TICKET, "support_ticket", {"title": "printer on fire"})
        _park(server, TICKET, "fatal_error")
        assert _workflow(api, TICKET)["parked"] == "fatal_error"
        assert _workflow(api, TICKET, AGENT)["operator_actions"] == []
        assert _workflow(api, TICKET)["operator_actions"] == ["resume", "fork"]
        assert _workflow(api, TICKET, ADMIN)["operator_actions"] == ["resume", "fork", "move"]

        with dashboard(profile, server, AGENT) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{TICKET}")
            expect(page.locator("#wf-state")).to_have_text("open")
            expect(page.locator("#operator-actions")).to_have_count(0)
        refused = api.post(
            f"/v1/workflows/{TICKET}/resume",
            json={"reason": "let me"},
            headers=AGENT.headers,
        )
        assert refused.status_code == 403, refused.text

        with dashboard(profile, server, APPROVER) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{TICKET}")
            expect(page.locator("#wf-parked")).to_have_text("parked: fatal_error")
            expect(page.locator("#operator-actions")).to_be_visible()
            expect(page.locator("#op-move")).to_have_count(0)  # admins only
            # No reason, no action.
            page.click("#op-resume")
            expect(page.locator("#op-status")).to_contain_text("Give a reason")
            assert _workflow(api, TICKET)["parked"] == "fatal_error"

            page.fill("#op-reason", "the printer is back")
            page.click("#op-resume")
            expect(page.locator("#banner")).to_contain_text("Resumed")
            resumed = history_row(page, "$resume", "maria")
            expect(resumed).to_contain_text("the printer is back")
            expect(page.locator("#wf-parked")).to_have_count(0)

            # A step done after version 1 would run again in a fork from it: refused,
            # naming the step, until the box says that is meant.
            _done_step(server, TICKET, "notify")
            page.fill("#op-reason", "try it again from the start")
            page.fill("#op-fork-version", "1")
            expect(page.locator("label[for=op-fork-rerun]")).to_contain_text("run again")
            page.click("#op-fork")
            expect(page.locator("#banner")).to_contain_text("steps_would_rerun")
            expect(page.locator("#banner")).to_contain_text("'notify'")
            # The refusal's 409 is logged by the browser: expected here, and only here.
            w.errors[:] = [e for e in w.errors if "status of 409" not in e]
            assert (
                api.get(f"/v1/workflows/{TICKET}.fork-1", headers=APPROVER.headers).status_code
                == 404
            )
            page.check("#op-fork-rerun")
            page.click("#op-fork")
            fork_id = f"{TICKET}.fork-1"
            expect(page).to_have_url(re.compile(rf"#/workflows/{re.escape(fork_id)}$"))
            expect(page.locator("#banner")).to_contain_text(f"into {fork_id}")
            expect(page.locator("#wf-id")).to_have_text(fork_id)
            history_row(page, "$fork", "maria")

        with dashboard(profile, server, ADMIN) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{TICKET}")
            expect(page.locator("#wf-state")).to_have_text("open")
            page.fill("#op-reason", "closed by hand: duplicate")
            page.select_option("#op-move-state", "closed")
            page.click("#op-move")
            expect(page.locator("#wf-state")).to_have_text("closed")
            history_row(page, "$move", "root")
            expect(page.locator("#op-resume")).to_have_count(0)  # finished: fork only
            expect(page.locator("#op-fork")).to_be_visible()

        events = [(t["event"], t["actor"]) for t in _history(api, TICKET)]
        assert ("$resume", "maria") in events
        assert ("$move", "root") in events
        fork = _workflow(api, f"{TICKET}.fork-1")
        assert fork["state"] == "open"
        first = _history(api, fork["id"])[0]
        assert first["event"] == "$fork" and first["payload"]["rerun_steps"] == ["notify"]


def _done_step(server: Server, wid: str, step: str) -> None:
    """A step the workflow did now, in the service's own database (as a worker records it;
    plain sqlite3: Playwright's sync API runs an event loop in this thread)."""
    now = time.time()
    with contextlib.closing(sqlite3.connect(server.log.with_name("dashboard.db"))) as db:
        with db:
            db.execute(
                "INSERT INTO steps (key, workflow_id, step, status, result, attempts,"
                " started_at, finished_at) VALUES (?, ?, ?, 'done', '{}', 1, ?, ?)",
                (f"{wid}:{step}", wid, step, now, now),
            )

"""A workflow parked because a step's outcome is unknown, in a real Chromium against a real
``statewright serve`` (issue 22, item 11).

It is stuck from the moment it parks (the stuck tile counts it, its row is marked) although
its state's threshold is a day. Its page offers the operator the two answers for the step,
"the call happened (with its result)" and "it did not", instead of "Re-run state" (which
would only park it again, and which the API refuses); the agent's token sees neither and the
API refuses its answer (403). Each answer resolves the step and resumes the workflow, in the
history under the operator's name.
"""

from __future__ import annotations

import time

import httpx
from playwright.sync_api import BrowserContext, expect

from statewright import SQLiteStore
from statewright.types import DeferWrite, StepFinish
from tests.browser.conftest import AGENT, APPROVER, BROWSER_GROUP, Server
from tests.browser.test_dashboard import _start, _workflow, dashboard, history_row
from tests.conftest import run_async

pytestmark = BROWSER_GROUP

PAID = "pay-1"
NOT_PAID = "pay-2"


def _park_unknown(server: Server, wid: str, step: str = "charge") -> None:
    """What a worker leaves when a step's call timed out after it may have reached the other
    side: the step failed with an unknown outcome, the workflow parked (in a thread of its own:
    Playwright's sync API marks an event loop running in this one)."""

    async def go() -> None:
        store = SQLiteStore(server.log.with_name("dashboard.db"))
        await store.open()
        try:
            row = await store.get_workflow(wid)
            assert row is not None
            now, key = time.time(), f"{wid}:{step}"
            await store.step_begin(key, wid, step, now)
            await store.step_finish(
                StepFinish(key, 1, "failed", error="TimeoutError", outcome="unknown", at=now)
            )
            error = f"StepOutcomeUnknown: step {key!r} was interrupted while executing"
            await store.defer(
                DeferWrite(
                    wid, row.version, now, 1, last_error=error, parked="step_outcome_unknown"
                )
            )
        finally:
            await store.close()

    run_async(go)


def _step(api: httpx.Client, wid: str) -> dict[str, object]:
    page = api.get(f"/v1/workflows/{wid}/steps", headers=APPROVER.headers).json()
    [step] = page["items"]
    assert isinstance(step, dict)
    return step


def test_operator_answers_for_a_step_of_unknown_outcome_in_the_dashboard(
    ops_server: Server, profile: BrowserContext
) -> None:
    server = ops_server
    with httpx.Client(base_url=server.url, timeout=10.0) as api:
        for wid in (PAID, NOT_PAID):
            _start(api, wid, "payment", {"amount_cents": 4200})
            _park_unknown(server, wid)
        wf = _workflow(api, PAID)
        assert (wf["parked"], wf["stuck"], wf["unresolved_steps"]) == (
            "step_outcome_unknown",
            True,
            ["charge"],
        )
        assert wf["operator_actions"] == ["resolve_step", "fork"]

        with dashboard(profile, server, AGENT) as w:
            page = w.page
            page.goto(f"{server.url}/ui/#/workflows/{PAID}")
            expect(page.locator("#wf-parked")).to_have_text("parked: step_outcome_unknown")
            expect(page.locator("#operator-actions")).to_have_count(0)
            expect(page.locator("#resolve-step")).to_have_count(0)
        body = {"verdict": "applied", "result": {"charge_id": "x"}, "reason": "me"}
        url = f"/v1/workflows/{PAID}/steps/charge/resolve"
        refused = api.post(url, json=body, headers=AGENT.headers)
        assert refused.status_code == 403, refused.text

        with dashboard(profile, server, APPROVER) as w:
            page = w.page
            # The list: stuck at once (its state's threshold is a day), marked parked.
            expect(page.locator("#stat-stuck .stat-value")).to_have_text("2")
            row = page.locator(f'#workflows tr.wf-row[data-id="{PAID}"]')
            expect(row).to_have_class("wf-row stuck")
            expect(row.locator(".badge-parked")).to_have_text("parked: step_outcome_unknown")

            page.goto(f"{server.url}/ui/#/workflows/{PAID}")
            expect(page.locator("#wf-stuck")).to_be_visible()
            answer = page.locator("#resolve-step")
            expect(answer).to_be_visible()
            expect(answer).to_have_attribute("data-step", "charge")
            expect(answer).to_contain_text("the outcome of step charge is unknown")
            expect(page.locator("#op-resume")).to_have_count(0)  # it would park again
            expect(page.locator("#op-resolve-applied")).to_have_text(
                "The call happened (with its result)"
            )
            expect(page.locator("#op-resolve-not-applied")).to_have_text("It did not")

            # No reason, or a result that is not JSON: nothing is sent.
            page.click("#op-resolve-applied")
            expect(page.locator("#op-status")).to_contain_text("Give a reason")
            page.fill("#op-reason", "the charge is in the gateway's dashboard")
            page.fill("#op-resolve-result", "{charge_id: ch_1")
            page.click("#op-resolve-applied")
            expect(page.locator("#op-status")).to_contain_text("as JSON")
            assert _workflow(api, PAID)["parked"] == "step_outcome_unknown"
            assert _step(api, PAID)["status"] == "failed"

            page.fill("#op-resolve-result", '{"charge_id": "ch_1"}')
            page.click("#op-resolve-applied")
            expect(page.locator("#banner")).to_contain_text("resolved as applied")
            expect(page.locator("#wf-parked")).to_have_count(0)
            resumed = history_row(page, "$resume", "maria")
            expect(resumed).to_contain_text("step 'charge' resolved")
            expect(page.locator("#resolve-step")).to_have_count(0)
            expect(page.locator("#op-resume")).to_be_visible()  # no longer parked

            page.goto(f"{server.url}/ui/#/workflows/{NOT_PAID}")
            expect(page.locator("#resolve-step")).to_be_visible()
            page.fill("#op-reason", "no such charge at the gateway")
            page.click("#op-resolve-not-applied")
            expect(page.locator("#banner")).to_contain_text("resolved as not applied")
            expect(page.locator("#wf-parked")).to_have_count(0)

        paid = _step(api, PAID)
        assert (paid["status"], paid["result"]) == ("done", {"charge_id": "ch_1"})
        assert "maria" in str(paid["error"]) and "gateway's dashboard" in str(paid["error"])
        not_paid = _step(api, NOT_PAID)
        assert (not_paid["status"], not_paid["outcome"]) == ("failed", "not_applied")
        for wid in (PAID, NOT_PAID):
            assert _workflow(api, wid)["parked"] is None

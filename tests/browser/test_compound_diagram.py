"""The Mermaid text of machines with compound states renders in a real Chromium with the
vendored Mermaid the dashboard uses: composite states drawn as boxes around their children,
the current leaf marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext

from statewright.definition import Machine, from_xstate, to_mermaid
from tests.browser.conftest import BROWSER_GROUP
from tests.unit.test_compound import shop_machine
from tests.unit.test_xstate_nested import DOG_WALK, FETCH

pytestmark = BROWSER_GROUP

MERMAID = (
    Path(__file__).resolve().parents[2]
    / "statewright"
    / "http"
    / "static"
    / "vendor"
    / "mermaid"
    / "mermaid.min.js"
)

RENDER = """async (text) => {
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
  const { svg } = await mermaid.render("d", text);
  const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
  return {
    clusters: [...doc.querySelectorAll("g.cluster, g.statediagram-cluster")].map(
      (g) => g.textContent.trim()),
    current: [...doc.querySelectorAll("g.node.current")].map((g) => g.textContent.trim()),
    error: doc.querySelector(".error-text") ? doc.querySelector(".error-text").textContent : "",
  };
}"""


@pytest.mark.parametrize(
    ("machine", "current", "boxes", "leaf"),
    [
        (shop_machine(), "active.checkout.paying", ["active", "checkout"], "paying"),
        (from_xstate(FETCH), "failure.timeout", ["failure"], "timeout"),
        (from_xstate(DOG_WALK), "on a walk.running", ["on a walk"], "running"),
    ],
)
def test_composite_states_render_in_chromium(
    profile: BrowserContext, machine: Machine, current: str, boxes: list[str], leaf: str
) -> None:
    page = profile.new_page()
    try:
        page.add_script_tag(path=str(MERMAID))
        drawn: Any = page.evaluate(RENDER, to_mermaid(machine, current=current))
    finally:
        page.close()
    assert drawn["error"] == ""
    for box in boxes:
        assert any(text.startswith(box) for text in drawn["clusters"]), drawn["clusters"]
    assert drawn["current"] == [leaf]

"""The dashboard in a real browser (Chromium, driven by Playwright)."""

from __future__ import annotations

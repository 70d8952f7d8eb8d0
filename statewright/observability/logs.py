"""JSON logs: one JSON object per line with ``ts``, ``level``, ``logger``, ``message`` and the
structured ``extra`` fields of the record (``action``, ``workflow_id``, ...).

The engine logs an INFO line per transition, a WARNING per rejected transition and an ERROR
per persistence failure on ``statewright.transitions`` (see :mod:`statewright.engine.hooks`).
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}
"""Attributes every LogRecord has: anything else on a record came from ``extra``."""


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call passed in ``extra``."""
    return {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS}


class JsonFormatter(logging.Formatter):
    """One JSON object per record. Values JSON cannot hold are written as ``str(value)``;
    an ``extra`` field named like a base key (``ts``, ``level``...) gets an ``extra_`` prefix."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        data: dict[str, Any] = {
            "ts": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            data[f"extra_{key}" if key in data else key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(data, default=str, ensure_ascii=False, separators=(",", ":"))


__all__ = ["STANDARD_ATTRS", "JsonFormatter", "extra_fields"]

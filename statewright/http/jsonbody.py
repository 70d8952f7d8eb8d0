"""Responses that carry stored values: serialised by :func:`statewright.jsonvalue.dumps`.

A route that returns a workflow's context, a log entry's payload or a step's result must not
depend on a serialiser's depth limit (pydantic's stops at 255 levels): whatever the store
once accepted stays readable. Routes return :class:`JSONBody` with the view they built; their
``response_model`` still documents the shape in OpenAPI, and skipping pydantic's second pass
over a value already shaped by :mod:`statewright.views` also makes reads cheaper.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from statewright import jsonvalue


class JSONBody(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return jsonvalue.dumps(content, ensure_ascii=False).encode("utf-8")

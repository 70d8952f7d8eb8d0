"""Every store decodes a large multi-row read (the log, the steps, workflows) on the JSON
threads of :mod:`statewright.offload`, not on the event loop, and a small one in place (a trip
to a thread would cost more than it); either way the records are the same."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from statewright import offload
from statewright.store.protocol import FullStore as Store
from statewright.store.rows import Rows
from statewright.types import NewWorkflow, TransitionWrite, WorkflowFilter

BLOB = "x" * (offload.OFFLOAD_CHARS // 2)


def _write(row: Any, payload: dict[str, Any], at: float) -> TransitionWrite:
    return TransitionWrite(
        workflow_id=row.id,
        expected_version=row.version,
        from_state=row.state,
        to_state=row.state,
        event="poke",
        payload=payload,
        actor="test",
        at=at,
        context=row.context,
    )


async def test_large_reads_are_decoded_off_the_event_loop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    convert = Rows.transition  # both stores' row mapping (statewright.store.rows)
    threads: list[str] = []

    def recorded(rows: Rows, row: Any) -> Any:
        threads.append(threading.current_thread().name)
        return convert(rows, row)

    monkeypatch.setattr(Rows, "transition", recorded)
    row, _ = await store.create_workflow(
        NewWorkflow(
            id="w-1", type="t", machine_version=1, state="s", context={}, actor="a", at=1.0
        )
    )
    for i in range(4):
        row = await store.apply_transition(_write(row, {"blob": BLOB, "i": i}, 2.0 + i))

    small = await store.history("w-1", 0, 1)  # the start and a blob: under the threshold
    assert [t.version for t in small] == [1] and threads and "statewright-json" not in threads[0]
    threads.clear()
    large = await store.history("w-1")
    assert [t.version for t in large] == [1, 2, 3, 4, 5]
    assert [t.payload.get("i") for t in large[1:]] == [0, 1, 2, 3]
    assert large[1].payload["blob"] == BLOB
    assert threads and all(name.startswith("statewright-json") for name in threads), threads
    listed = await store.list_workflows(WorkflowFilter())
    assert [w.id for w in listed] == ["w-1"]

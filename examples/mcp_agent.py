"""An agent that drives an order only through MCP, is killed, and is replaced by one with no
memory that carries on from ``get_workflow_state`` alone.

The agent is scripted (no model): a fulfilment agent whose token has the ``system`` role, so
its tools are the warehouse's and carrier's events (``order_fulfilment__ship``,
``order_fulfilment__deliver``...) and never an approval. It talks to a ``statewright mcp``
subprocess over stdio (with a worker inside, which runs the automatic steps: reserve stock,
authorize, capture, hand over to the warehouse). Its policy is memoryless on purpose: every
decision is made from the state the server returns (what is allowed now, what it waits for),
never from what the agent remembers.

``main()`` runs agent #1 as a child process, SIGKILLs it (with its MCP server and worker)
right after it shipped the order, then starts agent #2, which knows only the order id.

Run it: ``python examples/mcp_agent.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from order_fulfilment import order_type

from statewright import Engine, SQLiteStore

HERE = Path(__file__).resolve().parent
TYPES = [order_type()]
"""What the MCP server serves (``--app examples/order_fulfilment.py``)."""

ORDER_ID = "order-7001"
ORDER = {"sku": "LAMP-3", "quantity": 1, "amount_cents": 8_900}
TOKEN = "fulfilment-agent-token"
GOAL = "delivered"
PREFERENCES = ("order_fulfilment__ship", "order_fulfilment__deliver")
"""The agent's whole policy: which of the allowed actions it takes, in this order."""
STALLED = "stalled"
TIMEOUT = 60.0


# -- the agent (a child process) ---------------------------------------------------------------


async def run_agent(db: str, tokens: str, order_id: str, stall_after: str | None) -> None:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "statewright.cli", "--db", db, "--app", str(HERE / "order_fulfilment.py")),
            *("mcp", "--worker", "--tokens", tokens),
        ],
        env={"STATEWRIGHT_TOKEN": TOKEN},
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = [t.name for t in (await mcp.list_tools()).tools]
        approvals = [t for t in tools if t.endswith(("approval_granted", "approval_denied"))]
        say(f"connected: {len(tools)} tools, approval tools: {approvals or 'none'}")

        async def call(tool: str, **args: Any) -> dict[str, Any]:
            result = await mcp.call_tool(tool, args, progress_callback=on_progress)
            body: dict[str, Any] = result.structured_content or {}
            if result.is_error:
                return {"error": body["error"]}
            return body

        state = await call("get_workflow_state", workflow_id=order_id)
        if state.get("error", {}).get("code") == "workflow_not_found":
            state = await call("start_workflow", type="order_fulfilment", input=ORDER, id=order_id)
            say(f"started {order_id}: {state['state']}")
        else:
            describe(state)
        while state["state"] != GOAL and not state["terminal"]:
            if state["automatic"]:
                say(f"{state['state']}: a worker runs this step; waiting")
                state = await call("wait_for_state", workflow_id=order_id, timeout=20)
                continue
            allowed = [a["tool"] for a in state["allowed_actions"]]
            choice = next((t for t in PREFERENCES if t in allowed), None)
            if choice is None:
                say(f"{state['state']}: nothing for me to do (allowed: {allowed}); stopping")
                return
            payload = {"tracking_number": f"TRK-{order_id.upper()}"} if "ship" in choice else {}
            # expected_version: if the order moved since it was read, refuse, don't act.
            result = await call(
                choice, workflow_id=order_id, payload=payload, expected_version=state["version"]
            )
            if "error" in result:
                say(f"refused: {result['error']['code']}: {result['error']['message']}")
                state = await call("get_workflow_state", workflow_id=order_id)
                continue
            say(f"called {choice}: {result['done']}")
            state = result
            if stall_after and choice.endswith(stall_after):
                say(STALLED)  # "thinking" about the next move; killed meanwhile
                await asyncio.sleep(TIMEOUT)
        say(f"done: {order_id} is {state['state']} (version {state['version']})")


async def on_progress(progress: float, total: float | None, message: str | None) -> None:
    say(f"  progress: {message}")


def describe(state: dict[str, Any]) -> None:
    """What a fresh context learns from one get_workflow_state."""
    say(f"get_workflow_state: {state['workflow_id']} is {state['state']} v{state['version']}")
    for step in state["completed_steps"]:
        say(f"  completed step {step['step']}: {json.dumps(step['result'])}")
    last = state["recent_transitions"][-1]
    say(f"  last transition: {last['event']} by {last['actor']}")
    say(f"  allowed actions: {[a['tool'] for a in state['allowed_actions']]}")


def say(text: str) -> None:
    print(text, flush=True)


# -- the harness (main) ------------------------------------------------------------------------


def _agent(base: Path, stall_after: str | None) -> subprocess.Popen[str]:
    args = [sys.executable, str(Path(__file__).resolve()), "agent"]
    args += ["--db", str(base / "shop.db"), "--tokens", str(base / "tokens.json")]
    if stall_after:
        args += ["--stall-after", stall_after]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    # Its own process group: the kill takes the agent, its MCP server and worker at once.
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def _relay(proc: subprocess.Popen[str], name: str, until: str | None = None) -> None:
    """Print the agent's lines until it ends (or prints ``until``)."""
    watchdog = threading.Timer(TIMEOUT, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"{name} | {line.rstrip()}")
            if until is not None and line.strip() == until:
                return
    finally:
        watchdog.cancel()


def main() -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="statewright-mcp-agent-") as tmp:
        base = Path(tmp)
        tokens = {"tokens": [{"token": TOKEN, "actor": "fulfilment-agent", "roles": ["system"]}]}
        (base / "tokens.json").write_text(json.dumps(tokens))

        with _agent(base, stall_after="ship") as first:
            _relay(first, "agent #1", until=STALLED)
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        print(f"SIGKILL agent #1 (pid {first.pid}) with its MCP server and worker")

        with _agent(base, stall_after=None) as second:
            _relay(second, "agent #2")
            second.wait(TIMEOUT)
        assert second.returncode == 0, f"agent #2 exited {second.returncode}"

        async def check() -> dict[str, str]:
            async with Engine(SQLiteStore(base / "shop.db"), TYPES) as engine:
                await engine.check(ORDER_ID)  # the log replays to the row
                trail = [(t.event, t.actor) for t in await engine.history(ORDER_ID)]
                print("log:", ", ".join(f"{e} by {a.split(':')[0]}" for e, a in trail))
                # Shipped once, by agent #1, delivered by agent #2: nothing skipped or repeated.
                assert [e for e, _ in trail].count("ship") == 1, trail
                return {ORDER_ID: (await engine.get(ORDER_ID)).state}

        return asyncio.run(check())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role")
    agent = sub.add_parser("agent", help="run one agent (what main() starts)")
    agent.add_argument("--db", required=True)
    agent.add_argument("--tokens", required=True)
    agent.add_argument("--order", default=ORDER_ID)
    agent.add_argument("--stall-after", default=None)
    options = parser.parse_args()
    if options.role == "agent":
        asyncio.run(run_agent(options.db, options.tokens, options.order, options.stall_after))
    else:
        main()

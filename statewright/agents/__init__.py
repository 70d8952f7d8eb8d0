"""Agents in a state: an LLM agent's loop run inside a state's handler.

:mod:`statewright.agents.core` holds the framework-neutral :class:`AgentSession` (durable model
and tool steps, the state's events offered as the agent's only way to move the workflow);
the adapters (:mod:`statewright.agents.pydantic_ai`) wrap one framework each. Nothing here is
imported by the engine or the store, and no framework is imported until an adapter is.
"""

from __future__ import annotations

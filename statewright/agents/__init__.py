"""Agents in a state: adapters that run an agent inside a state's handler."""

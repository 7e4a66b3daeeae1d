"""Durable runtime statuses as devhost reports them: the one set every part of the host uses."""

from __future__ import annotations

RUNNING_STATES = frozenset({"Running", "Pending", "ContinuedAsNew", "Suspended"})
TERMINAL_STATES = frozenset({"Completed", "Failed", "Terminated", "Canceled"})
ALL_STATUSES = RUNNING_STATES | TERMINAL_STATES

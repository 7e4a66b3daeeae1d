"""User-defined agents, workflows and teams: their models, validation on save and the versioned store.

A definition is data a later compiler turns into the job machinery (the same steps, policy, waits and
budgets); nothing here runs anything. Validation knows the app through ``catalog.app_catalog`` (the executor
registry's step kinds with their typed inputs and outputs, the configured tool families, the LLM provider)
and other definitions through a ``Resolver`` (the store).
"""

from shared.definitions.issues import DefinitionInvalid, DefinitionTooLarge, Issue
from shared.definitions.models import KINDS, MAX_DEFINITION_BYTES, Agent, Definition, Team, Workflow

__all__ = [
    "KINDS",
    "MAX_DEFINITION_BYTES",
    "Agent",
    "Definition",
    "DefinitionInvalid",
    "DefinitionTooLarge",
    "Issue",
    "Team",
    "Workflow",
]

"""Fixtures for the LLM provider tests: a running fake OpenAI server and settings builders."""

from __future__ import annotations

from tests.fakes.openai_server import fake_openai

__all__ = ["fake_openai"]

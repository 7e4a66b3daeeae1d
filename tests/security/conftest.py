"""Fixtures of the security tests."""

from __future__ import annotations

from tests.fakes.openai_server import fake_openai

__all__ = ["fake_openai"]

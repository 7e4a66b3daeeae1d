"""An honest stand-in for an azure-identity credential: it implements ``TokenCredential.get_token``."""

from __future__ import annotations

import time
from typing import Any

from azure.core.credentials import AccessToken


class StaticTokenCredential:
    """Hands out one fixed token (or raises ``error``) and records the scopes each call asked for."""

    def __init__(self, token: str = "entra-token-1", *, error: Exception | None = None) -> None:
        self.token = token
        self.error = error
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        """Return the token, valid for an hour."""
        self.scopes.append(scopes)
        if self.error is not None:
            raise self.error
        return AccessToken(self.token, int(time.time()) + 3600)

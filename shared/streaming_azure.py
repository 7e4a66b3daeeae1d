"""Partial output on Azure Blob Storage: placeholder until the append-blob store lands.

Raises CONFIG_ERROR so ``shared.streaming.get_store`` logs it once and the app runs without a live
preview (answers still arrive whole through the history).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    from shared.settings import Settings
    from shared.streaming import PartialOutputStore


def build_blob_store(settings: Settings, blob_service_uri: str | None) -> PartialOutputStore:
    """Not implemented yet: always raises ProviderError(CONFIG_ERROR) naming the working choices."""
    raise ProviderError(
        ErrorCode.CONFIG_ERROR,
        "PARTIAL_OUTPUT_STORE=azure_blob is not implemented in this build; "
        "use PARTIAL_OUTPUT_STORE=local (one instance) or off",
    )

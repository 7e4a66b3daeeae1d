"""Azure AI Search: azure-core and azure-identity faults mapped to the contract's ``ProviderError``."""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from shared.jobs.contracts import ErrorCode, ProviderError

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# --- error mapping -----------------------------------------------------------------------------


def _retry_after_ms(headers: Mapping[str, str] | None) -> int | None:
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        raw = lowered.get(name)
        if raw:
            try:
                return max(0, int(float(raw)))
            except ValueError:
                pass
    raw = lowered.get("retry-after")
    if not raw:
        return None
    try:
        return max(0, int(float(raw) * 1000))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(raw) if raw else None
        if parsed is None:
            return None
        return max(0, int((parsed.timestamp() - time.time()) * 1000))


def classify_search_error(exc: BaseException) -> ProviderError:
    """Map an azure-core / azure-identity exception to a contract ``ProviderError``."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(exc, ProviderError):
        return exc
    message = _short_message(exc)
    if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
        # Raised by the credential itself (no token could be obtained), before any request.
        return ProviderError(ErrorCode.AUTH_FAILED, f"Azure AI Search credential failed: {message}")
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        raw_headers = getattr(exc.response, "headers", None)
        headers = dict(raw_headers) if raw_headers is not None else None
        retry_after = _retry_after_ms(headers)
        if status == 429:
            return ProviderError(
                ErrorCode.RATE_LIMITED, f"Azure AI Search throttled the request: {message}", retry_after_ms=retry_after
            )
        if status == 503:
            return ProviderError(
                ErrorCode.TRANSIENT, f"Azure AI Search is unavailable: {message}", retry_after_ms=retry_after
            )
        if status in (408, 504):
            return ProviderError(ErrorCode.TRANSIENT, f"Azure AI Search timed out ({status}): {message}")
        if status in (401, 403):
            return ProviderError(ErrorCode.AUTH_FAILED, f"Azure AI Search refused the credential ({status}): {message}")
        if status == 404:
            return ProviderError(
                ErrorCode.CONFIG_ERROR,
                f"Azure AI Search index not found ({message}); create it with "
                "`python -m shared.ingest <folder> --target azure`",
            )
        if 500 <= status < 600:
            return ProviderError(ErrorCode.UPSTREAM_ERROR, f"Azure AI Search failed ({status}): {message}")
        return ProviderError(ErrorCode.SEARCH_ERROR, f"Azure AI Search rejected the request ({status}): {message}")
    if isinstance(exc, ServiceRequestError) and "CERTIFICATE_VERIFY_FAILED" in message:
        # A retry cannot fix an untrusted certificate.
        return ProviderError(ErrorCode.CONFIG_ERROR, f"Azure AI Search TLS certificate rejected: {message}")
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        # Connection refused/reset, DNS, TLS and read timeouts: nothing reached a verdict.
        return ProviderError(ErrorCode.TRANSIENT, f"Azure AI Search connection failed: {message}")
    return ProviderError(ErrorCode.UPSTREAM_ERROR, f"Azure AI Search call failed: {type(exc).__name__}: {message}")


def _short_message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    first = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    return first[:500]

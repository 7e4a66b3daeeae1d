"""The one client factory: builds each configured provider lazily, on first use, and keeps it.

Nothing connects at import or construction; tests inject their own ``Clients`` with ``set_clients``.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from shared.runtime.settings import Settings, get_settings

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

    from shared.jobs.contracts import JobOwnerRef
    from shared.providers.interfaces import LLMProvider, Retriever, SqlDatabase
    from shared.providers.sql.catalog import Catalog
    from shared.providers.sql.family import DatabaseMember
    from shared.providers.sql.paraphrase import Vocabulary
    from shared.providers.sql.verified import Match

T = TypeVar("T")


class Clients:
    """Providers for one process, chosen by settings."""

    def __init__(self, settings: Settings, **overrides: Any) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._built: dict[str, Any] = dict(overrides)

    def _get(self, name: str, build: Callable[[], T]) -> T:
        value = self._built.get(name)
        if value is None:
            with self._lock:
                value = self._built.get(name)
                if value is None:
                    value = build()
                    self._built[name] = value
        return value

    @property
    def catalog(self) -> Catalog:
        """The semantic catalog of the SQL database."""
        from shared.providers.sql.catalog import load_catalog

        return self._get("catalog", load_catalog)

    @property
    def retriever(self) -> Retriever:
        """The document index: local FTS5 or Azure AI Search."""
        return self._get("retriever", self._build_retriever)

    @property
    def database(self) -> SqlDatabase:
        """The SQL database: the database family's member that SQL_PROVIDER names (sqlite, azure_sql, postgresql)."""
        return self._get("database", self._build_database)

    def database_for(self, provider: str) -> SqlDatabase:
        """A member of the database family by its SQL_PROVIDER value (the configured one is ``database``)."""
        if provider == self.settings.sql_provider:
            return self.database
        from shared.providers.sql.family import open_database

        return self._get(f"database:{provider}", lambda: open_database(self.settings, provider))

    def database_member(self, provider: str) -> DatabaseMember:
        """What the database family says of a member: its description, dialect and aliases (choose_sql_tool)."""
        from shared.providers.sql.family import member

        return member(provider)

    def verified_match(self, question: str, owner: JobOwnerRef | None) -> Match | None:
        """The verified query the job's ``owner`` may reuse that matches a question, its slots filled (or None)."""
        from shared.providers.sql.verified import Reader, get_verified_store, match, visible

        reader = Reader(id=owner.id, roles=frozenset(owner.roles)) if owner is not None else None
        store = get_verified_store(self.settings)
        if store is None:
            return None
        mine = [q for q in store.list() if visible(q, reader, self.settings)]
        return match(question, mine, self._vocabulary())

    def _vocabulary(self) -> Vocabulary:
        """The paraphrase tables with the catalog's synonyms (the built-in ones alone when there is no catalog)."""
        from shared.providers.sql.paraphrase import Vocabulary, vocabulary

        def build() -> Vocabulary:
            try:
                catalog = self.catalog
            except Exception:  # no SQL catalog configured: the built-in tables still reword questions
                return Vocabulary()
            return vocabulary(catalog.synonyms, [m.name for m in catalog.metrics])

        return self._get("paraphrase_vocabulary", build)

    @property
    def llm(self) -> LLMProvider:
        """The LLM: offline by default, or an OpenAI-compatible endpoint."""
        return self._get("llm", self._build_llm)

    @property
    def sandbox_credential(self) -> TokenCredential:
        """The token credential of the Azure sessions sandbox: the app's managed identity, one per process."""
        return self._get("sandbox_credential", self._build_sandbox_credential)

    @property
    def sandbox_tls(self) -> bool | ssl.SSLContext:
        """How the session pool's certificate is checked: the default trust store (tests inject their CA)."""
        return self._get("sandbox_tls", lambda: True)

    def document_titles(self) -> list[str]:
        """Titles of the indexed documents, for the planner prompt (empty when unknown)."""
        titles = getattr(self.retriever, "document_titles", None)
        return list(titles()) if callable(titles) else []

    def _build_retriever(self) -> Retriever:
        if self.settings.search_provider == "azure":
            from shared.providers.search.azure import build_azure_retriever

            return build_azure_retriever(self.settings)
        from shared.providers.search.local import LocalIndex

        return LocalIndex.from_settings(self.settings)

    def _build_database(self) -> SqlDatabase:
        from shared.providers.sql.family import open_database

        return open_database(self.settings)

    def _build_llm(self) -> LLMProvider:
        if self.settings.llm_provider == "offline":
            from shared.providers.llm.offline.model import OfflineLLM

            return OfflineLLM(self)
        from shared.providers.llm.openai import build_llm_provider

        return build_llm_provider(self.settings)

    def _build_sandbox_credential(self) -> TokenCredential:
        # One credential for every run of the process: it caches its token instead of asking for one per run.
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential(managed_identity_client_id=self.settings.azure_client_id)


_clients: Clients | None = None
_clients_lock = threading.Lock()


def get_clients() -> Clients:
    """The process-wide clients, built from settings on first use."""
    global _clients
    if _clients is None:
        with _clients_lock:
            if _clients is None:
                _clients = Clients(get_settings())
    return _clients


def set_clients(clients: Clients | None) -> None:
    """Replace the process-wide clients (tests, or after a settings change)."""
    global _clients
    with _clients_lock:
        _clients = clients

"""The one settings object of the app, read from environment variables (app settings on Azure).

Nothing here connects or raises at import time: ``get_settings()`` builds the object on first use.
With no settings at all, every provider uses its embedded default (offline LLM, local document
index, SQLite sample database). Every environment variable the app reads is a field here; the
name of the variable is the field name in upper case.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"


class ModelPrice(BaseModel):
    """Price of one model in US dollars per million tokens."""

    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)


# Public list prices (USD per 1M tokens) used when MODEL_PRICES is not set; override per deployment.
DEFAULT_MODEL_PRICES: dict[str, ModelPrice] = {
    "gpt-4.1": ModelPrice(input_per_million=2.0, output_per_million=8.0),
    "gpt-4.1-mini": ModelPrice(input_per_million=0.4, output_per_million=1.6),
    "gpt-4.1-nano": ModelPrice(input_per_million=0.1, output_per_million=0.4),
    "gpt-4o": ModelPrice(input_per_million=2.5, output_per_million=10.0),
    "gpt-4o-mini": ModelPrice(input_per_million=0.15, output_per_million=0.6),
    "offline": ModelPrice(input_per_million=0.0, output_per_million=0.0),
}


class Settings(BaseSettings):
    """All app settings. Secrets are optional: managed identity is the default on Azure."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    # --- LLM -------------------------------------------------------------------------------
    llm_provider: Literal["offline", "azure_openai", "openai"] = "offline"
    azure_openai_endpoint: str | None = None
    azure_openai_api_key: SecretStr | None = None
    azure_openai_chat_deployment: str = "gpt-4.1-mini"
    azure_openai_embedding_deployment: str | None = None
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_model: str = "gpt-4.1-mini"
    # Which OpenAI API the real LLM provider calls: Chat Completions (default) or Responses.
    llm_api: Literal["chat", "responses"] = "chat"
    # How structured output is requested: "auto" = JSON schema, falling back to JSON mode when the
    # endpoint rejects json_schema; or force "json_schema", "json_mode" or "tool_call".
    llm_output_mode: Literal["auto", "json_schema", "json_mode", "tool_call"] = "auto"
    # Client id of the user-assigned managed identity on Azure (DefaultAzureCredential picks it up).
    azure_client_id: str | None = None
    # JSON object: {"<model>": {"input_per_million": 0.4, "output_per_million": 1.6}, ...}
    model_prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_MODEL_PRICES))

    # Fault injection for demos and tests of the retry policy: "task:CODE:count,...", e.g.
    # "write_answer:RATE_LIMITED:2" makes the first two answer calls fail as rate limited.
    offline_llm_faults: str = ""

    # --- Documents (RAG) -------------------------------------------------------------------
    search_provider: Literal["local", "azure"] = "local"
    local_index_path: Path = DATA_DIR / "index" / "docs.sqlite3"
    documents_dir: Path = DATA_DIR / "docs"
    azure_search_endpoint: str | None = None
    azure_search_index: str = "jobs-docs"
    azure_search_api_key: SecretStr | None = None
    azure_search_semantic_config: str | None = None
    # How the query vector is made: "client" = the embedding deployment, "integrated" = the index's
    # vectorizer, "off" = keyword only, "auto" = client when an embedding deployment is set, else off.
    azure_search_vector_mode: Literal["auto", "client", "integrated", "off"] = "auto"
    # Embedding model behind AZURE_OPENAI_EMBEDDING_DEPLOYMENT, written into the index's vectorizer.
    azure_search_vectorizer_model: str = "text-embedding-3-small"
    search_top_k: int = Field(default=5, ge=1, le=50)

    # --- SQL -------------------------------------------------------------------------------
    sql_provider: Literal["sqlite", "azure_sql"] = "sqlite"
    sqlite_database_path: Path = DATA_DIR / "sample.db"
    azure_sql_server: str | None = None
    azure_sql_database: str | None = None
    azure_sql_connection_string: SecretStr | None = None
    azure_sql_read_only_intent: bool = False
    azure_sql_odbc_driver: str = "ODBC Driver 18 for SQL Server"
    # Comma-separated allow-list; empty means "the tables in the semantic catalog".
    sql_allowed_tables: str = ""
    sql_max_rows: int = Field(default=50, ge=1, le=10_000)
    sql_timeout_seconds: int = Field(default=15, ge=1, le=600)

    # --- Jobs ------------------------------------------------------------------------------
    job_user_wait_timeout_seconds: int = Field(default=86_400, ge=1)
    job_max_step_attempts: int = Field(default=3, ge=1, le=10)
    job_retry_first_interval_ms: int = Field(default=1_000, ge=1)
    # Where a streamed answer waits for the view (shared/streaming.py): "auto" = Azure Blob when the
    # host storage's blob endpoint is set (on Azure), else the local SQLite file; "off" = no preview.
    partial_output_store: Literal["auto", "local", "azure_blob", "off"] = "auto"
    partial_output_path: Path = REPO_ROOT / ".devhost" / "partial_output.sqlite3"
    partial_output_container: str = Field(default="job-partial-output", pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
    partial_output_flush_ms: int = Field(default=250, ge=10, le=10_000)

    # --- Monitoring ------------------------------------------------------------------------
    applicationinsights_connection_string: SecretStr | None = None
    otel_exporter_otlp_endpoint: str | None = None
    # Standard OpenTelemetry sampler name; unset keeps every job trace (fixed 100 % sampling).
    otel_traces_sampler: str | None = None

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_prices(cls, value: object) -> object:
        # The environment's table (already JSON-decoded by pydantic-settings) adds to the defaults.
        parsed = json.loads(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            return parsed
        merged: dict[str, object] = {k: v.model_dump() for k, v in DEFAULT_MODEL_PRICES.items()}
        merged.update(parsed)
        return merged

    @property
    def allowed_tables(self) -> list[str]:
        """The SQL allow-list from settings (empty: use the catalog's tables)."""
        return [t.strip() for t in self.sql_allowed_tables.split(",") if t.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Build the settings on first use and keep them."""
    return Settings()


def reset_settings() -> None:
    """Forget the cached settings (tests, or after changing the environment)."""
    get_settings.cache_clear()

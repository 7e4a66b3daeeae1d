"""The one settings object of the app, read from environment variables (app settings on Azure).

Nothing here connects or raises at import time: ``get_settings()`` builds the object on first use.
With no settings at all, every provider uses its embedded default (offline LLM, local document
index, SQLite sample database). Every environment variable the app reads is a field here; the
name of the variable is the field name in upper case.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as _SourceError

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"


# Six NCRONTAB fields (seconds first), each digits, names, '*', ',', '-' or '/' (the host checks the rest).
NCRONTAB_PATTERN = r"^\s*[0-9A-Za-z*,/?-]+(\s+[0-9A-Za-z*,/?-]+){5}\s*$"


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


# Headers the HTTP tools set themselves (or that would change the request's framing): never from settings.
_HTTP_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "accept-encoding", "te", "upgrade"}
)
# Header names whose values are credentials: only ever by reference to an app setting, never written inline.
_HTTP_SECRET_HEADER = re.compile(r"authorization|cookie|key|token|secret|password|signature", re.IGNORECASE)


def _check_header_name(header: str, reserved: frozenset[str]) -> None:
    """A header a tool's configuration may set: a plain name, and none that the client sets itself."""
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", header) or header.lower() in reserved:
        raise ValueError(f"header {header!r} cannot be set by configuration")


def _check_identity(auth: str, scope: str | None, headers: Mapping[str, object]) -> None:
    """Managed identity needs a token scope, and it writes the Authorization header itself."""
    if auth == "managed_identity" and not scope:
        raise ValueError("auth managed_identity needs a scope")
    if auth == "managed_identity" and any(h.lower() == "authorization" for h in headers):
        raise ValueError("auth managed_identity sets the Authorization header itself")


class SettingRef(BaseModel):
    """A value held by another app setting (e.g. a Key Vault reference the platform resolves), named, not inlined."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    setting: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _origin_entry(entry: str) -> str:
    """An allowed_hosts origin, ``scheme://host[:port]``, as written (lower case); ValueError when it is not one."""
    parts = urlsplit(entry)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == -1
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(f"allowed_hosts entry {entry!r} must be a host name or an origin, scheme://host[:port]")
    return f"{parts.scheme}://{parts.netloc}"


class HttpToolSetting(BaseModel):
    """One HTTP API the Executor may call (an entry of TOOLS_HTTP); shared/tools/http.py builds the tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The tool is "http.<name>".
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    description: str = Field(min_length=1, max_length=1000)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    # e.g. https://api.example.com/v1/cities/{city}?days={days}: {param} only in the path and the query.
    url: str = Field(min_length=1, max_length=2000)
    # JSON Schema (an object) of the arguments; every {param} of the url is one of its properties.
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    # Further places a redirect may lead to (the url's own scheme, host and port are always allowed): a host
    # name allows that host on the standard ports (http 80, https 443); another port needs the origin,
    # "scheme://host:port". Every hop compares scheme, host and port.
    allowed_hosts: list[str] = Field(default_factory=list, max_length=20)
    # Hosts that may resolve to private, loopback or link-local addresses (an API in a VNet, a local test
    # server); every other host must resolve to public addresses only.
    private_hosts: list[str] = Field(default_factory=list, max_length=20)
    headers: dict[str, str | SettingRef] = Field(default_factory=dict, max_length=16)
    auth: Literal["none", "managed_identity"] = "none"
    # The token scope for auth=managed_identity, e.g. "api://<app id>/.default".
    scope: str | None = Field(default=None, min_length=1, max_length=500)
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    max_response_bytes: int = Field(default=1_000_000, ge=1024, le=20_000_000)
    # False for an API whose call must not be repeated by the retry policy (a 500 or a timeout is final).
    retryable: bool = True

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http(s) URL with a host")
        if "@" in parts.netloc or "{" in parts.netloc or "}" in parts.netloc:
            raise ValueError("url must name its host literally, without credentials or {placeholders}")
        if parts.fragment:
            raise ValueError("url must not have a #fragment")
        return value

    @field_validator("parameters")
    @classmethod
    def _check_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        props = value.get("properties", {})
        required = value.get("required", [])
        if value.get("type", "object") != "object" or not isinstance(props, dict):
            raise ValueError('parameters must be a JSON Schema object: {"type": "object", "properties": {...}}')
        if not all(isinstance(p, dict) for p in props.values()):
            raise ValueError("each of parameters.properties must be a JSON Schema object")
        if not isinstance(required, list) or not set(required) <= set(props):
            raise ValueError("parameters.required must list names of parameters.properties")
        # A schema is untrusted code even here: local $refs only, RE2 patterns, bounded size.
        from shared.runtime.schema_safety import schema_problems

        problems = schema_problems(value)
        if problems:
            raise ValueError(f"parameters cannot be used as a JSON Schema: {problems[0].at('parameters')}: "
                             f"{problems[0].message}")  # fmt: skip
        return value

    @field_validator("allowed_hosts", "private_hosts")
    @classmethod
    def _lower_hosts(cls, value: list[str], info: ValidationInfo) -> list[str]:
        checked: list[str] = []
        for given in value:
            entry = given.strip().lower()
            if "://" in entry and info.field_name == "allowed_hosts":
                checked.append(_origin_entry(entry))
                continue
            host = entry.strip("[]")
            if ":" in host and not _is_ip(host):
                origins = info.field_name == "allowed_hosts"
                hint = " (for a port, give the origin: scheme://host:port)" if origins else ""
                raise ValueError(f"{info.field_name} entry {given!r} must be a host name, without a port{hint}")
            checked.append(host)
        return checked

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str | SettingRef]) -> dict[str, str | SettingRef]:
        for header, given in value.items():
            _check_header_name(header, _HTTP_RESERVED_HEADERS)
            if isinstance(given, str) and _HTTP_SECRET_HEADER.search(header):
                raise ValueError(f'header {header!r} carries a credential: give it as {{"setting": "<APP_SETTING>"}}')
            if isinstance(given, str) and ("\r" in given or "\n" in given):
                raise ValueError(f"header {header!r} has a line break in its value")
        return value

    @model_validator(mode="after")
    def _check_credentials(self) -> HttpToolSetting:
        _check_identity(self.auth, self.scope, self.headers)
        parts = urlsplit(self.url)
        sends_secrets = self.auth != "none" or any(isinstance(v, SettingRef) for v in self.headers.values())
        if sends_secrets and parts.scheme == "http" and (parts.hostname or "") not in self.private_hosts:
            # Credentials in clear text only where they never leave a private network (or the machine).
            raise ValueError("credentials (auth or setting headers) need an https url, or a host in private_hosts")
        return self


# Headers the MCP transport sets itself, or that would change what the request is: never taken from settings.
_MCP_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "accept"}
    | {"mcp-session-id", "mcp-protocol-version", "last-event-id"}
)


class McpServer(BaseModel):
    """One MCP server whose tools the Executor may call (an entry of TOOLS_MCP_SERVERS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Part of every tool name ("mcp.<name>.<tool>"), so no dots and short.
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,24}$")
    # The streamable HTTP endpoint, e.g. https://tools.example.com/mcp.
    url: str = Field(max_length=2000)
    # The server's tools the Executor may see and call: a list, or "*" for every tool it lists (say so explicitly).
    allowed_tools: (
        Literal["*"] | Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(min_length=1)]
    )
    # Header name -> name of the app setting holding its value (secrets stay in app settings / Key Vault references).
    headers: dict[str, str] = Field(default_factory=dict, max_length=16)
    auth: Literal["none", "managed_identity"] = "none"
    # The token scope for auth=managed_identity, e.g. "api://<app id>/.default".
    scope: str | None = Field(default=None, min_length=1, max_length=500)
    timeout_s: float = Field(default=30.0, gt=0, le=300)
    # False for a server whose tool calls must not be repeated by the retry policy.
    retryable: bool = True

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise ValueError("url must not carry credentials; name them in headers")
        if parts.scheme == "http" and not _is_loopback(parts.hostname):
            # Headers and tokens travel with every call: plain HTTP only where nothing leaves the machine.
            raise ValueError("url must use https (http only for loopback)")
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for header, setting in value.items():
            _check_header_name(header, _MCP_RESERVED_HEADERS)
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", setting):
                raise ValueError(f"header {header!r} must name an app setting (letters, digits, underscores)")
        return value

    @model_validator(mode="after")
    def _check_auth(self) -> McpServer:
        _check_identity(self.auth, self.scope, self.headers)
        return self


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    # Test hook for crash tests: the feedback endpoint sleeps this long between claiming an answer and
    # delivering it, so a test can kill the host in that window. 0 (the default) in every real deployment.
    answer_claim_pause_s: float = Field(default=0.0, ge=0.0, le=120.0)

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
    # Which member of the database family (shared/providers/sql/family.py) answers SQL steps.
    sql_provider: Literal["sqlite", "azure_sql", "postgresql"] = "sqlite"
    # Further members a SQL step may choose among, per question (comma-separated; the choose_sql_tool decision).
    sql_provider_choices: str = Field(default="", pattern=r"^[a-z_]*(,\s*[a-z_]+)*$")
    # Who makes the small decisions inside steps (choose_sql_tool): "model" (the configured LLM, with the rules
    # as the fallback), "rules" (deterministic), or "auto" (the model when one is configured, else the rules).
    decisions: Literal["auto", "model", "rules"] = "auto"
    sqlite_database_path: Path = DATA_DIR / "sample.db"
    azure_sql_server: str | None = None
    azure_sql_database: str | None = None
    azure_sql_connection_string: SecretStr | None = None
    azure_sql_read_only_intent: bool = False
    azure_sql_odbc_driver: str = "ODBC Driver 18 for SQL Server"
    # PostgreSQL (local or Azure Database for PostgreSQL). Without a password, an Entra ID token is the password.
    postgres_host: str | None = None
    postgres_port: int = Field(default=5432, ge=1, le=65_535)
    postgres_database: str | None = None
    postgres_user: str | None = None
    postgres_password: SecretStr | None = None
    postgres_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "require"
    # A second login role that may read the catalog's sensitive tables, used only for approved statements.
    postgres_sensitive_user: str | None = None
    postgres_sensitive_password: SecretStr | None = None
    # Comma-separated allow-list; empty means "the tables in the semantic catalog".
    sql_allowed_tables: str = ""
    sql_max_rows: int = Field(default=50, ge=1, le=10_000)
    sql_timeout_seconds: int = Field(default=15, ge=1, le=600)

    # --- Jobs ------------------------------------------------------------------------------
    # How long a job waits for a person (an approval or a question) unless its request or node says otherwise:
    # 3 days, so a question asked on a Friday afternoon is still open on Monday morning.
    job_user_wait_timeout_seconds: int = Field(default=259_200, ge=1, le=7 * 86_400)
    job_max_step_attempts: int = Field(default=3, ge=1, le=10)
    job_retry_first_interval_ms: int = Field(default=1_000, ge=1)
    # Where a streamed answer waits for the view (shared/runtime/streaming/local.py): "auto" = Azure Blob when the
    # host storage's blob endpoint is set (on Azure), else the local SQLite file; "off" = no preview.
    partial_output_store: Literal["auto", "local", "azure_blob", "off"] = "auto"
    partial_output_path: Path = REPO_ROOT / ".devhost" / "partial_output.sqlite3"
    partial_output_container: str = Field(default="job-partial-output", pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
    partial_output_flush_ms: int = Field(default=250, ge=10, le=10_000)
    # The job event stream (api/events.py, docs/events.md): how often one process reads a watched job, the
    # keep-alive interval, how long one stream lasts before "reconnect", and how many streams one process serves.
    events_poll_ms: int = Field(default=50, ge=10, le=10_000)
    # A job that is not changing is read less and less often, down to once per this (a change, or a new
    # subscriber, brings it back to EVENTS_POLL_MS).
    events_idle_poll_ms: int = Field(default=1000, ge=10, le=60_000)
    events_keepalive_s: float = Field(default=15.0, gt=0, le=300)
    events_max_stream_s: float = Field(default=220.0, gt=0, le=3600)
    events_max_subscribers: int = Field(default=1000, ge=1, le=100_000)
    # Per signed-in user (Easy Auth), on one process: one user's tabs cannot take every stream.
    events_max_streams_per_user: int = Field(default=20, ge=1, le=100_000)
    # Finished jobs (completed, failed, cancelled) are purged from the Durable store this many days
    # after they were created (fractions allowed, e.g. for tests); api/maintenance.py runs the purge.
    job_history_retention_days: float = Field(default=30.0, gt=0, le=36_500)
    # When the purge runs: an NCRONTAB expression with seconds ("sec min hour day month day-of-week", UTC).
    job_history_purge_schedule: str = Field(default="0 30 3 * * *", pattern=NCRONTAB_PATTERN)
    # A workflow or team run's total-work budget (shared/jobs/runs.py RunLimits, docs/definitions.md "Run
    # limits"): each is the default of a run and the most a run's ``limits`` may ask for; a design whose static
    # worst case exceeds one is refused when saved.
    run_max_node_runs: int = Field(default=1000, ge=1, le=100_000)
    run_max_parts_alive: int = Field(default=64, ge=0, le=10_000)
    run_max_parallel_width: int = Field(default=16, ge=1, le=16)
    run_max_depth: int = Field(default=8, ge=0, le=32)
    run_max_tool_calls: int = Field(default=500, ge=0, le=100_000)

    # --- Who sees which job (api/auth.py) -----------------------------------------------------
    # Set by App Service itself when App Service Authentication (Easy Auth) is on: only then are the
    # X-MS-CLIENT-PRINCIPAL* headers trusted (the platform strips client-sent ones). Never set it by hand.
    website_auth_enabled: bool = False
    # App role whose members see, answer and cancel every job (with Easy Auth on).
    jobs_admin_role: str = Field(default="Jobs.Admin", min_length=1, max_length=200)
    # App roles (comma-separated) whose verified queries everyone sees and reuses (with Easy Auth on); anyone
    # else's are private to their owner, and JOBS_ADMIN_ROLE sees all (shared/providers/sql/verified.py).
    verified_queries_shared_roles: str = Field(
        default="VerifiedQueries.Curator", max_length=1000, pattern=r"^[^,\s]+(\s*,\s*[^,\s]+)*$|^$"
    )

    # --- Definitions (agents, workflows, teams: shared/definitions/store.py) ----------------
    # The Table service URL used with the managed identity; unset: the host storage's table endpoint
    # (AzureWebJobsStorage__tableServiceUri), else the AzureWebJobsStorage connection string (Azurite).
    definitions_table_endpoint: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    definitions_table: str = Field(default="definitions", pattern=r"^[A-Za-z][A-Za-z0-9]{2,62}$")
    # The Functions host's storage connection string (env AzureWebJobsStorage); locally
    # UseDevelopmentStorage=true, which devhost replaces with its Azurite's. Unset on Azure (identity-based).
    azurewebjobsstorage: SecretStr | None = None

    # --- Local runs ------------------------------------------------------------------------
    # Set to true by Core Tools (`func start`) and devhost, never on Azure: bad settings then fail the
    # app's start (check_settings_at_startup) instead of answering 503 CONFIG_ERROR on every request.
    functions_coretools_environment: bool = False

    # --- Executor tools: HTTP APIs (shared/tools/http.py) -----------------------------------
    # JSON list of HttpToolSetting objects; see docs/settings.md.
    tools_http: list[HttpToolSetting] = Field(default_factory=list, max_length=50)

    # --- Executor tools: MCP (shared/tools/mcp.py) --------------------------------------------
    # JSON list of MCP servers: [{"name", "url", "allowed_tools", "headers", "auth", "scope", "timeout_s"}, ...].
    tools_mcp_servers: list[McpServer] = Field(default_factory=list, max_length=20)
    # How long one process keeps a server's tool list before listing again (0: list on every load).
    tools_mcp_list_ttl_seconds: float = Field(default=300.0, ge=0, le=86_400)
    # JSON object: USD per call of a family tool, by tool name ("http.weather") or by prefix ("http", "mcp.docs"),
    # counted into a run's estimated cost (budget.max_estimated_cost); every call counts against
    # RUN_MAX_TOOL_CALLS, priced or not.
    tool_prices: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict, max_length=200)

    # --- Code sandbox (shared/sandbox, the run_python step and the python.run tool) ----------------
    # Where model-written Python runs: "local" (bubblewrap on this machine), "azure_sessions" (Azure Container
    # Apps dynamic sessions, SANDBOX_SESSIONS_ENDPOINT), or "off" (python.run is not offered).
    sandbox_provider: Literal["local", "azure_sessions", "off"] = "local"
    # The session pool's management endpoint (https://<region>.dynamicsessions.io/subscriptions/.../sessionPools/<name>).
    sandbox_sessions_endpoint: str | None = None
    # Wall-clock seconds one run may take (the job's sandbox budget may cut it shorter).
    sandbox_wall_seconds: float = Field(default=30.0, gt=0, le=220)
    # USD per sandbox hour, counted into a step's estimated cost (Azure bills dynamic sessions per session-hour).
    sandbox_price_per_hour: float = Field(default=0.0, ge=0)
    # Where files written by code (charts, CSV) are kept for the job view: as PARTIAL_OUTPUT_STORE.
    artifact_store: Literal["auto", "local", "azure_blob"] = "auto"
    artifact_path: Path = REPO_ROOT / ".devhost" / "artifacts.sqlite3"
    artifact_container: str = Field(default="job-artifacts", pattern=r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")

    # --- Cost ledger (shared/runtime/ledger.py, docs/costs.md) ------------------------------------
    # The Durable backend and the hosting plan a job is priced for (default: what infra/ deploys: the Azure
    # Storage provider on Flex Consumption with always-ready instances for the durable group).
    cost_durable_backend: Literal["azure_storage", "dts_consumption", "dts_dedicated"] = "azure_storage"
    cost_hosting: Literal["flex_on_demand", "flex_always_ready"] = "flex_always_ready"
    # Flex Consumption instance memory (infra: instanceMemoryMB): activity seconds × this = GB-seconds.
    cost_instance_memory_mb: int = Field(default=2048, ge=128, le=16_384)
    # Another price table file (the shape of shared/runtime/prices/*.json); unset: the table in force when the
    # job started, from shared/runtime/prices/.
    cost_price_table: Path | None = None
    # The folder of versioned price tables (<version>.json); unset: shared/runtime/prices/. A job keeps the
    # version it was quoted with (its input names it), even when a newer table is added here.
    cost_prices_dir: Path | None = None
    # JSON object: a price per unit by price key ("storage.transactions": 0.0000004), over the table.
    cost_price_overrides: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict, max_length=100)

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

    @field_validator("tools_http")
    @classmethod
    def _unique_http_names(cls, value: list[HttpToolSetting]) -> list[HttpToolSetting]:
        names = [tool.name for tool in value]
        if len(names) != len(set(names)):
            raise ValueError("each HTTP tool needs its own name")
        return value

    @field_validator("tools_mcp_servers")
    @classmethod
    def _unique_mcp_names(cls, value: list[McpServer]) -> list[McpServer]:
        names = [server.name for server in value]
        if len(names) != len(set(names)):
            raise ValueError("each MCP server needs its own name")
        return value

    @property
    def sql_providers(self) -> list[str]:
        """The databases a SQL step may use: SQL_PROVIDER first, then SQL_PROVIDER_CHOICES (no repeats)."""
        extra = [p.strip() for p in self.sql_provider_choices.split(",") if p.strip()]
        return list(dict.fromkeys([self.sql_provider, *extra]))

    @property
    def shared_roles(self) -> frozenset[str]:
        """The app roles whose verified queries are shared with everyone (VERIFIED_QUERIES_SHARED_ROLES)."""
        return frozenset(r.strip() for r in self.verified_queries_shared_roles.split(",") if r.strip())

    @property
    def allowed_tables(self) -> list[str]:
        """The SQL allow-list from settings (empty: use the catalog's tables)."""
        return [t.strip() for t in self.sql_allowed_tables.split(",") if t.strip()]


PRICES_SHAPE = '{"<model>": {"input_per_million": <number >= 0>, "output_per_million": <number >= 0>}}'
# Set by Core Tools (`func start`) and by devhost for the worker: the app runs on a developer's machine.
LOCAL_HOST_FLAG = "FUNCTIONS_CORETOOLS_ENVIRONMENT"


class ConfigError(ValueError):
    """App settings the app cannot run with; names each offending environment variable."""

    def __init__(self, problems: list[tuple[str, str]], shown: dict[str, str] | None = None) -> None:
        self.problems = problems
        self.setting = problems[0][0]
        shown = shown or {}
        # str() (logs, start-up error) shows the offending value; public_message (HTTP) never does.
        super().__init__("; ".join(f"invalid setting {name}: {why}{shown.get(name, '')}" for name, why in problems))

    @property
    def public_message(self) -> str:
        """The problems without the values (they may be endpoints or other deployment details)."""
        return "; ".join(f"invalid setting {name}: {why}" for name, why in self.problems)


def _problem(error: ErrorDetails) -> tuple[str, str, str]:
    """(VARIABLE, what is wrong, " (got ...)") for one pydantic error about a settings field."""
    loc = [str(p) for p in error["loc"]]
    name = loc[0].upper() if loc else "?"
    got = error.get("input")
    if loc and loc[0] == "model_prices":
        where = f" (at {'.'.join(loc[1:])})" if len(loc) > 1 else ""
        return name, f"must be a JSON object {PRICES_SHAPE}{where}", ""
    # pydantic's wording, minus internal class names ("... or instance of ModelPrice").
    msg = re.sub(r" or instance of \w+", "", error["msg"])
    if len(loc) > 1:
        # Inside a JSON-valued setting: say where, and keep the value out (it may be any part of the structure).
        return name, f"{msg} (at {'.'.join(loc[1:])})", ""
    secret = any(word in name for word in ("KEY", "SECRET", "CONNECTION_STRING", "PASSWORD"))
    shown = f" (got {got!r})" if isinstance(got, str | int | float) and len(repr(got)) <= 80 and not secret else ""
    return name, msg, shown


def load_settings() -> Settings:
    """Build the settings from the environment; ConfigError (naming the variables) when a value is unusable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems: dict[str, str] = {}
        shown: dict[str, str] = {}
        for error in exc.errors(include_url=False):
            name, why, got = _problem(error)
            if name not in problems:  # one entry per variable: its first problem
                problems[name], shown[name] = why, got
        raise ConfigError(list(problems.items()), shown) from None
    except _SourceError as exc:
        # pydantic-settings could not decode a JSON-valued variable before validation.
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1).upper() if match else "?"
        why = f"must be a JSON object {PRICES_SHAPE}" if name == "MODEL_PRICES" else "is not valid JSON"
        raise ConfigError([(name, why)]) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Build the settings on first use and keep them (ConfigError, not cached, while they are invalid)."""
    return load_settings()


def check_settings_at_startup() -> None:
    """On a developer's machine (Core Tools or devhost), fail the app's start on bad settings.

    On Azure this does nothing: importing the app must never raise there (the host would index no
    functions); every request answers 503 CONFIG_ERROR instead.
    """
    if os.environ.get(LOCAL_HOST_FLAG, "").strip().lower() == "true":
        get_settings()


def reset_settings() -> None:
    """Forget the cached settings (tests, or after changing the environment)."""
    get_settings.cache_clear()

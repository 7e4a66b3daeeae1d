"""The definitions store against Azurite (the real Table service protocol, no fake): versions, archive, limits."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.data.tables import TableServiceClient
from pydantic import SecretStr

from devhost.storage.azurite import Azurite
from shared.definitions import store as store_module
from shared.definitions.models import Agent, Workflow
from shared.definitions.store import (
    CHUNK,
    Conflict,
    DefinitionStore,
    Exists,
    NotConfigured,
    NotFound,
    Owner,
    Unavailable,
    build_store,
)
from shared.definitions.validate import parse
from shared.runtime.settings import Settings

ALICE = Owner("oid-alice", "alice@contoso.com")


@pytest.fixture
def store(azurite: Azurite) -> Iterator[DefinitionStore]:
    """A store on a table of its own (tests share one Azurite)."""
    name = "defs" + uuid.uuid4().hex[:12]
    service = TableServiceClient.from_connection_string(azurite.connection_string)
    yield DefinitionStore(service.get_table_client(name))
    service.delete_table(name)


def agent(instructions: str = "Write a short report.", **extra: Any) -> Agent:
    data = {"id": "writer", "name": "Writer", "instructions": instructions, **extra}
    definition = parse("agent", data)
    assert isinstance(definition, Agent)
    return definition


def test_create_get_update_keeps_every_version(store: DefinitionStore) -> None:
    first = store.save(agent(), owner=ALICE, create=True)
    assert (first.created, first.head.latest, first.head.owner) == (True, 1, ALICE)
    second = store.save(agent("Write a long report."), owner=Owner("oid-bob"), create=False)
    assert second.head.latest == 2
    assert second.head.owner == ALICE  # the creator stays the owner
    head, latest = store.get("agent", "writer")
    assert head.latest == 2 and isinstance(latest, Agent) and latest.instructions == "Write a long report."
    # Versions are immutable: version 1 reads back as it was saved.
    old = store.get_version("agent", "writer", 1)
    assert isinstance(old, Agent) and old.instructions == "Write a short report."
    versions = store.versions("agent", "writer")
    assert [v.version for v in versions] == [1, 2]
    assert [v.created_by for v in versions] == ["oid-alice", "oid-bob"]


def test_the_same_content_writes_no_new_version(store: DefinitionStore) -> None:
    store.save(agent(), owner=None, create=True)
    again = store.save(agent(), owner=None, create=False)
    assert (again.created, again.head.latest) == (False, 1)


def test_create_and_update_refuse_the_wrong_state(store: DefinitionStore) -> None:
    with pytest.raises(NotFound):
        store.save(agent(), owner=None, create=False)
    store.save(agent(), owner=None, create=True)
    with pytest.raises(Exists):
        store.save(agent("other"), owner=None, create=True)
    with pytest.raises(Conflict):
        store.save(agent("other"), owner=None, create=False, expected_version=7)
    with pytest.raises(NotFound):
        store.get_version("agent", "writer", 2)


def test_archive_hides_the_definition_but_keeps_its_versions(store: DefinitionStore) -> None:
    store.save(agent(), owner=ALICE, create=True)
    store.archive("agent", "writer")
    assert store.heads("agent") == []
    with pytest.raises(NotFound):
        store.get("agent", "writer")
    assert store.find("agent", "writer", None) is None
    assert isinstance(store.find("agent", "writer", 1), Agent)  # a pinned run still resolves it
    with pytest.raises(NotFound):
        store.archive("agent", "writer")
    # Saving the id again continues its version numbers, with a new owner.
    revived = store.save(agent("again"), owner=Owner("oid-bob"), create=True)
    assert revived.head.latest == 2 and revived.head.owner == Owner("oid-bob")


def test_list_is_by_kind_and_id(store: DefinitionStore) -> None:
    for name in ("zeta", "alpha"):
        store.save(parse("agent", {"id": name, "name": name.title(), "instructions": "x"}), owner=None, create=True)
    flow = parse("workflow", {"id": "alpha", "name": "Flow", "nodes": [{"id": "a", "kind": "human",
                                                                       "question": {"value": "ok?"}}]})  # fmt: skip
    assert isinstance(flow, Workflow)
    store.save(flow, owner=None, create=True)
    assert [h.id for h in store.heads("agent")] == ["alpha", "zeta"]
    assert [h.summary()["name"] for h in store.heads("workflow")] == ["Flow"]
    assert store.heads("team") == []


def test_large_texts_are_cut_into_properties_within_the_entity_limits(store: DefinitionStore) -> None:
    # Non-ASCII text is stored as \\u escapes: every property stays within 64 KiB of UTF-16.
    text = ("Résumé des ventes — 売上 " * 1500)[:32_000]
    store.save(agent(text, output_schema={"type": "object", "description": "ü" * 20_000}), owner=None, create=True)
    entity = store.table.get_entity("agent~writer", "v000001")
    bodies = [key for key in entity if key.startswith("body_")]
    assert len(bodies) > 1 and all(len(entity[key]) <= CHUNK for key in bodies)
    back = store.get_version("agent", "writer", 1)
    assert isinstance(back, Agent) and back.instructions == text


def test_concurrent_updates_never_both_win(store: DefinitionStore) -> None:
    store.save(agent(), owner=None, create=True)
    results: list[str] = []
    barrier = threading.Barrier(4)

    def update(i: int) -> None:
        barrier.wait()
        try:
            store.save(agent(f"version from writer {i}"), owner=None, create=False)
            results.append("saved")
        except Conflict:
            results.append("conflict")

    threads = [threading.Thread(target=update, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    versions = store.versions("agent", "writer")
    # Every save that reported success has its own version; no version was written twice.
    assert len(versions) == 1 + results.count("saved")
    assert store.head("agent", "writer").latest == len(versions)  # type: ignore[union-attr]


def test_settings_choose_the_source(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AzureWebJobsStorage__tableServiceUri", raising=False)
    with pytest.raises(NotConfigured, match="not configured"):
        build_store(Settings(azurewebjobsstorage=None))
    built = build_store(
        Settings(azurewebjobsstorage=SecretStr(azurite.connection_string), definitions_table="defsettings")
    )
    built.save(agent(), owner=None, create=True)
    assert [h.id for h in built.heads("agent")] == ["writer"]
    built.table.delete_table()
    with pytest.raises(NotConfigured):
        build_store(Settings(azurewebjobsstorage=SecretStr("not a connection string")))
    # An endpoint with the managed identity wins over the connection string.
    assert store_module.table_source(
        Settings(definitions_table_endpoint="https://acct.table.core.windows.net", azurewebjobsstorage=SecretStr("x"))
    ) == ("endpoint", "https://acct.table.core.windows.net")


def test_a_store_that_does_not_answer_is_unavailable() -> None:
    dead = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:9/devstoreaccount1"
    store = build_store(Settings(azurewebjobsstorage=SecretStr(dead)))
    with pytest.raises(Unavailable, match="did not answer"):
        store.heads("agent")

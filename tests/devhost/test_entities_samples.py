"""Own versions of the public entity samples, end to end on a devhost process: a bank account whose
transfers race, and an agent session (a conversation history entity an orchestration appends to)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.conftest import HostFactory
from tests.devhost.hostproc import DevHostProcess


@pytest.fixture(scope="module")
def bank(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("entity_bank")


@pytest.fixture(scope="module")
def agent(devhost_factory: HostFactory) -> DevHostProcess:
    return devhost_factory("entity_agent_session")


def _started(resp: httpx.Response) -> str:
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def _balance(host: DevHostProcess, key: str) -> Any:
    resp = host.client.get(host.webhook(f"entities/account/{key}"), params=host.system_code)
    return resp.json() if resp.status_code == 200 else None


def test_racing_transfers_never_overdraw_and_conserve_money(bank: DevHostProcess) -> None:
    opened = _started(bank.client.post("/api/orchestrators/open_accounts", json={"alice": 100, "bob": 5}))
    assert bank.wait_status(opened)["output"] == [100, 5]
    transfers = [
        _started(bank.client.post("/api/orchestrators/transfer", json={"from": "alice", "to": "bob", "amount": 10}))
        for _ in range(14)
    ]
    outputs = [bank.wait_status(t)["output"] for t in transfers]
    done = [o for o in outputs if o["ok"]]
    refused = [o for o in outputs if not o["ok"]]
    assert len(done) == 10 and len(refused) == 4
    assert all(o["reason"].startswith("insufficient funds: balance 0") for o in refused)
    # Each withdrawal saw the balance the previous one left: 90, 80, ... 0, once each.
    assert sorted(o["source_balance"] for o in done) == list(range(0, 100, 10))
    assert sorted(o["target_balance"] for o in done) == list(range(15, 115, 10))
    assert (_balance(bank, "alice"), _balance(bank, "bob")) == (0, 105)


def test_an_invalid_amount_is_the_accounts_error_not_a_lost_deposit(bank: DevHostProcess) -> None:
    opened = _started(bank.client.post("/api/orchestrators/open_accounts", json={"carol": 20}))
    bank.wait_status(opened)
    bad = _started(bank.client.post("/api/orchestrators/transfer", json={"from": "carol", "to": "dan", "amount": -5}))
    assert bank.wait_status(bad)["output"] == {"ok": False, "reason": "amount must be a positive integer, got -5"}
    assert (_balance(bank, "carol"), _balance(bank, "dan")) == (20, None)


def test_the_session_entity_holds_the_conversation_the_orchestration_built(agent: DevHostProcess) -> None:
    first = _started(agent.client.post("/api/chat/s1", json={"messages": ["hello", "what's new?"]}))
    history = agent.wait_status(first)["output"]
    assert history == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "turn 1: you said 'hello'"},
        {"role": "user", "content": "what's new?"},
        {"role": "assistant", "content": "turn 2: you said 'what's new?'"},
    ]
    second = _started(agent.client.post("/api/chat/s1", json={"messages": ["bye"]}))
    assert agent.wait_status(second)["output"][-1] == {"role": "assistant", "content": "turn 3: you said 'bye'"}
    stored = agent.client.get("/api/sessions/s1")
    assert stored.status_code == 200 and len(stored.json()) == 6
    other = _started(agent.client.post("/api/chat/s2", json={"messages": ["separate"]}))
    assert len(agent.wait_status(other)["output"]) == 2  # one entity per session key


def test_clearing_a_session_deletes_the_entity(agent: DevHostProcess) -> None:
    run = _started(agent.client.post("/api/chat/gone", json={"messages": ["hi"]}))
    agent.wait_status(run)
    assert agent.client.get("/api/sessions/gone").status_code == 200
    assert agent.client.delete("/api/sessions/gone").status_code == 202
    deadline = time.monotonic() + 30
    while agent.client.get("/api/sessions/gone").status_code != 404:
        assert time.monotonic() < deadline, "the session was never cleared"
        time.sleep(0.02)

"""The storage listeners in process, on the session's Azurite: a stop lets a run in progress finish (its
message is deleted), and a run that outlasts the grace period is cancelled with its message kept for later."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.storage.queue import QueueClient, TextBase64EncodePolicy

from devhost.functions.invocation import InvocationContext
from devhost.functions.model import FunctionInfo, HostConfig, LoadedApp
from devhost.storage.azurite import Azurite
from devhost.storage.triggers import StorageTarget, StorageTriggers


def handle(msg: func.QueueMessage) -> None:
    """Stands for the app's function; the fake host below runs it."""


class SlowHost:
    """The part of DevHost the listeners use; each call waits until the test releases it."""

    def __init__(self, queue: str) -> None:
        fn = FunctionInfo(
            name="handle",
            kind="queue",
            trigger={"type": "queueTrigger", "name": "msg", "queueName": queue, "connection": "Storage"},
            bindings=[],
            user_function=handle,
        )
        raw = {"extensions": {"queues": {"maxPollingInterval": "00:00:01"}}}
        self.app = LoadedApp(root=Path("."), host=HostConfig(raw=raw), functions=[fn])
        self.public_origin = "http://127.0.0.1:1"
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.bodies: list[str] = []

    def build_kwargs(
        self, fn: FunctionInfo, trigger_value: Any, *, origin: str, context: InvocationContext
    ) -> dict[str, Any]:
        return {"msg": trigger_value}

    async def call_function(self, fn: FunctionInfo, kwargs: dict[str, Any]) -> Any:
        self.bodies.append(kwargs["msg"].get_body().decode())
        self.entered.set()
        await self.release.wait()


def _queue(azurite: Azurite) -> QueueClient:
    queue = QueueClient.from_connection_string(
        azurite.connection_string, f"slow-{uuid.uuid4().hex[:12]}", message_encode_policy=TextBase64EncodePolicy()
    )
    queue.create_queue()
    queue.send_message("work")
    return queue


async def _run(azurite: Azurite, queue: QueueClient, *, release_after_stop: bool, grace_s: float) -> SlowHost:
    host = SlowHost(queue.queue_name)
    triggers = StorageTriggers(host, {"Storage": azurite.connection_string}, "devhost-test")
    assert isinstance(triggers.plans["handle"], StorageTarget)
    triggers.start()
    await asyncio.wait_for(host.entered.wait(), 60)
    stopping = asyncio.create_task(triggers.stop(grace_s))
    await asyncio.sleep(0)  # stop() has begun: polling is over, the run is still going
    assert triggers.stopping.is_set() and not stopping.done()
    if release_after_stop:
        host.release.set()
    await stopping
    return host


def test_a_stop_lets_the_run_in_progress_finish(azurite: Azurite) -> None:
    queue = _queue(azurite)
    host = asyncio.run(_run(azurite, queue, release_after_stop=True, grace_s=30))
    assert host.bodies == ["work"]
    assert queue.get_queue_properties().approximate_message_count == 0  # finished, so deleted


def test_a_run_past_the_grace_period_is_cancelled_and_its_message_kept(azurite: Azurite) -> None:
    queue = _queue(azurite)
    host = asyncio.run(_run(azurite, queue, release_after_stop=False, grace_s=0.2))
    assert host.bodies == ["work"]
    # Still in the queue (invisible until its lease ends), to be delivered again: at least once.
    assert queue.get_queue_properties().approximate_message_count == 1

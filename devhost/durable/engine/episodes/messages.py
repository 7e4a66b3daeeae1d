"""An episode's messages: which ones one episode delivers, and consuming them once it commits.

Plain functions over an instance and the store, shared by local episodes (``Episodes``) and remote ones
(``RemoteEpisodes``).
"""

from __future__ import annotations

from typing import Any

from devhost.durable import history as h
from devhost.durable.engine.core import CUSTOM_STATUS_LIMIT_KB, MAX_BATCH, forget_message, seq_of
from devhost.durable.engine.state import Instance, Message
from devhost.durable.store import Store


def is_retry_relevant(inst: Instance, ev: dict[str, Any]) -> bool:
    """A failed with-retry attempt, or the firing of a retry timer: it gets an episode of its own."""
    et = ev.get("EventType")
    if et in (h.TASK_FAILED, h.SUB_ORCHESTRATION_FAILED):
        entry = inst.rmap.get(ev.get("TaskScheduledId", -1))
        return entry is not None and entry[1] == "attempt"
    if et == h.TIMER_FIRED:
        entry = inst.rmap.get(ev.get("TimerId", -1))
        return entry is not None and entry[1] == "timer"
    return False


def take_batch(store: Store, inst: Instance) -> tuple[list[Message], Message | None]:
    """The messages one episode delivers, and the retry-relevant one if that is what it delivers.

    Stale messages (another execution's, or completing a task no longer open) are dropped; a
    retry-relevant message always gets an episode of its own, so host and SDK number retries alike.
    """
    inbox = inst.inbox
    batch: list[Message] = []
    while inbox:
        m = inbox[0]
        seq = seq_of(m.event)
        stale = (m.execution_id is not None and m.execution_id != inst.execution_id) or (
            seq is not None and seq not in inst.open
        )
        if stale:
            inbox.popleft()
            forget_message(store, m)
            continue
        if is_retry_relevant(inst, m.event):
            if batch:
                break
            inbox.popleft()
            return [m], m
        inbox.popleft()
        batch.append(m)
        if len(batch) >= MAX_BATCH:
            break
    return batch, None


def consume(store: Store, batch: list[Message]) -> None:
    """Delete what persists the delivered messages (in the episode's transaction)."""
    inbox_ids = [m.inbox_id for m in batch if m.inbox_id is not None]
    work_ids = [m.work_id for m in batch if m.work_id is not None]
    timer_ids = [m.timer_id for m in batch if m.timer_id is not None]
    if inbox_ids:
        store.delete_inbox(inbox_ids)
    if work_ids:
        store.delete_activities(work_ids)
    if timer_ids:
        store.delete_timers(timer_ids)


def close_delivered(inst: Instance, batch: list[Message]) -> None:
    """The tasks this batch completes are no longer open; completed retry attempts leave the retry map."""
    for m in batch:
        seq = seq_of(m.event)
        if seq is None:
            continue
        inst.open.pop(seq, None)
        if m.event["EventType"] in (h.TASK_COMPLETED, h.SUB_ORCHESTRATION_COMPLETED):
            inst.rmap.pop(seq, None)


def set_custom_status(inst: Instance, text: str) -> str | None:
    """Take an episode's custom status (JSON text); why the episode fails when it is too large."""
    size_kb = len(text.encode("utf-16-le")) // 1024
    if size_kb > CUSTOM_STATUS_LIMIT_KB:
        return (
            "The UTF-16 size of the JSON-serialized payload must not exceed 16 KB. "
            f"The current payload size is {size_kb} KB."
        )
    inst.custom_status_text = text
    return None

"""Durable timers: armed on the loop when their creation commits, delivered as TimerFired messages."""

from __future__ import annotations

import time

from devhost.durable import history as h
from devhost.durable.engine.core import EngineCore
from devhost.durable.engine.state import Instance, Message
from devhost.durable.timeutil import (
    epoch_to_history,
)


class Timers(EngineCore):
    """Durable timers: armed on the loop when their creation commits, delivered as TimerFired messages."""

    def _arm_timer(
        self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str
    ) -> None:
        if (
            self._loop is None
            or self._instances.get(inst.id) is not inst
            or inst.execution_id != execution_id
            or inst.open.get(seq) != "t"
        ):
            return
        delay = max(0.0, fire_at - time.time())
        inst.timer_handles[seq] = self._loop.call_later(
            delay, self._fire_timer, inst, execution_id, seq, timer_id, fire_at, fire_text
        )

    def _fire_timer(
        self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str
    ) -> None:
        inst.timer_handles.pop(seq, None)
        if inst.execution_id != execution_id or inst.open.get(seq) != "t":
            return
        now = time.time()
        if now < fire_at:  # the monotonic clock ran ahead of the wall clock: re-arm for the remainder
            self._arm_timer(inst, execution_id, seq, timer_id, fire_at, fire_text)
            return
        ev = h.event(h.TIMER_FIRED, epoch_to_history(now), TimerId=seq, FireAt=fire_text)
        self._deliver(inst.id, Message(ev, execution_id, timer_id=timer_id, fire_at=fire_at))

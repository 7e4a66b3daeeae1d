"""Durable timers: armed on the loop when their creation commits, delivered as TimerFired messages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from devhost.durable import history as h
from devhost.durable.engine.state import Instance, Message
from devhost.durable.timeutil import epoch_to_history


class DurableTimers:
    """Arms an instance's durable timers on the event loop and delivers each as a ``TimerFired`` message.

    It owns no state of its own beyond the loop: the handles live on the instance (so cancelling an instance
    cancels its timers), and a timer whose instance, execution or open task is gone by then is dropped.
    """

    def __init__(
        self,
        *,
        is_live: Callable[[Instance], bool],
        deliver: Callable[[str, Message], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._is_live = is_live
        self._deliver = deliver
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Arm timers on ``loop`` from now on (None: arm nothing, as before the engine starts)."""
        self._loop = loop

    def arm(self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str) -> None:
        """Arm the timer ``seq`` of ``inst`` (store row ``timer_id``) to fire at ``fire_at`` (epoch seconds)."""
        if (
            self._loop is None
            or not self._is_live(inst)
            or inst.execution_id != execution_id
            or inst.open.get(seq) != "t"
        ):
            return
        delay = max(0.0, fire_at - self._clock())
        inst.timer_handles[seq] = self._loop.call_later(
            delay, self._fire, inst, execution_id, seq, timer_id, fire_at, fire_text
        )

    def _fire(self, inst: Instance, execution_id: str, seq: int, timer_id: int, fire_at: float, fire_text: str) -> None:
        inst.timer_handles.pop(seq, None)
        if inst.execution_id != execution_id or inst.open.get(seq) != "t":
            return
        now = self._clock()
        if now < fire_at:  # the monotonic clock ran ahead of the wall clock: re-arm for the remainder
            self.arm(inst, execution_id, seq, timer_id, fire_at, fire_text)
            return
        ev = h.event(h.TIMER_FIRED, epoch_to_history(now), TimerId=seq, FireAt=fire_text)
        self._deliver(inst.id, Message(ev, execution_id, timer_id=timer_id, fire_at=fire_at))

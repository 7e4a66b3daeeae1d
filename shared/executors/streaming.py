"""One base for streaming executors: a subclass only yields chunks; the base does everything else once.

A streaming executor's ``chunks()`` is a generator that yields ``TextChunk``s as the model writes and returns
the step's ``ExecutorOutput``. ``StreamingRun.run()``:

- runs it once (a run is single-use: a second ``run()`` raises, so no two attempts share a buffer);
- keeps the content as the chunks came (a list joined once), never re-serializing and re-parsing the output
  (the structured result comes from the provider's one parse);
- feeds every chunk to the sinks: the partial-output store through a ``DeltaBuffer`` (batched writes, read by
  the job view and the event stream, which does the SSE encoding: shared/jobs/events.sse) and an in-process
  observer (``STREAM_OBSERVER``);
- checks in one place whether the preview's consumer is gone (the store failed: ``DeltaBuffer.broken``); then
  the sinks stop, never the answer;
- marks the stored text complete when the attempt succeeded or drops it when it failed;
- sets the stream's span attributes (chunks, characters, store writes, time to first chunk).

The model's provider streams through a callback (``on_delta``); ``model_chunks`` turns that into chunks the
generator yields, running the call on a helper thread so that the executor stays a plain generator.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from opentelemetry import trace

from shared.jobs.contracts import ExecutorInput, ExecutorOutput
from shared.runtime.streaming.local import DeltaBuffer, get_store

if TYPE_CHECKING:
    from shared.providers.clients import Clients

T = TypeVar("T")
# An in-process observer of the answer's text deltas (tests, local tools). Not part of the contract:
# a callable cannot travel in an activity payload.
STREAM_OBSERVER: ContextVar[Callable[[str], object] | None] = ContextVar("stream_observer", default=None)


@dataclass(frozen=True)
class TextChunk:
    """A piece of the answer's prose, as the model wrote it."""

    text: str


Chunks = Generator[TextChunk, None, ExecutorOutput]


@dataclass(frozen=True)
class _Done(Generic[T]):
    value: T


@dataclass(frozen=True)
class _Failed:
    error: BaseException


def model_chunks(call: Callable[[Callable[[str], None]], T]) -> Generator[TextChunk, None, T]:
    """Yield the deltas ``call(on_delta)`` produces as chunks, then return what it returns (or raise what it raised)."""
    pipe: queue.SimpleQueue[str | _Done[T] | _Failed] = queue.SimpleQueue()

    def work() -> None:
        try:
            pipe.put(_Done(call(pipe.put)))
        except BaseException as exc:  # handed to the generator, which raises it in the executor's thread
            pipe.put(_Failed(exc))

    # The call sees the executor's context (telemetry span, settings overrides).
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(work,), name="model-stream", daemon=True).start()
    while True:
        item = pipe.get()
        if isinstance(item, _Done):
            return item.value
        if isinstance(item, _Failed):
            raise item.error
        if item:
            yield TextChunk(item)


class StreamingRun:
    """One run of a streaming executor; subclasses implement ``chunks`` and only yield data."""

    def __init__(self, inp: ExecutorInput, clients: Clients) -> None:
        self.inp = inp
        self.clients = clients
        self.content: list[str] = []
        self.chunk_count = 0
        self._used = False
        self._buffer = self._store_buffer()
        self._observer = STREAM_OBSERVER.get()
        self._sinks_open = self._buffer is not None or self._observer is not None
        self._first_chunk_ms: int | None = None

    def chunks(self) -> Chunks:
        """The executor's work: yield text chunks as they come, return the step's output."""
        raise NotImplementedError

    def model(self, call: Callable[[Callable[[str], None] | None], T]) -> Generator[TextChunk, None, T]:
        """Run a model call whose deltas become chunks; without any sink the provider is asked not to stream."""
        if not self._sinks_open:
            return call(None)
        return (yield from model_chunks(call))

    @property
    def text(self) -> str:
        """The content streamed so far (joined once per call)."""
        return "".join(self.content)

    def run(self) -> ExecutorOutput:
        """Run ``chunks`` to its end, feeding the sinks; single use."""
        if self._used:
            raise RuntimeError("a streaming executor run is single-use")
        self._used = True
        started = time.monotonic()
        generator = self.chunks()
        try:
            while True:
                try:
                    chunk = next(generator)
                except StopIteration as stop:
                    output: ExecutorOutput = stop.value
                    break
                self._take(chunk, started)
        except BaseException:
            self._finish(succeeded=False)
            raise
        self._finish(succeeded=output.status != "failed")
        return output

    def _take(self, chunk: TextChunk, started: float) -> None:
        """Buffer one chunk and hand it to the sinks while their consumer is there."""
        self.content.append(chunk.text)
        self.chunk_count += 1
        if self._first_chunk_ms is None:
            self._first_chunk_ms = int((time.monotonic() - started) * 1000)
        if not self._sinks_open:
            return
        if self._buffer is not None:
            self._buffer(chunk.text)
        if self._observer is not None:
            self._observer(chunk.text)
        # The one disconnect check: a store that failed once is not written again (the answer goes on).
        if self._buffer is not None and self._buffer.broken:
            self._buffer = None
            self._sinks_open = self._observer is not None

    def _finish(self, *, succeeded: bool) -> None:
        """Complete or drop the stored text, and put the stream's figures on the executor's span."""
        if self._buffer is not None:
            self._buffer.finish(succeeded=succeeded)
        span = trace.get_current_span()
        span.set_attributes(
            {
                "stream.chunks": self.chunk_count,
                "stream.chars": sum(len(piece) for piece in self.content),
                "stream.store_writes": self._buffer.flushes if self._buffer is not None else 0,
                "stream.first_chunk_ms": self._first_chunk_ms if self._first_chunk_ms is not None else -1,
            }
        )

    def _store_buffer(self) -> DeltaBuffer | None:
        """A buffer that streams to the partial-output store, when the step is part of a job and a store is on."""
        ctx = self.inp.execution_context
        if not ctx.job_id or not ctx.step_id:
            return None
        store = get_store(self.clients.settings)
        if store is None:
            return None
        return DeltaBuffer(
            store, ctx.job_id, ctx.step_id, ctx.attempt, flush_ms=self.clients.settings.partial_output_flush_ms
        )

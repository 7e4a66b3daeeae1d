"""The streaming executor base (shared/executors/streaming.py) on its own: a subclass only yields chunks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.executors.streaming import STREAM_OBSERVER, Chunks, StreamingRun, TextChunk, model_chunks
from shared.jobs.contracts import ErrorCode, ExecutorInput, ExecutorOutput, ProviderError
from shared.runtime import telemetry
from shared.runtime.settings import Settings
from shared.runtime.streaming.local import SqlitePartialOutputStore, reset_stores


class _Clients:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings


def _inp(attempt: int = 1) -> ExecutorInput:
    return ExecutorInput.model_validate(
        {
            "task_id": f"job-s:answer:{attempt}",
            "executor_type": "generate_response",
            "task": {"question": "q"},
            "execution_context": {"job_id": "job-s", "step_id": "answer", "attempt": attempt},
        }
    )


class _Pieces(StreamingRun):
    """Yields its pieces through a callback-driven 'model', then succeeds or raises."""

    pieces: list[str] = ["Hello", ", ", "world"]
    fail: bool = False

    def chunks(self) -> Chunks:
        def call(on_delta: Callable[[str], None] | None) -> str:
            for piece in self.pieces:
                if on_delta is not None:
                    on_delta(piece)
            if self.fail:
                raise ProviderError(ErrorCode.UPSTREAM_ERROR, "stream broke")
            return "".join(self.pieces)

        whole = yield from self.model(call)
        assert whole == self.text  # the base's buffer holds exactly what was yielded
        return ExecutorOutput(status="success", result={"answer": whole})


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    reset_stores()
    return Settings(
        partial_output_store="local", partial_output_path=tmp_path / "p.sqlite3", partial_output_flush_ms=10
    )


def test_chunks_reach_the_store_and_the_observer_and_the_run_is_single_use(settings: Settings) -> None:
    exporter = InMemorySpanExporter()
    telemetry.install_span_exporter(exporter)
    seen: list[str] = []
    token = STREAM_OBSERVER.set(seen.append)
    try:
        run = _Pieces(_inp(), _Clients(settings))  # type: ignore[arg-type]
        with telemetry.get_tracer().start_as_current_span("executor generate_response"):
            output = run.run()
    finally:
        STREAM_OBSERVER.reset(token)
        telemetry.reset_telemetry()
    assert output.result == {"answer": "Hello, world"} and seen == ["Hello", ", ", "world"]
    stored = SqlitePartialOutputStore(settings.partial_output_path).read("job-s", "answer")
    assert stored is not None and (stored.text, stored.complete) == ("Hello, world", True)
    with pytest.raises(RuntimeError, match="single-use"):
        run.run()
    attrs: dict[str, Any] = dict(exporter.get_finished_spans()[0].attributes or {})
    assert attrs["stream.chunks"] == 3 and attrs["stream.chars"] == 12 and attrs["stream.first_chunk_ms"] >= 0


def test_a_failed_attempt_drops_its_text_and_raises(settings: Settings) -> None:
    run = _Pieces(_inp(), _Clients(settings))  # type: ignore[arg-type]
    run.fail = True
    with pytest.raises(ProviderError):
        run.run()
    assert SqlitePartialOutputStore(settings.partial_output_path).read("job-s", "answer") is None


def test_a_broken_store_stops_the_preview_once_never_the_answer(settings: Settings, tmp_path: Path) -> None:
    class Broken(SqlitePartialOutputStore):
        calls = 0

        def append(self, *args: Any, **kwargs: Any) -> None:
            Broken.calls += 1
            raise OSError("disk gone")

    run = _Pieces(_inp(), _Clients(settings))  # type: ignore[arg-type]
    run.pieces = ["a"] * 50
    assert run._buffer is not None
    run._buffer.store = Broken(tmp_path / "b.sqlite3")
    run._buffer.flush_chars = 1  # every chunk would write
    output = run.run()
    assert output.result == {"answer": "a" * 50} and Broken.calls == 1


def test_without_a_sink_the_model_is_called_without_streaming(tmp_path: Path) -> None:
    reset_stores()
    settings = Settings(partial_output_store="off")
    calls: list[object] = []

    def call(on_delta: Callable[[str], None] | None) -> str:
        calls.append(on_delta)
        return "done"

    class Plain(StreamingRun):
        def chunks(self) -> Chunks:
            got = yield from self.model(call)
            return ExecutorOutput(status="success", result={"answer": got})

    assert Plain(_inp(), _Clients(settings)).run().result == {"answer": "done"}  # type: ignore[arg-type]
    assert calls == [None]


def test_model_chunks_hands_back_the_calls_error_in_the_callers_thread() -> None:
    def call(on_delta: Callable[[str], None]) -> str:
        on_delta("x")
        raise ValueError("boom")

    got: list[TextChunk] = []
    with pytest.raises(ValueError, match="boom"):
        gen = model_chunks(call)
        for chunk in gen:
            got.append(chunk)
    assert got == [TextChunk("x")]

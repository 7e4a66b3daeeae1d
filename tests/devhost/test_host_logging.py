"""The host's cheaper log path prints and records exactly what the stock logging classes do."""

from __future__ import annotations

import io
import logging
import random
import threading
from collections.abc import Callable

from devhost.functions.logs import HostLogFormatter, HostLogHandler, held_output, host_logger


def _records_of(logger: logging.Logger, emit: Callable[[logging.Logger], None]) -> list[logging.LogRecord]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        emit(logger)
    finally:
        logger.removeHandler(keep)
    return records


def _emit_all(logger: logging.Logger) -> None:
    logger.info("plain %s", 1)
    logger.warning("warned")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    logger.log(logging.ERROR, "via log")
    _helper(logger)
    logger.info("with stack", stack_info=True)


def _helper(logger: logging.Logger) -> None:
    logger.info("attributed to the caller", stacklevel=2)


def test_host_logger_finds_the_same_caller_as_logging() -> None:
    stock = _records_of(logging.getLogger("devhost.test.stock"), _emit_all)
    fast_logger = host_logger("devhost.test.fast")
    assert type(fast_logger) is not logging.Logger and host_logger("devhost.test.fast") is fast_logger
    fast = _records_of(fast_logger, _emit_all)
    assert len(stock) == len(fast) == 6
    for a, b in zip(stock, fast, strict=True):
        assert (a.pathname, a.funcName, a.getMessage()) == (b.pathname, b.funcName, b.getMessage())
        assert a.lineno == b.lineno  # _emit_all is shared, so the same caller line
        assert (a.stack_info is None) == (b.stack_info is None)
    assert fast[-2].funcName == "_emit_all" and fast[0].pathname == __file__
    assert fast[-1].stack_info is not None and fast[-1].stack_info.startswith("Stack (most recent call last):")


def test_host_formatter_prints_what_the_stock_formatter_prints() -> None:
    fmt = "[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    stock, fast = logging.Formatter(fmt), HostLogFormatter(fmt)
    rng = random.Random(5)
    base = 1_700_000_000.0
    for i in range(3000):
        record = logging.makeLogRecord({"name": "devhost.host", "levelno": 20, "levelname": "INFO", "msg": f"m{i}"})
        record.created = base + i * 0.37 + rng.random() / 1000
        record.msecs = int((record.created - int(record.created)) * 1000) + 0.0
        assert fast.format(record) == stock.format(record)


def test_host_handler_holds_lines_until_the_block_ends() -> None:
    stream = io.StringIO()
    handler = HostLogHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("devhost.test.held")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info("before")
        assert stream.getvalue() == "before\n"
        with held_output():
            logger.info("one")
            with held_output():
                logger.info("two")
            other = threading.Thread(target=logger.info, args=("from a thread",))
            other.start()
            other.join()
            assert stream.getvalue() == "before\n"
        assert stream.getvalue() == "before\none\ntwo\nfrom a thread\n"
        logger.info("after")
        assert stream.getvalue().endswith("from a thread\nafter\n")
    finally:
        logger.removeHandler(handler)

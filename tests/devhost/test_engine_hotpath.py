"""Hot-path shortcuts of the engine give exactly what the straightforward code gave."""

from __future__ import annotations

import json
import random
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from devhost.durable import history as h
from devhost.durable.engine import Instance
from devhost.durable.timeutil import epoch_to_history, epoch_to_status
from devhost.functions import ids


def _plain_estate(inst: Instance) -> str:
    return h.dumps(
        {
            "n": inst.next_seq,
            "m": inst.mapped,
            "o": inst.open,
            "r": inst.roots,
            "rm": inst.rmap,
            "g": inst.generation,
            "s": inst.started_at,
        }
    )


def test_incremental_estate_equals_full_serialisation() -> None:
    inst = Instance("i1", "orch", None, '"x"', 1_700_000_000.123456)
    assert inst.estate() == _plain_estate(inst)
    rng = random.Random(3)
    for step in range(60):
        for _ in range(rng.randint(0, 3)):
            kind = rng.choice([0, 1, 5, 6, 4])
            name: Any = None if kind in (4, 5) else f'fn-{step}-\u00e9"q'
            inst.mapped.append([kind, name, None if kind in (4, 6) else inst.next_seq])
            inst.next_seq += 1
            inst.open[inst.next_seq] = "a"
        if step % 7 == 3:
            inst.roots.append({"k": "a", "n": "x", "s": [step]})
            inst.rmap[step] = [len(inst.roots) - 1, "attempt"]
        assert inst.estate() == _plain_estate(inst)
        if step in (30, 45):
            inst.reset_execution('{"again":1}', 1_700_000_001.5)
            assert inst.estate() == _plain_estate(inst)
            # A fan-out right after a reset adds more entries than the previous execution had.
            inst.mapped.extend([0, f"fan{i}", i] for i in range(80))
            assert inst.estate() == _plain_estate(inst)
    restored = Instance("i1", "orch", None, '"x"', 1.0)
    restored.load_estate(inst.estate())
    assert restored.estate() == inst.estate() == _plain_estate(restored)
    restored.mapped.append([0, "more", 99])
    assert restored.estate() == _plain_estate(restored)
    assert json.loads(restored.estate())["m"][-1] == [0, "more", 99]


def test_local_ids_are_version_4_uuids_and_unique_across_threads() -> None:
    def batch(_: int) -> list[str]:
        return [ids.invocation_id() for _ in range(2000)] + [ids.execution_id() for _ in range(2000)]

    with ThreadPoolExecutor(4) as pool:
        made = [i for chunk in pool.map(batch, range(8)) for i in chunk]
    assert len(set(made)) == len(made)
    for text in made[:2000:97] + made[2000:4000:97]:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert text in (str(parsed), parsed.hex)
    assert len(ids.invocation_id()) == 36 and len(ids.execution_id()) == 32


@pytest.mark.parametrize("seed", [1, 2])
def test_history_and_status_times_match_datetime_formatting(seed: int) -> None:
    rng = random.Random(seed)
    samples = [rng.uniform(0, 4e9) for _ in range(20000)]
    samples += [k + 0.9999995 for k in range(0, 4_000_000_000, 40_000_000)]
    samples += [k + 0.0000005 for k in range(0, 4_000_000_000, 40_000_000)]
    samples += [0.0, 1.9999994999, 1_700_000_000.9999995, 1_700_000_000.0000015]
    for ts in samples:
        moment = datetime.fromtimestamp(ts, UTC)
        assert epoch_to_history(ts) == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert epoch_to_status(ts) == moment.strftime("%Y-%m-%dT%H:%M:%SZ")

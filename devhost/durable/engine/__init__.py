"""Durable Functions engine: replays orchestrators through the SDK, runs activities, persists state.

The engine is built from parts, each an object of its own that owns its fields and reaches the others only
through the typed protocols its module names (its ``...Site`` for the core, and small interfaces such as
``WorkSink`` or ``Ending`` for the others). ``Engine`` (``lifecycle``) constructs and wires them in one place
and publishes the client API as the parts' own methods. Each part has unit tests over a small fake site
(tests/devhost/test_engine_parts*.py, fakes in tests/devhost/engine_fakes.py):

- ``state``: the in-memory instance, the messages and work items, one episode's decisions.
- ``core``: ``EngineCore``, the live instances, the ready queue, the store transaction and fault state, the
  history and row writes, completion waiters.
- ``timers``: ``DurableTimers``, durable timers on the event loop, delivered as messages.
- ``activities``: ``ActivityRunner``, the activity queue, workers and thread pool.
- ``entities``: ``Entities``, Durable Entities: operations queued per entity, batches, replies, the entity
  client API.
- ``endings``: ``Endings``, how an execution ends (completion, failure, continue-as-new, the parent told).
- ``episodes/``: ``Episodes`` (``replay``), one replay through the SDK and applying its decisions;
  ``ActionHandlers`` (``actions``), replayed actions checked and new ones scheduled; which messages an
  episode takes (``messages``); calls with a retry policy (``retries``).
- ``remote/``: work of gRPC sidecar workers: their queues (``workers``), remote episodes and activities
  (``orchestrations``), remote entity batches and entity locks (``entities``).
- ``dispatch``: ``Dispatcher``, the loop that runs ready items in committed slices.
- ``recovery``: ``Recovery``, loading what is in flight at start and reloading it after a store fault.
- ``management``: ``Management``, the client API (start, status, query, events, terminate, suspend, ...).
- ``rewind``: ``Rewinder``, re-running the failed tasks of a failed instance.
- ``lifecycle``: ``Engine``, the wiring, start and stop.

Design (the protocol facts it relies on are in ARCHITECTURE.md):

- One ``Engine`` per task hub, living on the server's event loop. All state changes happen on that
  loop thread; SQLite (WAL) is written synchronously from it, so a transaction never spans an
  ``await``.
- Orchestrator episodes run serially on the loop thread, so at most one episode runs at a time
  (well under host.json ``maxConcurrentOrchestratorFunctions``; the SDK handle is CPU-bound, so
  threads would not add throughput). The dispatcher runs ready instances in slices of up to
  ``SLICE_BUDGET_S`` and commits each slice as one transaction (group commit) *before* any work the
  slice produced is dispatched (activities, timers). Episodes of one instance never overlap.
- Activities run on a bounded set of workers (host.json ``maxConcurrentActivityFunctions``): async
  ones on the loop, sync ones in a thread pool of the same size. Results stay in memory until the
  episode that consumes them commits (that commit also deletes the work item), so after a crash
  the activity re-runs: at-least-once.
- Instance history is cached in memory as pre-rendered JSON text; only non-terminal instances are
  cached. Several pending messages are delivered in one episode, except that a retry-relevant
  event (failure of a with-retry attempt, firing of a retry timer) always gets an episode of its
  own (so host and SDK number retries alike), and an episode that ends in continue-as-new is re-run
  with its first message only so later messages carry over to the new execution.
- An orchestration that returns while tasks are still open (un-cancelled timers, running
  activities or sub-orchestrations, e.g. task_any losers) stays Running until they finish, as
  DTFx does; a failure completes at once. Actions a failing episode emitted are recorded in
  history but not executed (a rewind executes them).
- Fan-in coalescing: when an instance's last replay took over 20 ms and more results are still
  expected, its next episode waits up to that long (max 0.5 s) to take a bigger batch, which
  keeps large fan-ins from replaying once per result (fan-out of 3000: ~60 s -> ~1 s).
- ``query`` returns instances in insertion (creation) order; the continuation token is opaque.
- Replay accelerations (``devhost.durable.accel``): a memoised ``namedtuple`` for the SDK executor and a
  ``fromisoformat`` fast path for the SDK's timestamp parser; both are behaviour-preserving.
- Extended sessions (``devhost.durable.sessions``, host.json ``extendedSessionsEnabled``): an in-process
  orchestrator stays alive between episodes and is fed only the events appended since; in doubt, a full replay.
- Rewind removes the failures of plain activity calls and sub-orchestrations (recursively
  rewinding failed children) and re-runs them. Of with-retry calls only the last attempt of the
  exhausted call that failed the instance is re-run (its final retry timer is removed); other
  attempts stay failed so the SDK's ids stay aligned.
"""

from devhost.durable.engine.core import StoreUnavailable
from devhost.durable.engine.lifecycle import Engine
from devhost.durable.engine.state import Instance, validate_instance_id

__all__ = ["Engine", "Instance", "StoreUnavailable", "validate_instance_id"]

"""The durabletask SDK's entity examples (``examples/entities/``): a function-based and a class-based counter."""

from __future__ import annotations

from typing import Any

from durabletask import entities, task

# --- examples/entities/function_based_entity.py ---------------------------------------------------


def counter(ctx: entities.EntityContext, input: int) -> int | None:  # noqa: A002 - the example's parameter name
    """A counter entity: set, add, get."""
    if ctx.operation == "set":
        ctx.set_state(input)
    elif ctx.operation == "add":
        current_state = ctx.get_state(int, 0)
        new_state = current_state + (1 if input is None else input)
        ctx.set_state(new_state)
        return new_state
    elif ctx.operation == "get":
        return ctx.get_state(int, 0)
    else:
        raise ValueError(f"Unknown operation '{ctx.operation}'")
    return None


def counter_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Signals set 0, calls add 1, returns get (1)."""
    entity_id = entities.EntityInstanceId("counter", "myCounter")
    ctx.signal_entity(entity_id, "set", 0)
    yield ctx.call_entity(entity_id, "add", 1)
    return (yield ctx.call_entity(entity_id, "get"))


def failing_call_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Calls an operation the counter does not know and reports the failure it gets."""
    try:
        yield ctx.call_entity(entities.EntityInstanceId("counter", "other"), "multiply", 2)
    except task.TaskFailedError as exc:
        return f"failed: {exc.details.message}"
    return "unreachable"


def locking_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """examples/entities/entity_locking.py: set, add and get inside one critical section (returns 1)."""
    entity_id = entities.EntityInstanceId("counter", "locked")
    with (yield ctx.lock_entities([entity_id])):
        yield ctx.call_entity(entity_id, "set", 0)
        yield ctx.call_entity(entity_id, "add", 1)
        result = yield ctx.call_entity(entity_id, "get")
    return result


def lock_and_wait_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Takes a lock and waits inside the critical section (a test terminates it there)."""
    with (yield ctx.lock_entities([entities.EntityInstanceId("counter", "orphan")])):
        yield ctx.wait_for_external_event("never")
    return None


def read_modify_write_orchestrator(ctx: task.OrchestrationContext, rounds: int) -> Any:
    """Increments two counters by get-then-set, which only a critical section over both makes safe."""
    a = entities.EntityInstanceId("counter", "pair-a")
    b = entities.EntityInstanceId("counter", "pair-b")
    for _ in range(rounds):
        with (yield ctx.lock_entities([b, a])):
            value = yield ctx.call_entity(a, "get")
            yield ctx.call_entity(a, "set", value + 1)
            value = yield ctx.call_entity(b, "get")
            yield ctx.call_entity(b, "set", value + 1)
    return rounds


# --- examples/entities/class_based_entity_actions.py ----------------------------------------------


class Counter(entities.DurableEntity):
    """A class-based counter that signals another entity and starts an orchestration."""

    def set(self, input: int) -> None:  # noqa: A002
        """Set the state."""
        self.set_state(input)

    def add(self, input: int) -> int:  # noqa: A002
        """Add to the state."""
        current_state = self.get_state(int, 0)
        new_state = current_state + (1 if input is None else input)
        self.set_state(new_state)
        return new_state

    def update_parent(self) -> None:
        """Signal the parent counter with this one's state."""
        parent_entity_id = entities.EntityInstanceId("Counter", "parentCounter")
        if self.entity_context.entity_id == parent_entity_id:
            return
        self.signal_entity(parent_entity_id, "set", self.get_state(int, 0))

    def start_hello(self) -> None:
        """Start an orchestration."""
        self.schedule_new_orchestration("hello_orchestrator")

    def get(self) -> int:
        """The state."""
        return self.get_state(int, 0)


def class_counter_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """The class-based example's orchestrator: an entity signals another entity and starts an orchestration."""
    entity_id = task.EntityInstanceId("Counter", "myCounter")
    parent_entity_id = task.EntityInstanceId("Counter", "parentCounter")
    ctx.signal_entity(entity_id, "start_hello")
    ctx.signal_entity(entity_id, "set", 0)
    yield ctx.call_entity(entity_id, "add", 1)
    yield ctx.call_entity(entity_id, "update_parent")
    return (yield ctx.call_entity(parent_entity_id, "get"))


def hello_orchestrator(ctx: task.OrchestrationContext, _: Any) -> Any:
    """Started by the entity."""
    return "Hello world!"

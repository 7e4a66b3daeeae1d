"""What is wrong with a definition: one ``Issue`` per problem, raised together."""

from __future__ import annotations

from dataclasses import dataclass

from shared.definitions.models import MAX_DEFINITION_BYTES


@dataclass(frozen=True)
class Issue:
    """One problem of a definition: where (JSON path, node id), a stable code and a message."""

    path: str
    code: str
    message: str
    node: str | None = None

    def as_dict(self) -> dict[str, str]:
        """The issue as the API shows it."""
        out = {"path": self.path, "code": self.code, "message": self.message}
        if self.node:
            out["node"] = self.node
        return out


class DefinitionInvalid(ValueError):
    """A definition with problems; ``issues`` lists every one."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("; ".join(f"{i.path}: {i.message}" for i in issues))
        self.issues = issues


class DefinitionTooLarge(ValueError):
    """A definition over ``MAX_DEFINITION_BYTES``."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the definition is {size} bytes as JSON; at most {MAX_DEFINITION_BYTES} bytes are accepted")
        self.size = size

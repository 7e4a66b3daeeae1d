"""The job event stream's contract (``GET /api/jobs/{id}/events``, docs/events.md).

Each event is a model of shared/jobs/events.py, where the stream (api/events.py) and the CLI read them; here they
are one union, ``JobEvent``: the ``data`` of one SSE message, told apart by its ``type`` (the message's ``event``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, RootModel

from shared.jobs.events import AnyEvent


class JobEvent(RootModel[Annotated[AnyEvent, Field(discriminator="type")]]):
    """The ``data`` of one message of a job's event stream (its ``event`` field is the ``type``)."""

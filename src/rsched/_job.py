"""A job as a handler sees it (placeholder; the worker issue fills this in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Job:
    """One delivery of a fired occurrence or an enqueued job."""

    execution_id: str
    task: str
    queue: str
    payload: dict[str, Any] = field(default_factory=dict)
    schedule_id: str | None = None
    scheduled_at: datetime | None = None
    attempt: int = 1

"""The worker (placeholder; the worker issue fills this in)."""

from __future__ import annotations


class Worker:
    """Runs registered task handlers for jobs read from queue streams."""

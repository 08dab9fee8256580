"""The async client SDK (placeholder; the product-surface issue fills this in)."""

from __future__ import annotations


class Client:
    """Adds, changes and inspects schedules, jobs and dead letters."""

"""The blocking client SDK (placeholder; the product-surface issue fills this in)."""

from __future__ import annotations


class SyncClient:
    """The same methods as :class:`rsched.Client`, blocking."""

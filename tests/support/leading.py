"""The leading scheduler's stores on the partition of a schedule store, for tests that fire or
take a lease by hand."""

from __future__ import annotations

from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.schedules import ScheduleStore


def firing(store: ScheduleStore) -> FiringStore:
    """Fires, due reads and releases on the partition of ``store``, with its history limit."""
    return FiringStore(store.redis, store.keys, history_limit=store.history_limit)


def leases(store: ScheduleStore) -> LeaseStore:
    """The lease of the partition of ``store``."""
    return LeaseStore(store.redis, store.keys)

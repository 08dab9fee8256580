"""One page of a paged read: the items and the cursor of the next page.

Every read that can be long (``Client.list``, ``dead_letters``, ``history``) answers with a
:class:`Page`, so callers page them all alike: pass ``page.cursor`` back until it is None.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a paged read: ``items`` in the read's order and ``cursor``, to pass back
    for the next page (None: this is the last one). A page iterates over its items and has
    a ``len()``. Since 0.1.0.
    """

    items: list[T]
    cursor: str | None = None

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

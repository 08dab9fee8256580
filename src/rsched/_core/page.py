"""One page of a paged read: the items and the cursor of the next page.

Every read that can be long (``Client.list``, ``dead_letters``, ``history``, ``jobs``,
``runs``) answers with a :class:`Page`, so callers page them all alike: pass ``page.cursor``
back until it is None.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a paged read: ``items`` in the read's order and ``cursor``, to pass back
    for the next page (None: this is the last one). A page iterates over its items and has
    a ``len()``.
    """

    items: list[T]
    cursor: str | None = None

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


async def every_item(read: Callable[[str | None], Awaitable[Page[T]]]) -> AsyncIterator[T]:
    """Every item of a paged read (``read(cursor)`` gives a page), a page at a time."""
    cursor: str | None = None
    while True:
        page = await read(cursor)
        for item in page:
            yield item
        if page.cursor is None:
            return
        cursor = page.cursor


def every_item_sync(read: Callable[[str | None], Page[T]]) -> Iterator[T]:
    """:func:`every_item` for a blocking ``read``."""
    cursor: str | None = None
    while True:
        page = read(cursor)
        yield from page
        if page.cursor is None:
            return
        cursor = page.cursor

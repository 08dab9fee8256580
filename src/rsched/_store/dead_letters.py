"""Redis access for dead letters: list, inspect, requeue, purge, and trim them.

A queue's dead letters are the stream ``{p}:dead:<queue>`` (docs/keys.md), written by the
worker's dead script. The class is a part of QueueStore (rsched._store.queues).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import cast

from redis.exceptions import ResponseError

from rsched._core.codes import check
from rsched._core.errors import DeadLetterNotFound, InvalidArgument
from rsched._core.job import DeadLetter, Entry
from rsched._core.rules import check_page
from rsched._redis import scripts
from rsched._redis.cluster import is_cluster

#: Entries read per call while walking a dead-letter stream.
PAGE = 500


class DeadLetters(scripts.ScriptCaller):
    """The dead letters of one partition's queues."""

    async def dead_letters(
        self,
        queue: str = "default",
        *,
        limit: int = 100,
        cursor: str | None = None,
        task: str | None = None,
        inclusive: bool = False,
    ) -> tuple[list[DeadLetter], str | None]:
        """A page of dead letters, newest first, and the cursor of the next page (or None):
        those after the entry id ``cursor`` (from it with ``inclusive``)."""
        try:
            check_page(limit)
        except ValueError as exc:
            raise InvalidArgument("limit", str(exc)) from None
        key = self.keys.dead(queue)
        start = (cursor if inclusive else f"({cursor}") if cursor else "+"
        out: list[DeadLetter] = []
        while True:
            want = limit - len(out) if task is None else PAGE
            try:
                page = cast(list[Entry], await self.redis.xrevrange(key, start, "-", count=want))
            except ResponseError as exc:
                raise InvalidArgument("cursor", f"{cursor!r} is not an entry id ({exc})") from None
            for entry_id, fields in page:
                letter = DeadLetter.from_entry(queue, entry_id, fields)
                if task is None or letter.task == task:
                    out.append(letter)
                    if len(out) == limit:
                        return out, entry_id
            if len(page) < want:
                return out, None
            start = f"({page[-1][0]}"

    async def dead_letter(self, queue: str, entry_id: str) -> DeadLetter:
        """One dead letter; raises DeadLetterNotFound."""
        try:
            found = cast(
                list[Entry], await self.redis.xrange(self.keys.dead(queue), entry_id, entry_id)
            )
        except ResponseError:
            raise DeadLetterNotFound(queue, entry_id) from None
        if not found:
            raise DeadLetterNotFound(queue, entry_id)
        return DeadLetter.from_entry(queue, found[0][0], found[0][1])

    async def _matching(self, queue: str, task: str | None) -> Iterable[list[str]]:
        """Pages of dead-letter ids (oldest first) whose task matches (all when task is None)."""
        key = self.keys.dead(queue)
        start = "-"
        pages: list[list[str]] = []
        while True:
            page = cast(list[Entry], await self.redis.xrange(key, start, "+", count=PAGE))
            ids = [eid for eid, fields in page if task is None or _dead_task(fields) == task]
            if ids:
                pages.append(ids)
            if len(page) < PAGE:
                return pages
            start = f"({page[-1][0]}"

    async def requeue(
        self, queue: str, entry_ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Put dead letters back on the queue as attempt 1; returns how many were re-queued.

        ``entry_ids=None`` re-queues every dead letter of the queue (of ``task`` if given).
        """
        moved = 0
        async for chunk in self._selected(queue, entry_ids, task):
            res = int(
                await self.call(
                    "requeue", [self.keys.dead(queue), *self.keys.streams(queue)], chunk
                )
            )
            if res < 0:
                check(res, script="requeue", queue=queue)
            moved += res
        if moved:
            await self.redis.sadd(self.keys.queues, queue)
        return moved

    async def _selected(
        self, queue: str, entry_ids: Sequence[str] | None, task: str | None
    ) -> AsyncIterator[list[str]]:
        """The dead letters ``requeue`` / ``purge`` act on, in non-empty chunks of at most PAGE
        ids: ``entry_ids`` (those of ``task`` when given too), or when None every dead letter
        of the queue (of ``task``)."""
        pages = [list(entry_ids)] if entry_ids is not None else await self._matching(queue, task)
        for ids in pages:
            for start in range(0, len(ids), PAGE):
                chunk = ids[start : start + PAGE]
                if task is not None and entry_ids is not None:
                    chunk = await self._filter_ids(queue, chunk, task)
                if chunk:
                    yield chunk

    async def _filter_ids(self, queue: str, ids: list[str], task: str) -> list[str]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for eid in ids:
                pipe.xrange(self.keys.dead(queue), eid, eid)
            found: list[list[Entry]] = await pipe.execute()
        return [
            eid
            for eid, hit in zip(ids, found, strict=True)
            if hit and _dead_task(hit[0][1]) == task
        ]

    async def purge(
        self, queue: str, entry_ids: Sequence[str] | None = None, *, task: str | None = None
    ) -> int:
        """Delete dead letters for good; returns how many were deleted.

        ``entry_ids=None`` deletes every dead letter of the queue (of ``task`` if given).
        """
        key = self.keys.dead(queue)
        if entry_ids is None and task is None:
            # Atomic on one server; a cluster pipeline (redis-py before 7) has no MULTI.
            async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
                pipe.xlen(key)
                pipe.delete(key)
                count, _ = await pipe.execute()
            return int(count)
        deleted = 0
        async for chunk in self._selected(queue, entry_ids, task):
            deleted += int(await self.redis.xdel(key, *chunk))
        return deleted

    async def trim_dead_letters(
        self, queues: Sequence[str], before_ms: int, max_entries: int
    ) -> int:
        """Drop the dead letters of ``queues`` written before ``before_ms`` (XTRIM MINID: an
        entry id is its time) and those past about ``max_entries`` a queue (MAXLEN ~); returns
        how many were dropped."""
        if not queues:
            return 0
        cutoff = str(before_ms)
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.xtrim(self.keys.dead(queue), minid=cutoff, approximate=False)
                pipe.xtrim(self.keys.dead(queue), maxlen=max_entries, approximate=True)
            trimmed = await pipe.execute(raise_on_error=False)
        return sum(n for n in trimmed if isinstance(n, int))


def _dead_task(fields: dict[str, str]) -> str:
    return fields.get("task", "")

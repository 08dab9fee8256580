"""The ``rsched`` commands on the deployment's partitions: ``init`` and ``where``."""

from __future__ import annotations

import argparse

from rsched._cli.common import out
from rsched._client.client import Client
from rsched._core.errors import UsageError
from rsched._core.keys import Keys
from rsched._core.partitions import job_partition, partition_of


async def cmd_init(client: Client, args: argparse.Namespace) -> None:
    wanted = getattr(args, "partitions", None)
    if wanted is None:
        raise UsageError("give the number of partitions: rsched init --partitions N")
    created = await client.init(wanted)
    prefix = client.settings.prefix
    if created:
        text = f"deployment {prefix!r}: stored {wanted} partition(s)"
    else:
        text = f"deployment {prefix!r} has {wanted} partition(s) already: nothing to do"
    out(args, {"prefix": prefix, "partitions": wanted, "created": created}, text)


async def cmd_where(client: Client, args: argparse.Namespace) -> None:
    n = await client.partitions()
    prefix = client.settings.prefix
    sid, at = args.id, "@" in args.id
    schedule = Keys(prefix, n, partition_of(sid, n))
    job = Keys(prefix, n, job_partition(sid, n))
    data = {
        "id": sid,
        "partitions": n,
        "schedule": None
        if at
        else {
            "partition": schedule.partition,
            "tag": schedule.tag,
            "hash": schedule.schedule(sid),
            "index": schedule.schedules,
            "parked": schedule.parked_of(sid),
            "history": schedule.history(sid),
            "pending": schedule.pending(sid),
            "queue": schedule.queue("<queue>"),
        },
        "job": {
            "partition": job.partition,
            "tag": job.tag,
            "queue": job.queue("<queue>"),
            "delayed": job.delayed_queue("<queue>"),
            "dead": job.dead("<queue>"),
            "dedup": None if at else job.dedup(sid),
            "result": job.result(sid),
            "runs": job.runs,
        },
    }
    lines = []
    if not at:
        lines += [
            f"as a schedule id: partition {schedule.partition} of {n}, tag {schedule.tag}",
            f"  redis-cli HGETALL '{schedule.schedule(sid)}'",
            f"  redis-cli ZSCORE '{schedule.schedules}' {sid}       (next run, ms)",
            f"  redis-cli ZSCORE '{schedule.parked_of(sid)}' {sid}   (instead, when parked)",
            f"  redis-cli LRANGE '{schedule.history(sid)}' 0 9",
            f"  its jobs: '{schedule.queue('<queue>')}'",
        ]
    lines += [
        f"as an execution id: partition {job.partition} of {n}, tag {job.tag}",
        f"  its queue: '{job.queue('<queue>')}', delayed '{job.delayed_queue('<queue>')}', "
        f"dead letters '{job.dead('<queue>')}'",
        f"  redis-cli GET '{job.result(sid)}'       (its result while kept)",
        *([] if at else [f"  redis-cli GET '{job.dedup(sid)}'        (an enqueue's dedup window)"]),
        f"  its runs log: '{job.runs}'",
    ]
    out(args, data, "\n".join(lines))

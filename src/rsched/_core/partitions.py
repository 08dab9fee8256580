"""Partitions: which partition a schedule or a job lives in, and each partition's hash tag.

A deployment has a fixed number of partitions N (stored in ``{prefix}:meta``, docs/scaling.md).
Every key of one partition carries that partition's hash tag, so every script touches one slot
of a Redis Cluster; N=1 keeps the single tag ``{prefix}`` of a deployment without partitions.
"""

from __future__ import annotations

import zlib
from binascii import crc_hqx
from functools import cache

# Redis Cluster's number of hash slots.
SLOTS = 16384
# Enough to spread over any cluster worth running (a few primaries per partition is the most a
# deployment can use); more only make every fan-out read slower, and choosing the tags of 1,024
# takes over a second.
MAX_PARTITIONS = 256


def tag_slot(tag: str) -> int:
    """The cluster slot of every key with hash tag ``{tag}`` (CRC16/XMODEM mod 16384)."""
    return crc_hqx(tag.encode(), 0) % SLOTS


def check_partitions(partitions: int) -> int:
    """The number of partitions of a deployment: 1 to MAX_PARTITIONS."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ValueError(f"partitions must be a whole number, got {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be 1 to {MAX_PARTITIONS}, got {partitions}")
    return partitions


def partition_of(name: str, partitions: int) -> int:
    """The partition of a schedule id or a job's execution id: CRC-32 of its UTF-8 bytes modulo
    N, the same in every process and Python version (unlike ``hash()``)."""
    return 0 if partitions == 1 else zlib.crc32(name.encode()) % partitions


def job_partition(execution_id: str, partitions: int) -> int:
    """The partition of a job: a fired occurrence (``<schedule id>@<ms>``, '@' being no
    character of an id) is in its schedule's, an enqueued job in its execution id's, a flow's
    step (``<flow id>~<n>``, rsched._core.flows) in its flow's."""
    execution_id = execution_id.split("~", 1)[0]
    schedule_id, at, _ = execution_id.rpartition("@")
    return partition_of(schedule_id if at else execution_id, partitions)


@cache
def partition_tags(prefix: str, partitions: int) -> tuple[str, ...]:
    """The hash tag (what goes between the braces) of each partition.

    N=1: ``(prefix,)``. Otherwise partition k gets ``<prefix>:<k>`` or ``<prefix>:<k>.<j>`` with
    the smallest j whose slot falls in the middle half of the k-th of N equal slot ranges. A
    cluster gives each primary a contiguous run of slots, so the partitions spread over the
    primaries as evenly as N allows (naive ``<prefix>:<k>`` tags clump: 10/3/3 of 16 over three
    primaries).
    """
    check_partitions(partitions)
    if partitions == 1:
        return (prefix,)
    tags = []
    for k in range(partitions):
        lo, hi = k * SLOTS / partitions, (k + 1) * SLOTS / partitions
        quarter = (hi - lo) / 4
        j = 0
        while True:
            tag = f"{prefix}:{k}" if j == 0 else f"{prefix}:{k}.{j}"
            if lo + quarter <= tag_slot(tag) < hi - quarter:
                break
            j += 1
        tags.append(tag)
    return tuple(tags)

"""The runs log's label index: finding a label's runs among 500k retained records, and the
memory of an index entry.

The records are written by a script that does per record what lua/includes/run_log.lua and
run_index.lua do for a labelled job's (XADD of its 'r' and 'l' fields, an XADD of the same id
to each pair's index, the pairs' SET), 2,000 records a call: writing 500k through the workers' own
scripts would take minutes and measure them, not the read. Then Client.runs(labels=...) reads
its first page (runs in progress included, as the dashboard's does). Against a private server
(bench._servers); the client runs in this process. bench/README.md, "Runs by label".

``python -m bench.runs_labels [--kind redis|valkey] [--size N] [--repeat N]``
"""

from __future__ import annotations

import argparse

import anyio

from bench._servers import BenchServer
from bench.labels import best_and_median
from rsched import Client, Settings
from rsched._core.keys import Keys
from rsched._redis.connection import connect
from rsched._store.runs_log import run_record

PREFIX = "bench"
CUSTOMERS = 1_000
TEAMS = 10
BATCH = 2_000

# One record a (record, labels) pair of ARGV; KEYS[1] the runs log.
WRITE = """
local runs = KEYS[1]
for i = 1, #ARGV, 2 do
  local labels = ARGV[i + 1]
  local id = redis.call('XADD', runs, '*', 'r', ARGV[i], 'l', labels)
  for pair in string.gmatch(labels, '[^,]+') do
    redis.call('XADD', runs .. ':label:' .. pair, id, 'i', '1')
    redis.call('SADD', runs .. ':labels', pair)
  end
end
return 0
"""


def record(i: int) -> tuple[str, str]:
    fields = {"execution_id": f"job-{i}", "task": "bench.task", "attempt": "1"}
    row = run_record(fields, queue="default", status="completed", worker="w", duration_ms=5)
    return row, f"customer=c{i % CUSTOMERS},team=t{i % TEAMS}"


async def run(kind: str, size: int, repeat: int) -> None:
    with BenchServer(kind) as server:
        settings = Settings(redis_url=server.url, prefix=PREFIX)
        redis = connect(settings)
        client = Client(redis, settings)
        keys = Keys(PREFIX)
        try:
            for start in range(0, size, BATCH):
                args = [v for i in range(start, min(size, start + BATCH)) for v in record(i)]
                await redis.eval(WRITE, 1, keys.runs, *args)
            print(
                f"{server.version()}: {size:,} runs-log records, each labelled customer=c<n> "
                f"(1 of {CUSTOMERS:,}) and team=t<n> (1 of {TEAMS})"
            )
            for pair, count in (("team=t3", size // TEAMS), ("customer=c42", size // CUSTOMERS)):
                used = int(await redis.memory_usage(keys.run_label(pair), samples=0) or 0)
                print(f"  index {pair:<13} {count:>7,} ids  {used / count:6.1f} B an entry")
            cases = [
                ("runs customer=c42, first page of 50", {"customer": "c42"}),
                ("runs team=t3, first page of 50", {"team": "t3"}),
                ("runs team=t3 + customer=c43 (AND)", {"team": "t3", "customer": "c43"}),
                ("runs customer=none (no match)", {"customer": "none"}),
            ]
            for name, labels in cases:

                async def first_page(labels: dict[str, str] = labels) -> None:
                    await client.runs(labels=labels, limit=50)

                best, median = await best_and_median(first_page, repeat)
                print(f"  {name:<38} best {best:7.1f} ms  median {median:7.1f} ms")
            page = await client.runs(labels={"customer": "c42"}, limit=50)
            best, median = await best_and_median(
                lambda: client.runs(labels={"customer": "c42"}, limit=50, cursor=page.cursor),
                repeat,
            )
            print(f"  {'runs customer=c42, second page':<38} best {best:7.1f} ms  median "
                  f"{median:7.1f} ms")  # fmt: skip
        finally:
            await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=["redis", "valkey"], default="redis")
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    anyio.run(run, args.kind, args.size, args.repeat)


if __name__ == "__main__":
    main()

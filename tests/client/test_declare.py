"""Schedules files: sync plans, conflicts with SDK-created schedules, invalid files."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from rsched import Client, Limit, Schedule, ScheduleFileError, Settings
from rsched._client.schedules_file import load_file, sync_file
from tests.support.keys import written_keys
from tests.support.processes import Proc

BASE = """
[defaults]
queue = "reports"

[[schedule]]
id = "nightly"
task = "reports.nightly"
cron = "0 2 * * *"
timezone = "Europe/Rome"
payload = { kind = "sales" }

[[schedule]]
id = "poll"
task = "feeds.poll"
every = 300
"""


def write(tmp_path: Path, text: str, name: str = "schedules.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


async def test_first_sync_adds_then_is_a_no_op(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, BASE)
    plan = await sync_file(redis, settings, path)
    assert plan.applied
    assert sorted(plan.ids("add")) == ["nightly", "poll"]
    client = Client(redis, settings)
    nightly = await client.get("nightly")
    assert nightly.source == "file:schedules"
    assert nightly.queue == "reports"
    assert nightly.payload == {"kind": "sales"}
    again = await sync_file(redis, settings, path)
    assert again.changes == []
    assert sorted(again.unchanged) == ["nightly", "poll"]
    assert (await client.get("nightly")).generation == 1


async def test_update_remove_and_sdk_schedules_left_alone(
    tmp_path: Path, redis: Redis, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, BASE)
    await sync_file(redis, settings, path)
    client = Client(redis, settings)
    await client.add(Schedule(id="mine", task="t", every=60))
    changed = BASE.replace("every = 300", "every = 600").split('[[schedule]]\nid = "nightly"')[0]
    changed += '[[schedule]]\nid = "fresh"\ntask = "t"\ncron = "*/5 * * * *"\n'
    changed += '[[schedule]]\nid = "poll"\ntask = "feeds.poll"\nevery = 600\n'
    path.write_text(changed)
    with caplog.at_level(logging.INFO, logger="rsched.sync"):
        dry = await sync_file(redis, settings, path, dry_run=True)
    assert not dry.applied
    assert (dry.ids("add"), dry.ids("update"), dry.ids("remove")) == (
        ["fresh"],
        ["poll"],
        ["nightly"],
    )
    assert "every: 5m -> 10m" in "\n".join(dry.lines())
    assert "sync.remove" in caplog.text
    assert (await client.get("poll")).every == 300  # dry run: nothing written
    plan = await sync_file(redis, settings, path)
    assert plan.applied
    assert (await client.get("poll")).generation == 2
    ids = {s.id for s in (await client.list()).items}
    assert ids == {"poll", "fresh", "mine"}
    assert await redis.smembers(f"{{{settings.prefix}}}:source:file:schedules") == {
        "poll",
        "fresh",
    }


async def test_an_operator_pause_survives_a_sync(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, BASE)
    await sync_file(redis, settings, path)
    client = Client(redis, settings)
    await client.pause("poll", note="upstream down")
    path.write_text(BASE.replace("every = 300", "every = 900"))
    await sync_file(redis, settings, path)
    poll = await client.get("poll")
    assert poll.every == 900
    assert poll.paused
    assert poll.pause_note == "upstream down"


async def test_conflict_with_an_sdk_schedule(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    client = Client(redis, settings)
    await client.add(Schedule(id="poll", task="old.task", every=60))
    path = write(tmp_path, BASE)
    with pytest.raises(ScheduleFileError, match=r"'poll'.*created by the SDK or CLI.*--adopt"):
        await sync_file(redis, settings, path)
    assert await client.list() is not None
    assert {s.id for s in (await client.list()).items} == {"poll"}  # nothing applied
    plan = await sync_file(redis, settings, path, adopt=True)
    assert plan.ids("adopt") == ["poll"]
    poll = await client.get("poll")
    assert poll.source == "file:schedules"
    assert poll.task == "feeds.poll"


async def test_two_files_do_not_touch_each_other(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    a = write(tmp_path, BASE, "a.toml")
    b = write(tmp_path, '[[schedule]]\nid = "b1"\ntask = "t"\nevery = 60\n', "b.toml")
    await sync_file(redis, settings, a)
    await sync_file(redis, settings, b)
    b.write_text("")  # empty file: remove everything b created
    plan = await sync_file(redis, settings, b)
    assert plan.ids("remove") == ["b1"]
    client = Client(redis, settings)
    assert {s.id for s in (await client.list()).items} == {"nightly", "poll"}
    clash = write(tmp_path, '[[schedule]]\nid = "poll"\ntask = "t"\nevery = 60\n', "c.toml")
    with pytest.raises(ScheduleFileError, match="source 'file:a'"):
        await sync_file(redis, settings, clash)


async def test_invalid_entries_fail_the_whole_sync(
    tmp_path: Path, redis: Redis, settings: Settings, prefix: str
) -> None:
    path = write(
        tmp_path,
        BASE
        + """
[[schedule]]
id = "bad"
task = "t"
cron = "0 0 30 2 *"

[[schedule]]
task = "no.id"
every = 5
colour = "blue"

[[schedule]]
id = "poll"
task = "dup"
every = 5

[[schedule]]
id = "once"
task = "t"
at = 2001-01-01T00:00:00Z
""",
    )
    with pytest.raises(ScheduleFileError) as err:
        await sync_file(redis, settings, path)
    where = [w for w, _ in err.value.errors]
    assert "schedule[2] (id 'bad').cron" in where
    assert "schedule[3].id" in where
    assert "schedule[3].colour" in where
    assert "schedule[4] (id 'poll').id" in where
    assert "schedule[5] (id 'once').at" in where
    assert "nothing applied" in str(err.value)
    assert await written_keys(redis, prefix) == []


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ScheduleFileError, match="cannot read the file"):
        load_file(tmp_path / "missing.toml")
    with pytest.raises(ScheduleFileError, match="not valid TOML"):
        load_file(write(tmp_path, "[[schedule]\nid="))
    with pytest.raises(ScheduleFileError, match="unknown top-level key") as err:
        load_file(write(tmp_path, 'schedules = 1\nsource = "bad name!"\n'))
    assert [w for w, _ in err.value.errors] == ["schedules", "source"]
    with pytest.raises(ScheduleFileError, match="maintained by rsched"):
        load_file(write(tmp_path, '[[schedule]]\nid="a"\ntask="t"\nevery=5\ngeneration=3\n'))


def test_explicit_source_name(tmp_path: Path) -> None:
    source, schedules = load_file(write(tmp_path, 'source = "billing"\n' + BASE))
    assert source == "billing"
    assert {s.source for s in schedules} == {"billing"}


def test_durations_in_a_file(tmp_path: Path) -> None:
    _, schedules = load_file(
        write(tmp_path, '[[schedule]]\nid="a"\ntask="t"\nevery="1h30m"\ntimeout_s="90s"\n')
    )
    assert (schedules[0].every, schedules[0].timeout_s) == (5400, 90)
    with pytest.raises(ScheduleFileError, match=r"schedule\[0\] \(id 'a'\)\.every: 'soon'"):
        load_file(write(tmp_path, '[[schedule]]\nid="a"\ntask="t"\nevery="soon"\n'))


async def test_two_schedulers_syncing_at_once(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, BASE)
    plans = []

    async def sync() -> None:
        plans.append(await sync_file(redis, settings, path))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(sync)
    assert all(p.applied for p in plans)
    client = Client(redis, settings)
    assert {s.id: s.generation for s in (await client.list()).items} == {
        "nightly": 1,
        "poll": 1,
    }


@pytest.mark.slow
async def test_the_scheduler_syncs_its_file_at_start(
    tmp_path: Path,
    redis: Redis,
    settings: Settings,
    redis_url: str,
    prefix: str,
    spawn: Callable[..., Proc],
) -> None:
    path = write(tmp_path, BASE)
    env = {"RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix}
    proc = spawn("rsched._cli.scheduler_process", "--schedules", str(path), env=env)
    proc.wait_for("leader.acquired")
    assert "sync.add" in proc.output()
    client = Client(redis, settings)
    assert {s.id for s in (await client.list()).items} == {"nightly", "poll"}
    stats = await client.stats()
    assert stats.leader is not None
    assert stats.leader["lease_left_ms"] > 0
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


async def test_files_of_the_same_name_never_remove_each_others_schedules(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write(tmp_path / "a", BASE, "jobs.toml")
    b = write(tmp_path / "b", '[[schedule]]\nid = "b1"\ntask = "t"\nevery = 60\n', "jobs.toml")
    first = await sync_file(redis, settings, a)
    assert first.source == "file:jobs"
    assert first.ids("add") == ["nightly", "poll"]
    with pytest.raises(ScheduleFileError) as err:
        await sync_file(redis, settings, b)  # would remove nightly and poll
    ((where, message),) = err.value.errors
    assert where == "source"
    assert str(a.resolve()) in message
    assert "remove or change 2" in message
    assert 'source = "..."' in message
    client = Client(redis, settings)
    assert {s.id for s in (await client.list()).items} == {"nightly", "poll"}
    # With a source of its own, b is another file; a still syncs as before.
    b.write_text('source = "team-b"\n' + b.read_text())
    assert (await sync_file(redis, settings, b)).ids("add") == ["b1"]
    assert (await sync_file(redis, settings, a)).summary().startswith("0 to add")
    assert {s.id for s in (await client.list()).items} == {"nightly", "poll", "b1"}


async def test_a_moved_file_keeps_its_schedules(
    tmp_path: Path, redis: Redis, settings: Settings, prefix: str
) -> None:
    """Schedules synced earlier under the default source (before paths were recorded, or from
    a path that is gone) stay this file's."""
    old = write(tmp_path, BASE, "jobs.toml")
    await sync_file(redis, settings, old)
    await redis.delete(f"{{{prefix}}}:source_paths")  # as synced by an earlier rsched
    (tmp_path / "new").mkdir()
    moved = old.rename(tmp_path / "new" / "jobs.toml")
    moved.write_text(BASE.replace("every = 300", "every = 600"))
    plan = await sync_file(redis, settings, moved)
    assert plan.ids("update") == ["poll"]
    assert plan.ids("add") == []
    moved.write_text(BASE.split('[[schedule]]\nid = "poll"')[0])
    assert (await sync_file(redis, settings, moved)).ids("remove") == ["poll"]
    assert await redis.hget(f"{{{prefix}}}:source_paths", "file:jobs") == str(moved.resolve())


def test_every_problem_of_a_file_in_one_pass(tmp_path: Path) -> None:
    text = """
[[schedule]]
id = "a"
task = "t"
every = "soon"
timezone = "Mars/Base"
retry_base_s = -1

[[schedule]]
id = "b!"
task = "t"
cron = "0 0 30 2 *"
colour = "red"
runs = 3

[[schedule]]
id = "c"
task = "t"
every = 60
"""
    with pytest.raises(ScheduleFileError) as err:
        load_file(write(tmp_path, 'schedule_extra = 1\n[defaults]\nid = "x"\n' + text))
    where = [w for w, _ in err.value.errors]
    assert "schedule[0] (id 'a').every" in where
    assert "schedule[0] (id 'a').timezone" in where
    assert "schedule[0] (id 'a').retry_base_s" in where
    assert not any("trigger" in m for _, m in err.value.errors)  # no echo of the bad every
    assert {"schedule[1] (id 'b!').id", "schedule[1] (id 'b!').cron",
            "schedule[1] (id 'b!').colour", "schedule[1] (id 'b!').runs"} <= set(where)  # fmt: skip
    assert "schedule_extra" in where
    assert "defaults.id" in where
    assert not any(w.startswith("schedule[2]") for w in where)


async def test_every_kind_of_problem_in_one_pass_in_file_order(
    tmp_path: Path, redis: Redis, settings: Settings, prefix: str
) -> None:
    # Each entry also fails a field check, which used to hide the problems found after it.
    path = write(
        tmp_path,
        """
[[schedule]]
id = "a"
task = "t"
every = "often"

[[schedule]]
id = "a"
task = "t"
every = 60

[[schedule]]
id = "b"
task = "t"
every = 60
at = 2030-01-01T00:00:00Z
max_retries = "x"

[[schedule]]
id = "c"
task = "t"
at = 2001-01-01T00:00:00Z
retry_jitter = 7

[[schedule]]
id = "d"
task = "t"
every = 60
start_at = 2031-01-01T00:00:00Z
end_at = 2030-01-01T00:00:00Z
timeout_s = "never"
""",
    )
    with pytest.raises(ScheduleFileError) as err:
        await sync_file(redis, settings, path)
    assert [(w, m.split(" ")[0]) for w, m in err.value.errors] == [
        ("schedule[0] (id 'a').every", "'often'"),
        ("schedule[1] (id 'a').id", "duplicate"),
        ("schedule[2] (id 'b').max_retries", "Input"),
        ("schedule[2] (id 'b')", "give"),
        ("schedule[3] (id 'c').retry_jitter", "must"),
        ("schedule[3] (id 'c').at", "2001-01-01T00:00:00+00:00"),
        ("schedule[4] (id 'd').timeout_s", "'never'"),
        ("schedule[4] (id 'd')", "end_at"),
    ]
    assert "(given: every, at)" in err.value.errors[3][1]
    assert await written_keys(redis, prefix) == []


def test_messages_name_the_keys_of_the_file(tmp_path: Path) -> None:
    text = """
[[schedule]]
id = "a"
task = "t"
every = 60
at = 2030-01-01T00:00:00Z
buffer_limit = 0

[[schedule]]
id = "b"
task = "t"
every = "soon"
colour = "red"
payload = 3
"""
    with pytest.raises(ScheduleFileError) as err:
        load_file(write(tmp_path, text))
    said = dict(err.value.errors)
    assert said["schedule[0] (id 'a')"] == (
        'give exactly one trigger: cron = "0 2 * * *", every = "5m" or at = '
        "2030-01-01T09:00:00Z (given: every, at)"
    )
    assert 'held back by overlap = "buffer_all"' in said["schedule[0] (id 'a').buffer_limit"]
    assert 'give seconds (300) or text such as "90s"' in said["schedule[1] (id 'b').every"]
    assert "a schedule's keys are at, buffer_limit," in said["schedule[1] (id 'b').colour"]
    assert 'a table, e.g. payload = { kind = "sales" }' in said["schedule[1] (id 'b').payload"]
    assert "timedelta" not in str(err.value)


async def test_a_large_file_syncs_in_a_few_round_trips(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    entries = "".join(
        f'[[schedule]]\nid = "s{i}"\ntask = "t"\nevery = {60 + i}\n\n' for i in range(2000)
    )
    path = write(tmp_path, entries)
    await redis.config_resetstat()
    plan = await sync_file(redis, settings, path)
    assert len(plan.ids("add")) == 2000
    stats = await redis.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] <= 10  # upsert_many, 1,000 a call
    assert (await sync_file(redis, settings, path)).summary() == "0 to add, 0 to update, " \
        "0 to remove, 2000 unchanged"  # fmt: skip


LIMITED = """
[[schedule]]
id = "crm-sync"
task = "crm.sync"
every = "5m"
payload = { customer_id = 42 }
limits = [{ key = "crm", rate = "100/m" }, { key = "customer:{customer_id}", concurrency = 1 }]

[[schedule]]
id = "tables"
task = "t"
every = 60

[[schedule.limits]]
key = "reports"
concurrency = 2
rate = "10/30s"
"""


async def test_limits_in_a_file_sync_and_compare(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, LIMITED)
    plan = await sync_file(redis, settings, path)
    assert sorted(plan.ids("add")) == ["crm-sync", "tables"]
    client = Client(redis, settings)
    stored = await client.get("crm-sync")
    assert stored.limits == (Limit("crm", rate="100/m"), Limit("customer:{customer_id}", 1))
    assert (await client.get("tables")).limits == (Limit("reports", 2, "10/30s"),)
    again = await sync_file(redis, settings, path)
    assert (again.changes, sorted(again.unchanged)) == ([], ["crm-sync", "tables"])
    path.write_text(LIMITED.replace('rate = "100/m"', 'rate = "50/m"'))
    plan = await sync_file(redis, settings, path, dry_run=True)
    assert plan.ids("update") == ["crm-sync"]
    (line,) = plan.lines()[1:]
    assert line.endswith(
        'limits: [{ key = "crm", rate = "100/m" }, { key = "customer:{customer_id}", '
        'concurrency = 1 }] -> [{ key = "crm", rate = "50/m" }, { key = '
        '"customer:{customer_id}", concurrency = 1 }]'
    )


def test_bad_limits_in_a_file_name_the_schedule_and_the_field(tmp_path: Path) -> None:
    text = """
[[schedule]]
id = "a"
task = "t"
every = 60
limits = [{ key = "crm", rate = "100/q" }]

[[schedule]]
id = "b"
task = "t"
every = 60
limits = { key = "crm", rate = "100/m" }

[[schedule]]
id = "c"
task = "t"
every = 60
limits = [{ key = "crm", conc = 2 }, { key = "x" }]

[[schedule]]
id = "d"
task = "t"
every = 60
limits = [{ key = "customer:{customer_id}", concurrency = 0 }]

[[schedule]]
id = "e"
task = "t"
every = 60
limits = [{ key = "customer:{customer_id}", concurrency = 1 }]
"""
    with pytest.raises(ScheduleFileError) as err:
        load_file(write(tmp_path, text))
    said = dict(err.value.errors)
    assert said["schedule[0] (id 'a').limits[0].rate"].startswith("'100/q' is not a rate")
    assert said["schedule[1] (id 'b').limits"] == (
        'give a list of limits, e.g. limits = [{ key = "crm", rate = "100/m" }]; got '
        "{'key': 'crm', 'rate': '100/m'}"
    )
    assert said["schedule[2] (id 'c').limits[0]"].startswith("unknown field(s) ['conc']")
    assert (
        "concurrency is a whole number from 1" in said["schedule[3] (id 'd').limits[0].concurrency"]
    )
    assert said["schedule[4] (id 'e')"].startswith(
        "limits: limit key 'customer:{customer_id}' needs the payload field 'customer_id'"
    )
    assert "rsched.Limit" not in str(err.value)


GUARDED = """
[[schedule]]
id = "guarded"
task = "t"
every = "5m"
start_deadline = "2m"
pause_after_failures = 3
"""


async def test_a_start_deadline_and_pause_after_failures_in_a_file(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, GUARDED)
    assert (await sync_file(redis, settings, path)).ids("add") == ["guarded"]
    stored = await Client(redis, settings).get("guarded")
    assert (stored.start_deadline, stored.pause_after_failures) == (120, 3)
    assert (await sync_file(redis, settings, path)).unchanged == ["guarded"]
    path.write_text(GUARDED.replace("pause_after_failures = 3", "pause_after_failures = 5"))
    plan = await sync_file(redis, settings, path, dry_run=True)
    (line,) = plan.lines()[1:]
    assert line.endswith("pause_after_failures: 3 -> 5"), line
    path.write_text(GUARDED.replace('"2m"', '"-2m"').replace("= 3", "= 0"))
    with pytest.raises(ScheduleFileError) as caught:
        load_file(path)
    assert "start_deadline: -2m is negative" in str(caught.value)
    assert "pause_after_failures: give a whole number from 1" in str(caught.value)


CALENDARED = """
[[schedule]]
id = "weekdays"
task = "t"
cron = "0 9 * * *"
timezone = "Europe/Rome"
exclude = ["holidays"]
jitter = "5m"
"""


async def test_exclude_and_jitter_in_a_file(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    path = write(tmp_path, CALENDARED)
    with pytest.raises(ScheduleFileError) as caught:
        await sync_file(redis, settings, path)
    said = str(caught.value)
    assert "exclude: no exclusion calendar named 'holidays'" in said
    assert "rsched calendar set holidays" in said
    client = Client(redis, settings)
    await client.set_calendar("holidays", dates=["2026-12-25"])
    assert (await sync_file(redis, settings, path)).ids("add") == ["weekdays"]
    stored = await client.get("weekdays")
    assert (stored.exclude, stored.jitter) == (("holidays",), 300)
    assert (await sync_file(redis, settings, path)).unchanged == ["weekdays"]
    path.write_text(CALENDARED.replace('"5m"', '"30s"'))
    (line,) = (await sync_file(redis, settings, path, dry_run=True)).lines()[1:]
    assert line.endswith("jitter: 5m -> 30s"), line


FLOW_FILE = """
[[schedule]]
id = "etl"
cron = "0 2 * * *"
timezone = "Europe/Rome"

[schedule.flow]
chain = [
  { step = "etl.extract", payload = { day = "yesterday" } },
  { group = [
    { step = "etl.part", payload = { i = 0 } },
    { step = "etl.part", payload = { i = 1 } },
  ] },
  { step = "etl.merge", max_retries = 5 },
  { step = "etl.notify", on_failure = "continue" },
]
"""


async def test_a_schedules_file_declares_a_flow(
    tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    import rsched

    path = write(tmp_path, FLOW_FILE)
    plan = await sync_file(redis, settings, path)
    assert plan.ids("add") == ["etl"]
    stored = await Client(redis, settings).get("etl")
    expected = rsched.chain(
        rsched.step("etl.extract", {"day": "yesterday"}),
        rsched.group(rsched.step("etl.part", {"i": i}) for i in range(2)),
        rsched.step("etl.merge", max_retries=5),
        rsched.step("etl.notify", on_failure="continue"),
    )
    assert stored.flow == Schedule(id="x", cron="0 2 * * *", flow=expected).flow
    assert stored.task == "rsched.flow"
    assert (await sync_file(redis, settings, path)).changes == []
    bad = write(tmp_path, FLOW_FILE.replace('step = "etl.merge"', 'step = "etl merge"'), "bad.toml")
    with pytest.raises(ScheduleFileError, match=r"flow.*steps\[4\]"):
        load_file(bad)

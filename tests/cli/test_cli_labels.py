"""``rsched`` with labels: add/update --label, ls --label, and the bulk commands on a filter
(pause, resume, rm, trigger, cancel) with --dry-run (docs/labels.md)."""

from __future__ import annotations

import anyio
import orjson

from rsched import Client, Job, Settings, Worker
from tests.support.command import Cli
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings


def add(cli: Cli, sid: str, *more: str) -> None:
    code, _, err = cli("add", sid, "--task", "reports.run", "--every", "1h", *more)
    assert code == 0, err


def test_add_update_and_ls_by_label(cli: Cli) -> None:
    add(cli, "a", "--label", "team=billing", "--label", "env=prod")
    add(cli, "b", "--label", "team=billing")
    add(cli, "c", "--label", "team=sales")
    code, out, err = cli("ls", "--label", "team=billing")
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["a", "b"]
    code, out, _ = cli("--json", "ls", "--label", "team=billing", "--label", "env=prod")
    assert [s["id"] for s in orjson.loads(out)["schedules"]] == ["a"]
    assert orjson.loads(out)["schedules"][0]["labels"] == {"env": "prod", "team": "billing"}
    code, out, err = cli("update", "b", "--label", "team=sales")
    assert code == 0, err
    assert "labels" in out
    code, out, _ = cli("--json", "ls", "--label", "team=sales")
    assert [s["id"] for s in orjson.loads(out)["schedules"]] == ["b", "c"]
    code, _, err = cli("update", "b", "--clear", "labels")
    assert code == 0, err
    code, out, _ = cli("--json", "ls", "--label", "team=sales")
    assert [s["id"] for s in orjson.loads(out)["schedules"]] == ["c"]


def test_a_bad_label_names_the_flag(cli: Cli) -> None:
    code, _, err = cli("add", "a", "--task", "t", "--every", "1h", "--label", "Team=x")
    assert code == 1
    assert "--label" in err
    assert "is not a label key" in err
    code, _, err = cli("add", "a", "--task", "t", "--every", "1h", "--label", "team")
    assert code == 1
    assert "write it key=value" in err
    code, _, err = cli("ls", "--label", "team=a b")
    assert code == 1
    assert "--label" in err
    code, _, err = cli("pause", "--label", "team")
    assert code == 1
    assert "--label" in err


def test_bulk_commands_on_a_filter(cli: Cli) -> None:
    for sid in ("a", "b"):
        add(cli, sid, "--label", "team=billing")
    add(cli, "c", "--label", "team=billing", "--queue", "slow")
    add(cli, "d")
    code, out, err = cli("pause", "--label", "team=billing", "--dry-run")
    assert code == 0, err
    assert out.splitlines() == ["a", "b", "c", "3 schedule(s) selected", "dry run: nothing changed"]
    code, out, _ = cli("--json", "ls", "--paused")
    assert orjson.loads(out)["schedules"] == []
    code, out, err = cli("pause", "--label", "team=billing", "--queue", "slow", "--note", "db")
    assert code == 0, err
    assert out.splitlines() == ["paused c", "1 schedule(s): 1 paused"]
    code, out, _ = cli("--json", "pause", "--label", "team=billing")
    doc = orjson.loads(out)
    assert doc["selected"] == ["a", "b", "c"]
    assert doc["outcomes"] == {"a": "paused", "b": "paused", "c": "paused"}
    code, out, err = cli("resume", "--task", "reports.run")
    assert code == 0, err
    assert out.splitlines()[-1] == "4 schedule(s): 4 resumed"
    code, out, err = cli("trigger", "--label", "team=billing", "--queue", "slow")
    assert code == 0, err
    assert "fired c" in out
    code, out, err = cli("rm", "--label", "team=nobody")
    assert code == 0, err
    assert out.splitlines() == ["0 schedule(s) selected", "nothing to remove"]
    code, out, err = cli("rm", "--label", "team=billing")
    assert code == 0, err
    assert out.splitlines()[-1] == "3 schedule(s): 3 removed"
    code, out, _ = cli("--json", "ls")
    assert [s["id"] for s in orjson.loads(out)["schedules"]] == ["d"]
    code, out, _ = cli("rm", "d", "--dry-run")
    assert out.splitlines() == ["d", "1 schedule(s) selected", "dry run: nothing changed"]


def test_bulk_commands_refuse_mixed_or_no_targets(cli: Cli) -> None:
    add(cli, "a", "--label", "team=billing")
    code, _, err = cli("pause", "a", "--label", "team=billing")
    assert code == 2
    assert "not both" in err
    code, _, err = cli("rm")
    assert code == 2
    assert "give the schedule ids, or a filter" in err
    code, _, err = cli("cancel")
    assert code == 2
    assert "give the job ids, or a filter (--label K=V, --task T or --queue Q)" in err
    code, _, err = cli("resume", "--task", "bad task")
    assert code == 1
    assert "--task" in err
    code, out, _ = cli("--json", "ls")
    assert len(orjson.loads(out)["schedules"]) == 1


def test_cancel_on_a_filter(cli: Cli) -> None:
    for n in range(3):
        assert cli("enqueue", "mail.send", "--queue", "mail", "--id", f"m-{n}")[0] == 0
    assert cli("enqueue", "other.task", "--queue", "mail", "--id", "o-1")[0] == 0
    code, out, err = cli("cancel", "--task", "mail.send", "--dry-run")
    assert code == 0, err
    assert sorted(out.splitlines()[:3]) == ["m-0", "m-1", "m-2"]
    code, out, err = cli("cancel", "--task", "mail.send", "--queue", "mail")
    assert code == 0, err
    assert out.splitlines()[-1] == "3 job(s): 3 cancelled"
    code, out, err = cli("cancel", "o-1", "gone-1")
    assert code == 0, err
    assert "cancelled o-1" in out
    assert "not_found gone-1" in out


def test_jobs_by_label(cli: Cli) -> None:
    assert cli("enqueue", "mail.send", "--id", "m-1", "--label", "order=42")[0] == 0
    assert cli("enqueue", "mail.send", "--id", "m-2")[0] == 0
    code, _, err = cli("enqueue", "mail.send", "--label", "order=4 2")
    assert code == 1
    assert "--label" in err
    code, out, err = cli("--json", "jobs", "--label", "order=42")
    assert code == 0, err
    assert [j["execution_id"] for j in orjson.loads(out)["jobs"]] == ["m-1"]
    assert orjson.loads(out)["jobs"][0]["labels"] == {"order": "42"}
    code, out, err = cli("cancel", "--label", "order=42")
    assert code == 0, err
    assert out.splitlines()[-1] == "1 job(s): 1 cancelled"
    code, out, err = cli("--json", "runs", "--label", "order=42")
    assert code == 0, err
    (run,) = orjson.loads(out)["runs"]
    assert (run["execution_id"], run["status"], run["labels"]) == (
        "m-1",
        "cancelled",
        {"order": "42"},
    )


async def _dead_letters(settings: Settings) -> None:
    """Two dead letters on the default queue, one of a job enqueued with order=1."""
    worker = Worker(queues=["default"], settings=fast_settings(settings))

    @worker.task("boom")
    async def boom(job: Job) -> None:
        raise ValueError("boom")

    async with Client.from_settings(settings) as client:
        await client.enqueue("boom", max_retries=0, labels={"order": "1"})
        await client.enqueue("boom", max_retries=0)
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run, None)
            await eventually(lambda: _dead_count(client, 2))
            worker.stop()


async def _dead_count(client: Client, n: int) -> bool:
    return len((await client.dead_letters("default")).items) == n


def test_dead_letters_by_label(cli: Cli, settings: Settings) -> None:
    anyio.run(_dead_letters, settings)
    code, out, err = cli("dead", "requeue", "--label", "order=1", "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1:] == ["1 dead letter(s) of queue default selected", "dry run: nothing changed"]
    code, out, err = cli("dead", "purge", "--label", "order=1")
    assert code == 0, err
    assert out.splitlines()[-1] == "purged 1 dead letter(s) from queue default"
    code, out, _ = cli("--json", "dead", "ls")
    assert len(orjson.loads(out)["dead_letters"]) == 1
    code, _, err = cli("dead", "purge", lines[0], "--label", "order=1")
    assert code == 2
    assert "not both" in err

"""``rsched audit``, ``rsched history ID --specs`` and ``rsched rollback``, and who the command's
and a schedules file's changes are recorded as (docs/audit.md)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rsched._cli.audit import default_actor
from tests.support.command import Cli


def test_audit_default_actor_and_rsched_actor(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSCHED_ACTOR", raising=False)
    assert cli("add", "a", "--task", "t", "--every", "60")[0] == 0
    monkeypatch.setenv("RSCHED_ACTOR", "release-bot")
    assert cli("update", "a", "--every", "120")[0] == 0
    code, out, err = cli("audit", "a", "--json")
    assert code == 0, err
    records = orjson.loads(out)["records"]
    assert [(r["action"], r["actor"], r["source"]) for r in records] == [
        ("update", "release-bot", "cli"),
        ("add", default_actor(), "cli"),
    ]
    assert "@" in default_actor()
    assert set(records[0]["changes"]) == {"every"}
    assert (records[0]["generation_before"], records[0]["generation_after"]) == (1, 2)
    code, out, _ = cli("audit", "--actor", "release-bot")
    assert code == 0
    assert "update" in out
    assert "release-bot" in out
    assert "add " not in out
    monkeypatch.setenv("RSCHED_ACTOR", "two words")
    code, _, err = cli("audit")
    assert code != 0
    assert "RSCHED_ACTOR" in err


def test_history_specs_and_rollback(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSCHED_ACTOR", "ops")
    cli("add", "a", "--task", "t", "--cron", "0 2 * * *")
    code, out, _ = cli("history", "a", "--specs")
    assert code == 0
    assert "no spec history" in out
    cli("update", "a", "--cron", "0 3 * * *")
    code, out, _ = cli("history", "a", "--specs", "--json")
    specs = orjson.loads(out)["specs"]
    assert [(s["generation"], s["actor"]) for s in specs] == [(2, "ops"), (1, None)]
    code, out, err = cli("rollback", "a", "--generation", "1")
    assert code == 0, err
    assert "now generation 3" in out
    code, out, _ = cli("show", "a", "--json")
    assert orjson.loads(out)["schedule"]["cron"] == "0 2 * * *"
    code, _, err = cli("rollback", "a", "--generation", "9")
    assert code != 0
    assert "--generation: generation 9 of 'a' is not kept" in err
    code, out, _ = cli("audit", "a", "-n", "1", "--json")
    assert orjson.loads(out)["records"][0]["action"] == "rollback"


def test_sync_is_recorded_as_the_file(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSCHED_ACTOR", "ci")
    path = tmp_path / "jobs.toml"
    path.write_text('source = "jobs"\n[[schedule]]\nid = "a"\ntask = "t"\nevery = 60\n')
    assert cli("sync", str(path))[0] == 0
    path.write_text('source = "jobs"\n[[schedule]]\nid = "a"\ntask = "t"\nevery = 90\n')
    assert cli("sync", str(path))[0] == 0
    path.write_text('source = "jobs"\n')
    assert cli("sync", str(path))[0] == 0
    _, out, _ = cli("audit", "a", "--json")
    records = orjson.loads(out)["records"]
    assert [(r["action"], r["source"], r["actor"]) for r in records] == [
        ("remove", "sync:jobs", "ci"),
        ("sync", "sync:jobs", "ci"),
        ("sync", "sync:jobs", "ci"),
    ]
    assert records[2]["generation_before"] is None
    assert records[1]["generation_before"] == 1

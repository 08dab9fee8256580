"""``--dst-gap`` and ``--dst-fold``: a cron schedule's DST rule on the command line (add, update,
--clear, show) and in the ``rsched cron`` preview."""

from __future__ import annotations

import re

import orjson
import pytest

from rsched._cli.main import main
from tests.support.command import Cli


def test_add_show_update_and_clear(cli: Cli) -> None:
    code, _, err = cli(
        "add", "n", "--task", "t", "--cron", "30 1 * * *", "--tz", "America/New_York",
        "--dst-gap", "skip", "--dst-fold", "both",
    )  # fmt: skip
    assert code == 0, err
    shown = cli("show", "n")[1]
    assert re.search(r"^dst: +gap skip, fold both$", shown, re.MULTILINE), shown
    spec = orjson.loads(cli("show", "n", "--json")[1])["schedule"]
    assert (spec["dst_gap"], spec["dst_fold"]) == ("skip", "both")

    code, out, err = cli("--json", "update", "n", "--dst-fold", "last")
    assert code == 0, err
    assert orjson.loads(out)["changed"] == ["dst_fold"]
    code, out, err = cli("--json", "update", "n", "--clear", "dst_fold", "--clear", "dst-gap")
    assert code == 0, err
    doc = orjson.loads(out)
    assert sorted(doc["changed"]) == ["dst_fold", "dst_gap"]
    assert (doc["schedule"]["dst_gap"], doc["schedule"]["dst_fold"]) == (None, None)
    shown = cli("show", "n")[1]
    assert "gap shift (cron's rule), fold first (cron's rule)" in shown

    code, _, err = cli("add", "bad", "--task", "t", "--cron", "0 2 * * *", "--dst-gap", "later")
    assert code == 2
    assert "--dst-gap: invalid choice: 'later' (choose from 'shift', 'skip')" in err
    # An interval has no wall times: the rule is kept but shown nowhere, and changes nothing.
    assert cli("add", "e", "--task", "t", "--every", "1h", "--dst-fold", "both")[0] == 0
    assert "dst:" not in cli("show", "e")[1]


def test_cron_preview_follows_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    offline = ["--redis-url", "redis://127.0.0.1:1/0"]  # needs no Redis
    args = ["cron", "30 1 * * *", "--tz", "America/New_York", "--after", "2026-10-31T00:00"]
    assert main([*offline, *args, "-n", "3", "--dst-fold", "both"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("; DST gap shift (cron's rule), fold both:")
    assert [line.split()[1:3] for line in out[2:]] == [
        ["01:30:00", "EDT"], ["01:30:00", "EDT"], ["01:30:00", "EST"],
    ]  # fmt: skip
    assert [line[:10] for line in out[2:]] == ["2026-10-31", "2026-11-01", "2026-11-01"]
    skip = ["cron", "30 2 * * *", "--tz", "America/New_York", "--after", "2026-03-07T12:00"]
    assert main([*offline, "--json", *skip, "-n", "1", "--dst-gap", "skip"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["dst_gap"], doc["dst_fold"]) == ("skip", None)
    assert [t["at"] for t in doc["times"]] == ["2026-03-09T02:30:00-04:00"]

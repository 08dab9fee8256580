"""A job's progress and log lines as stored and read (no Redis), and the worker's level setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rsched._core.job_logs import (
    check_fraction,
    cut,
    encode_line,
    logged_attempts,
    parse_line,
    parse_progress,
)
from rsched._core.settings import Settings, WorkerSettings


def test_a_line_is_read_back_and_a_foreign_one_skipped() -> None:
    record = parse_line(encode_line(1_700_000_000_123, "warning", "disk <full>"), 2)
    assert record is not None
    assert (record.attempt, record.level, record.message) == (2, "warning", "disk <full>")
    assert record.at.isoformat() == "2023-11-14T22:13:20.123000+00:00"
    for foreign in ("not json", "[1, 2]", '{"a": 1}', '["x", "info", "m"]'):
        assert parse_line(foreign, 1) is None


def test_progress_is_read_back_and_a_broken_hash_is_none() -> None:
    progress = parse_progress({"fraction": "0.5", "note": "", "at": "1000", "attempt": "3"})
    assert progress is not None
    assert (progress.fraction, progress.note, progress.attempt) == (0.5, None, 3)
    assert progress.as_dict()["at"] == "1970-01-01T00:00:01+00:00"
    assert parse_progress({"bytes:1": "10"}) is None  # a log, no progress yet
    assert parse_progress({"fraction": "2", "at": "1"}) is None
    assert parse_progress({"fraction": "x", "at": "1"}) is None


def test_the_attempts_with_a_log() -> None:
    fields = {"bytes:2": "5", "last:2": "t", "bytes:10": "1", "bytes:x": "1", "fraction": "1"}
    assert logged_attempts(fields) == [2, 10]


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("inf"), float("nan"), "0.5", None, True])
def test_a_fraction_is_a_number_from_0_to_1(bad: object) -> None:
    with pytest.raises(ValueError, match="from 0 to 1"):
        check_fraction(bad)


def test_cut_marks_the_cut() -> None:
    assert cut("abc", 3) == "abc"
    assert cut("abcdef", 4) == "abc…"


def test_job_log_level_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WorkerSettings().job_log_level == "info"
    assert WorkerSettings(job_log_level="WARNING").job_log_level == "warning"  # type: ignore[arg-type]
    monkeypatch.setenv("RSCHED_WORKER__JOB_LOG_LEVEL", "debug")
    assert Settings().worker.job_log_level == "debug"
    with pytest.raises(ValidationError, match="job_log_level"):
        WorkerSettings(job_log_level="loud")  # type: ignore[arg-type]

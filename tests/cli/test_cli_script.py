"""`rsched script`: the scripts as rsched runs them, for a worker in another language."""

from __future__ import annotations

import hashlib

import pytest

from rsched._cli.main import main
from rsched._redis import scripts

# Needs no Redis: the URL below has nothing listening.
OFFLINE = ["--redis-url", "redis://127.0.0.1:1/0"]


def test_a_script_prints_expanded_and_byte_exact(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*OFFLINE, "script", "complete"]) == 0
    text = capsys.readouterr().out
    assert text == scripts.source("complete")
    assert text.startswith("#!lua\n--[[ complete")
    assert "-- @include" not in text  # every include inlined
    assert main([*OFFLINE, "script", "complete", "--sha"]) == 0
    assert capsys.readouterr().out == hashlib.sha1(text.encode()).hexdigest() + "\n"


def test_without_a_name_it_lists_the_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*OFFLINE, "script"]) == 0
    names = capsys.readouterr().out.splitlines()
    assert names == scripts.names()
    assert {"take", "start", "flow_start", "heartbeat", "complete", "retry", "dead", "reclaim",
            "promote", "hand_back", "register", "unregister"} <= set(names)  # fmt: skip


def test_an_unknown_script_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*OFFLINE, "script", "compleet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rsched: error: NAME: no script 'compleet'; give one of backfill,")

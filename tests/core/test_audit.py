"""The audit trail's records and spec history entries as stored (rsched._core.audit): parsing,
what is not rsched's, the actor and source rules."""

from __future__ import annotations

import orjson
import pytest

from rsched._core.audit import (
    AuditFilter,
    Author,
    audit_record,
    authored,
    check_source,
    current_author,
    safe_actor,
    spec_version,
)
from rsched._core.rules import check_actor


def test_records_as_stored() -> None:
    full = audit_record(
        "1700000000000-0",
        {"a": '["update","r","alice","cli",1,2,{"cron":["0 2 * * *","0 3 * * *"]},"x",["r"]]'},
    )
    assert full is not None
    assert (full.action, full.id, full.actor, full.source) == ("update", "r", "alice", "cli")
    assert (full.generation_before, full.generation_after) == (1, 2)
    assert full.changes == {"cron": ("0 2 * * *", "0 3 * * *")}
    assert full.summary() == "cron 0 2 * * * -> 0 3 * * *"
    assert full.at.year == 2023
    assert full.as_dict()["ids"] == ["r"]
    # Trailing nulls are left out by the script.
    short = audit_record("5-0", {"a": '["remove","r",null,"sdk",4]'})
    assert short is not None
    assert (short.actor, short.generation_before, short.generation_after) == (None, 4, None)
    assert short.changes == {}
    assert "ids" not in short.as_dict()
    for bad in ("", "{}", "[1]", '["add"]', '[null,"r"]', "not json"):
        assert audit_record("5-0", {"a": bad}) is None
    assert audit_record("5-0", {"other": "x"}) is None


def test_filter() -> None:
    bulk = audit_record("5-0", {"a": '["add","a",null,"sdk",null,1,null,"2 created",["a","b"]]'})
    assert bulk is not None
    assert AuditFilter(id="b").keeps(bulk)
    assert not AuditFilter(id="c").keeps(bulk)
    assert not AuditFilter(actor="x").keeps(bulk)


def test_author_and_rules() -> None:
    assert current_author() == Author(None, "sdk")
    with authored(Author("bob", "cli")):
        assert current_author().actor == "bob"
    assert current_author().actor is None
    arg = orjson.loads(Author("bob", "sync:jobs").arg("rollback", 100, 20))
    assert arg == {"s": "sync:jobs", "n": 100, "h": 20, "w": "bob", "a": "rollback"}
    assert "w" not in orjson.loads(Author().arg(None, 1, 0))
    assert check_source("sync:file:jobs") == "sync:file:jobs"
    for bad in ("elsewhere", "sync:", "sync:a b", ""):
        with pytest.raises(ValueError, match="not a source"):
            check_source(bad)
    assert check_actor("alice@ops-1.example") == "alice@ops-1.example"
    for bad in ("", "a b", "x" * 65, "é"):
        with pytest.raises(ValueError, match="not an actor"):
            check_actor(bad)
    assert safe_actor("Jane Doe") == "Jane_Doe"
    assert safe_actor("x" * 100) == "x" * 64
    assert safe_actor("") is None


def test_spec_versions() -> None:
    got = spec_version('[3,1700000000000,"ann","cli",{"task":"t","cron":"0 2 * * *"}]')
    assert got is not None
    assert (got.generation, got.actor, got.source) == (3, "ann", "cli")
    assert got.spec == {"task": "t", "cron": "0 2 * * *"}
    assert got.as_dict()["generation"] == 3
    for bad in ("[]", '["3",1,null,null,{}]', "[3,1,null,null,[]]", "nope"):
        assert spec_version(bad) is None

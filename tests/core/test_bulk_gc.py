"""collector_spared: a bulk call's objects are spared the garbage collector's passes, and the
collector is as the application left it afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from rsched._core.bulk import collector_spared


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()


def test_off_until_settled_then_the_objects_made_are_frozen_and_all_given_back() -> None:
    gc.enable()
    with collector_spared() as settled:
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
        settled()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_given_back_when_the_block_raises_before_settling() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_spared():
        raise RuntimeError
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("state", ["frozen", "disabled"])
def test_an_application_s_own_freeze_or_switch_is_left_alone(state: str) -> None:
    gc.enable()
    if state == "frozen":
        gc.freeze()
    else:
        gc.disable()
    frozen = gc.get_freeze_count()
    with collector_spared() as settled:
        settled()
        assert gc.isenabled() == (state == "frozen")
        assert gc.get_freeze_count() == frozen
    assert gc.isenabled() == (state == "frozen")
    assert gc.get_freeze_count() == frozen

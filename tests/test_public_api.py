"""The public surface: ``rsched.__all__`` and the package's exports agree."""

from __future__ import annotations

import rsched


def test_all_matches_exports() -> None:
    public = {name for name in vars(rsched) if not name.startswith("_")} - {"annotations"}
    exported = set(rsched.__all__) - {"__version__"}
    # Submodules appear as attributes once imported; they are private (leading underscore).
    assert exported == public
    for name in rsched.__all__:
        assert getattr(rsched, name) is not None


def test_every_error_derives_from_the_base() -> None:
    for name in rsched.__all__:
        obj = getattr(rsched, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, rsched.RschedError), name


def test_public_names_print_as_rsched() -> None:
    for name in rsched.__all__:
        obj = getattr(rsched, name)
        if isinstance(obj, type) or callable(obj):
            assert obj.__module__ == "rsched", name
    assert repr(rsched.ScheduleNotFound) == "<class 'rsched.ScheduleNotFound'>"

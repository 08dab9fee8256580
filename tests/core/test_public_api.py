"""The public surface: ``rsched.__all__`` and the package's exports agree."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

import rsched

#: Documented public subpackages: an attribute of ``rsched`` once imported, not in __all__.
PUBLIC_SUBPACKAGES = {"web", "contrib", "testing"}


def test_all_matches_exports() -> None:
    public = {name for name in vars(rsched) if not name.startswith("_")} - {"annotations"}
    exported = set(rsched.__all__) - {"__version__"}
    # Submodules appear as attributes once imported; they are private (leading underscore),
    # except the documented public subpackages.
    assert exported == public - PUBLIC_SUBPACKAGES
    for name in rsched.__all__:
        assert getattr(rsched, name) is not None


def test_public_subpackages() -> None:
    for name in PUBLIC_SUBPACKAGES:
        assert importlib.util.find_spec(f"rsched.{name}") is not None, name
    web = pytest.importorskip("rsched.web", reason="the web extra is not installed")
    assert web.__all__ == ("create_app",)
    public = {name for name in vars(web) if not name.startswith("_")} - {"annotations"}
    assert public == set(web.__all__)
    assert web.create_app.__doc__
    django = pytest.importorskip(
        "rsched.contrib.django", reason="the django extra is not installed"
    )
    assert django.__all__ == ("DjangoWorker", "RschedBackend", "build_worker")
    # Its submodules (apps, management) appear once Django has loaded the app.
    public = {
        name
        for name, value in vars(django).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    } - {"annotations"}
    assert public == set(django.__all__)
    assert all(getattr(django, name).__doc__ for name in django.__all__)


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

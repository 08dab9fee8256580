"""The package's layers, read from the source (``ast``): who may talk to Redis, who may import
what, and where exception classes live."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import rsched

SRC = Path(rsched.__file__).resolve().parent
MODULES = sorted(p.stem for p in SRC.glob("*.py") if p.stem != "__init__")
# Pure: no I/O. They import nothing that talks to Redis, so they are tested without a server and
# the planner or the model can never start a round trip by accident.
PURE = {
    "_plan", "_timing", "_cron", "_tz", "_model", "_job", "_format", "_codes", "_errors",
    "_keys", "_rules", "_page", "_history", "_bulk", "_registry", "_partition", "_words",
}  # fmt: skip
# What a pure module may import from rsched besides other pure modules.
PURE_MAY_IMPORT = {"_settings"}


def _tree(module: str) -> ast.Module:
    return ast.parse((SRC / f"{module}.py").read_text(), filename=f"{module}.py")


def _imports(module: str) -> list[tuple[str, str]]:
    """(imported module, name) of every import; name is '' for ``import x``."""
    found: list[tuple[str, str]] = []
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def _rsched_modules(module: str) -> set[str]:
    """The rsched modules ``module`` imports (``from rsched import _x`` included)."""
    out: set[str] = set()
    for source, name in _imports(module):
        if source == "rsched" and name in MODULES:
            out.add(name)
        elif source.startswith("rsched."):
            out.add(source.removeprefix("rsched."))
    return out


def test_pure_modules_exist() -> None:
    assert set(MODULES) >= PURE


@pytest.mark.parametrize("module", sorted(PURE))
def test_pure_modules_import_nothing_that_talks_to_redis(module: str) -> None:
    for source, _ in _imports(module):
        assert source.split(".")[0] != "redis", f"{module} imports {source}"
    others = _rsched_modules(module) - PURE - PURE_MAY_IMPORT
    assert not others, f"{module} imports {sorted(others)}, which are not pure"


def test_client_goes_through_the_stores() -> None:
    """_client/client.py calls no Redis command and no script itself: ScheduleStore / QueueStore do."""
    for node in ast.walk(_tree("_client")):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        func = node.func
        assert func.attr not in ("call", "call_packed", "script"), ast.unparse(node)
        target = func.value
        if isinstance(target, ast.Attribute) and target.attr in ("redis", "_redis"):
            assert func.attr == "aclose", ast.unparse(node)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_private_name_of_another(module: str) -> None:
    for source, name in _imports(module):
        if not (source == "rsched" or source.startswith("rsched.")):
            continue
        if source == "rsched" and name in MODULES:
            continue  # a private module, imported whole
        assert not name.startswith("_"), f"{module} imports {name} from {source}"


@pytest.mark.parametrize("module", MODULES)
def test_exception_classes_live_in_errors(module: str) -> None:
    if module == "_errors":
        return
    loaded = importlib.import_module(f"rsched.{module}")
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ClassDef):
            obj = getattr(loaded, node.name, None)
            assert not (inspect.isclass(obj) and issubclass(obj, BaseException)), (
                f"{module}.{node.name} is an exception class: define it in rsched._core.errors"
            )
